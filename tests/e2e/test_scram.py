"""SCRAM-SHA-256 two-way authentication on real brokers (PIP-59): the exchange over raw gRPC
stubs and through the SDK, the role token it earns, the cluster's signing keys in the metadata
store (shared by brokers, kept across a restart, rotatable, another cluster's refused), and
each failure ending UNAUTHENTICATED with Pulsar's AuthenticationError code and a clear message.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import grpc
import jwt
import psutil
import pytest
from scramp import ScramClient

from pulsar_grpc.broker.security.scram import verifier
from pulsar_grpc.client import AuthenticationError, AuthenticationSCRAM, Client, SyncClient
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_cli import cli
from tests.e2e.test_tls import produce_and_consume
from tests.e2e.wire import batch, error_code, stub
from tests.faultproxy import free_port
from tests.support import BrokerThread, StandaloneProcess, broker_config
from tests.waiting import eventually

USERS = {"alice": "wonderland", "bob": "builder"}
TIMEOUT_S = 15
TOPIC = "persistent://public/default/scram"


def credentials_file(directory: Path) -> Path:
    path = directory / "scram-users"
    path.write_text("".join(f"{u}:{verifier(p)}\n" for u, p in USERS.items()))
    return path


@pytest.fixture
def scram_broker_factory(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> Callable[..., BrokerThread]:
    users = credentials_file(tmp_path)

    def make(**overrides: object) -> BrokerThread:
        return broker_factory(
            authenticationEnabled="true",
            authenticationProviders="scram",
            scramAuthConf=str(users),
            **overrides,
        )

    return make


@pytest.fixture
def scram_broker(scram_broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return scram_broker_factory()


# ------------------------------------------------------------------ raw wire helpers


async def lookup(broker: BrokerThread, authorization: str) -> grpc.aio.AioRpcError | None:
    """A Lookup carrying ``authorization``: None when it succeeds, else its error."""
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        try:
            await stub(channel).Lookup(
                pb.LookupRequest(topic=TOPIC),
                metadata=[("authorization", authorization)],
                timeout=TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as exc:
            return exc
    return None


async def refused_lookup(broker: BrokerThread, authorization: str) -> grpc.aio.AioRpcError:
    """The refusal of a lookup; AssertionError while the broker still answers it."""
    error = await lookup(broker, authorization)
    assert error is not None, "the lookup was answered"
    return error


def trailers(error: grpc.aio.AioRpcError) -> dict[str, str]:
    return {k: v for k, v in error.trailing_metadata() or () if isinstance(v, str)}


def params(text: str) -> dict[str, str]:
    pairs = (item.strip().partition("=") for item in text.split(","))
    return {k.strip(): v.strip() for k, _, v in pairs}


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def unb64(text: str) -> str:
    return base64.b64decode(text).decode()


def assert_refused(error: grpc.aio.AioRpcError | None, message: str) -> None:
    assert error is not None, "the call was accepted"
    assert error.code() == grpc.StatusCode.UNAUTHENTICATED, error
    assert error_code(error) == pb.AuthenticationError
    assert message in (error.details() or ""), error.details()
    assert "pulsar-role-token" not in trailers(error)


async def client_first(broker: BrokerThread, client: ScramClient) -> tuple[str, str]:
    """Step 1: the state id and the header answering the challenge (client-final)."""
    error = await lookup(broker, f"SCRAM-SHA-256 data={b64(client.get_client_first())}")
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert error_code(error) == pb.AuthenticationError
    challenge = trailers(error)["www-authenticate"]
    scheme, _, rest = challenge.partition(" ")
    assert scheme == "SCRAM-SHA-256"
    answer = params(rest)
    client.set_server_first(unb64(answer["data"]))
    final = f"SCRAM-SHA-256 sid={answer['sid']}, data={b64(client.get_client_final())}"
    return answer["sid"], final


async def role_token(broker: BrokerThread, user: str = "alice") -> str:
    """A whole exchange over raw stubs; the client checks the broker's signature."""
    client = ScramClient(["SCRAM-SHA-256"], user, USERS[user])
    sid, final = await client_first(broker, client)
    error = await lookup(broker, final)
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED
    answer = trailers(error)
    info = params(answer["authentication-info"])
    assert info["sid"] == sid
    client.set_server_final(unb64(info["data"]))  # raises unless the broker knows the keys
    assert int(answer["pulsar-role-token-expires-ms"]) > time.time() * 1000
    return answer["pulsar-role-token"]


def pending(broker: BrokerThread) -> int:
    assert broker.service is not None and broker.service.authentication is not None
    scram = broker.service.authentication.scram
    assert scram is not None
    return len(scram.pending)


def rotate(broker: BrokerThread, revoke_previous: bool = False, token: str = "") -> dict:
    """The admin REST rotation (authenticated with a role token)."""
    query = "?revokePrevious=true" if revoke_previous else ""
    request = urllib.request.Request(
        f"{broker.http_url}/admin/v2/role-token-keys/rotate{query}",
        method="POST",
        headers={"Authorization": f"RoleToken {token}"},
    )
    with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
        return json.loads(response.read())


# ------------------------------------------------------------------ the flow


async def test_the_sdk_runs_the_exchange_then_produces_and_consumes(scram_broker):
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(scram_broker.service_url, authentication=auth) as client:
        assert await produce_and_consume(client, "scram-sdk", b"hi") == b"hi"
        header = auth.authorization()
        assert header is not None and header.startswith("RoleToken ")
        # Later calls send the role token: no exchange runs again (no state is pending, and
        # the token is the same one).
        assert await produce_and_consume(client, "scram-sdk-2", b"again") == b"again"
        assert auth.authorization() == header
    assert pending(scram_broker) == 0


async def test_the_sync_client_runs_the_same_exchange(scram_broker):
    def run() -> bytes:
        auth = AuthenticationSCRAM("bob", "builder")
        with SyncClient(scram_broker.service_url, authentication=auth) as client:
            producer = client.create_producer("sync-scram")
            producer.send(b"sync")
            consumer = client.subscribe("sync-scram", "s", initial_position="earliest")
            return consumer.receive(timeout_ms=10_000).data()

    assert await asyncio.to_thread(run) == b"sync"


async def test_the_raw_exchange_earns_a_role_token_that_produces(scram_broker):
    token = await role_token(scram_broker, "bob")
    assert await lookup(scram_broker, f"RoleToken {token}") is None
    async with grpc.aio.insecure_channel(scram_broker.grpc_address) as channel:
        call = stub(channel).Produce(
            metadata=[("x-pulsar-topic", "raw-scram"), ("authorization", f"RoleToken {token}")]
        )
        first = await asyncio.wait_for(call.read(), TIMEOUT_S)
        assert first.WhichOneof("response") == "ready"
        await call.write(batch(1, [b"x"]))
        receipt = await asyncio.wait_for(call.read(), TIMEOUT_S)
        assert receipt.WhichOneof("response") == "receipt"
        await call.done_writing()
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "bob" and claims["exp"] > time.time() and claims["jti"]


async def test_a_wrong_password_fails_the_sdk_at_once(scram_broker):
    auth = AuthenticationSCRAM("alice", "not-the-password")
    async with Client(scram_broker.service_url, authentication=auth) as client:
        with pytest.raises(AuthenticationError, match="proof does not verify"):
            await asyncio.wait_for(client.create_producer("never"), TIMEOUT_S)
    assert auth.authorization() is None
    assert pending(scram_broker) == 0


# ------------------------------------------------------------------ failures


async def test_wrong_proof_and_unknown_user_read_the_same(scram_broker):
    for user, password in [("alice", "wrong"), ("mallory", "wonderland")]:
        client = ScramClient(["SCRAM-SHA-256"], user, password)
        _, final = await client_first(scram_broker, client)
        assert_refused(
            await lookup(scram_broker, final),
            "SCRAM proof does not verify: unknown user or wrong password",
        )


async def test_an_unknown_state_id_is_refused(scram_broker):
    client = ScramClient(["SCRAM-SHA-256"], "alice", "wonderland")
    _, final = await client_first(scram_broker, client)
    forged = final.replace("sid=", "sid=not-issued-", 1)
    assert_refused(await lookup(scram_broker, forged), "unknown SCRAM state")


async def test_a_replayed_client_final_is_refused(scram_broker):
    client = ScramClient(["SCRAM-SHA-256"], "alice", "wonderland")
    _, final = await client_first(scram_broker, client)
    first = await lookup(scram_broker, final)
    assert first is not None and "pulsar-role-token" in trailers(first)
    assert_refused(await lookup(scram_broker, final), "unknown SCRAM state")


async def test_a_forged_role_token_signature_is_refused(scram_broker):
    token = await role_token(scram_broker)
    kid = jwt.get_unverified_header(token)["kid"]
    claims = jwt.decode(token, options={"verify_signature": False})
    claims["sub"] = "admin"
    forged = jwt.encode(claims, b"x" * 32, algorithm="HS256", headers={"kid": kid})
    assert_refused(await lookup(scram_broker, f"RoleToken {forged}"), "signature does not verify")
    assert_refused(await lookup(scram_broker, "RoleToken not.a.jwt"), "malformed role token")


async def test_an_expired_role_token_is_refused_and_the_sdk_renews_it(scram_broker_factory):
    broker = scram_broker_factory(scramRoleTokenExpirySeconds="1")
    token = await role_token(broker)
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(broker.service_url, authentication=auth) as client:
        assert await produce_and_consume(client, "scram-exp-1", b"1") == b"1"
        first = auth.authorization()
        error = await eventually(
            lambda: refused_lookup(broker, f"RoleToken {token}"),
            TIMEOUT_S,
            what="the role token expired",
        )
        assert_refused(error, "role token expired")
        # The SDK's token is as old: its next call runs the exchange again on its own.
        assert await produce_and_consume(client, "scram-exp-2", b"2") == b"2"
        assert auth.authorization() not in (None, first)


async def test_an_abandoned_exchange_expires(scram_broker_factory):
    broker = scram_broker_factory(inflightSaslContextExpiryMs="300")
    client = ScramClient(["SCRAM-SHA-256"], "alice", "wonderland")
    _, final = await client_first(broker, client)
    assert pending(broker) == 1
    await eventually(lambda: pending(broker) == 0, TIMEOUT_S, what="the abandoned exchange expired")
    assert_refused(await lookup(broker, final), "unknown SCRAM state")


async def test_thousands_of_failed_attempts_keep_pending_state_bounded(scram_broker_factory):
    # One address may hold a tenth of maxInflightSaslContext: these all come from 127.0.0.1.
    cap = 50
    broker = scram_broker_factory(maxInflightSaslContext=str(cap * 10))
    rss = psutil.Process().memory_info().rss
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:

        async def attempt(i: int, password: str) -> grpc.aio.AioRpcError:
            client = ScramClient(["SCRAM-SHA-256"], f"user{i}", password)
            header = f"SCRAM-SHA-256 data={b64(client.get_client_first())}"
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await stub(channel).Lookup(
                    pb.LookupRequest(topic=TOPIC),
                    metadata=[("authorization", header)],
                    timeout=TIMEOUT_S,
                )
            return info.value

        # Abandoned halfway, 40 at a time: the cap holds and the rest are refused clearly.
        errors: list[grpc.aio.AioRpcError] = []
        for start in range(0, 2000, 40):
            errors += await asyncio.gather(*(attempt(i, "x") for i in range(start, start + 40)))
            assert pending(broker) <= cap
    assert all(e.code() == grpc.StatusCode.UNAUTHENTICATED for e in errors)
    refused = [e for e in errors if "www-authenticate" not in trailers(e)]
    assert len(refused) == 2000 - cap
    assert all("too many SCRAM exchanges" in (e.details() or "") for e in refused)
    assert "from this address" in (refused[0].details() or "")
    # Full exchanges with a wrong password leave nothing behind either.
    broker2 = scram_broker_factory(maxInflightSaslContext=str(cap * 10))
    for _ in range(200):
        client = ScramClient(["SCRAM-SHA-256"], "alice", "wrong")
        _, final = await client_first(broker2, client)
        assert_refused(await lookup(broker2, final), "proof does not verify")
    assert pending(broker2) == 0
    growth = psutil.Process().memory_info().rss - rss
    assert growth < 64 * 1024 * 1024, f"RSS grew {growth} bytes"


# ------------------------------------------------------------------ the cluster's keys


async def test_a_role_token_works_on_another_broker_of_the_cluster(scram_broker_factory):
    store = f"memory:scram-{uuid.uuid4().hex}"
    first = scram_broker_factory(metadataStoreUrl=store)
    second = scram_broker_factory(metadataStoreUrl=store)
    token = await role_token(first)
    assert await lookup(second, f"RoleToken {token}") is None
    # And the other way round: the second broker signs with the same key.
    assert await lookup(first, f"RoleToken {await role_token(second)}") is None


def test_a_role_token_survives_a_restart(scram_broker_factory, tmp_path):
    # Not async: stopping a broker runs its loop to the end, which needs no loop running here.
    data = tmp_path / "restarted"
    config = broker_config(
        data,
        authenticationEnabled="true",
        authenticationProviders="scram",
        scramAuthConf=str(credentials_file(tmp_path)),
    )
    broker = BrokerThread(config).start()
    try:
        token = asyncio.run(role_token(broker))
    finally:
        broker.stop()
    again = scram_broker_factory(data_dir=data)
    assert asyncio.run(lookup(again, f"RoleToken {token}")) is None


async def test_another_clusters_role_token_is_refused(scram_broker_factory):
    ours = scram_broker_factory()
    theirs = scram_broker_factory()  # its own embedded store: another cluster
    token = await role_token(theirs)
    assert_refused(await lookup(ours, f"RoleToken {token}"), "does not accept")


async def test_rotation_keeps_old_tokens_until_revoked(scram_broker_factory):
    store = f"memory:scram-{uuid.uuid4().hex}"
    broker = scram_broker_factory(metadataStoreUrl=store)
    other = scram_broker_factory(metadataStoreUrl=store)
    old = await role_token(broker)
    old_kid = jwt.get_unverified_header(old)["kid"]
    ring = await asyncio.to_thread(rotate, broker, False, old)
    assert ring["current"] != old_kid and [k["id"] for k in ring["keys"]] == [
        old_kid,
        ring["current"],
    ]
    assert ring["keys"][0]["retiredMs"] is not None and "secret" not in ring["keys"][0]
    new = await role_token(other)
    assert jwt.get_unverified_header(new)["kid"] == ring["current"]
    for b in (broker, other):  # the retired key still verifies what it signed
        assert await lookup(b, f"RoleToken {old}") is None
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(broker.service_url, authentication=auth) as client:
        assert await produce_and_consume(client, "scram-rot-1", b"1") == b"1"
        held = auth.authorization()
        await asyncio.to_thread(rotate, broker, True, new)
        for b in (broker, other):  # revoked everywhere: the store told every broker
            error = await eventually(
                lambda b=b: refused_lookup(b, f"RoleToken {new}"),
                TIMEOUT_S,
                what="the revoked key no longer verifies",
            )
            assert_refused(error, "does not accept")
        # The SDK's token was revoked too: refused once, it runs the exchange again.
        assert await produce_and_consume(client, "scram-rot-2", b"2") == b"2"
        assert auth.authorization() not in (None, held)


# ------------------------------------------------------------------ the CLI


def test_cli_adds_users_and_rotates_keys_with_scram_credentials(broker_factory, tmp_path):
    users = tmp_path / "users"
    added = cli("scram", "add-user", "--credentials-file", str(users), "carol", "--password", "p1")
    assert added.returncode == 0, added.stderr
    replaced = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_grpc.cli.main",
            "scram",
            "add-user",
            "carol",
            "--credentials-file",
            str(users),
        ],
        input="p2\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert replaced.returncode == 0 and "replaced carol" in replaced.stdout, replaced.stderr
    line = users.read_text()
    assert line.startswith("carol:SCRAM-SHA-256$4096:") and "p2" not in line
    assert users.stat().st_mode & 0o077 == 0  # only its owner reads the keys
    broker = broker_factory(
        authenticationEnabled="true",
        authenticationProviders="scram",
        scramAuthConf=str(users),
    )
    url = ("--admin-url", broker.http_url)

    def scram_auth(password: str) -> tuple[str, ...]:
        return ("--auth-plugin", "scram", "--auth-params", f"userId:carol,password:{password}")

    refused = cli("scram", "role-token-keys", *url, *scram_auth("p1"))
    assert refused.returncode == 1 and "proof does not verify" in refused.stderr, refused.stderr
    listed = cli("scram", "role-token-keys", *url, *scram_auth("p2"))
    assert listed.returncode == 0, listed.stderr
    before = json.loads(listed.stdout)
    rotated = cli(
        "scram", "rotate-key", "--revoke-previous", *url,
        "--auth-plugin", "scram", "--auth-params", '{"userId":"carol","password":"p2"}',
    )  # fmt: skip
    assert rotated.returncode == 0, rotated.stderr
    after = json.loads(rotated.stdout)
    assert after["current"] != before["current"]
    assert [k["id"] for k in after["keys"]] == [after["current"]]  # the old one revoked


async def test_a_reconnecting_producer_runs_the_exchange_again(scram_broker):
    """The broker unloads the topic after the SDK's role token was revoked: the producer and
    consumer reconnect, their lookup is refused, the SDK authenticates again, and no message
    is lost."""
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(scram_broker.service_url, authentication=auth) as client:
        consumer = await client.subscribe("scram-reconnect", "sub")
        producer = await client.create_producer("scram-reconnect")
        await producer.send(b"1")
        held = auth.authorization()
        assert held is not None
        await asyncio.to_thread(rotate, scram_broker, True, held.removeprefix("RoleToken "))
        admin = await role_token(scram_broker)  # the held token no longer works
        request = urllib.request.Request(
            f"{scram_broker.http_url}/admin/v2/namespaces/public/default/unload",
            method="PUT",
            headers={"Authorization": f"RoleToken {admin}"},
        )
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=TIMEOUT_S)
        await asyncio.wait_for(producer.send(b"2"), TIMEOUT_S)
        received = [(await consumer.receive(timeout_ms=TIMEOUT_S * 1000)).data() for _ in "12"]
        assert received == [b"1", b"2"]
        assert auth.authorization() not in (None, held)


def none_alg_token() -> str:
    header = base64.urlsafe_b64encode(b'{"alg":"none","kid":"x"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"admin","exp":9999999999,"jti":"j"}')
    return f"{header}.{body.rstrip(b'=').decode()}."


# (authorization header, what the refusal says)
HOSTILE = [
    ("SCRAM-SHA-256", "carry no data="),
    ("SCRAM-SHA-256 data=", "carry no data="),
    ("SCRAM-SHA-256 data=!!!notbase64", "not base64"),
    ("SCRAM-SHA-256 data=" + b64("garbage"), "malformed SCRAM client-first"),
    ("SCRAM-SHA-256 data=" + b64(f"n,,n={'u' * 2000},r=abc"), "SCRAM message longer than"),
    ("SCRAM-SHA-256 data=" + b64("p=tls-unique,,n=alice,r=abc"), "malformed SCRAM client-first"),
    ("SCRAM-SHA-256 sid=x, data=" + b64("c=biws,r=abc,p=AAAA"), "unknown SCRAM state"),
    ("RoleToken", "carry no token"),
    ("RoleToken " + "a" * 5000, "malformed role token"),
    ("RoleToken " + none_alg_token(), "does not accept"),
    ("RoleToken " + jwt.encode({"sub": "admin"}, "k" * 32), "no key id"),
]


@pytest.mark.parametrize(("authorization", "message"), HOSTILE)
async def test_hostile_scram_headers_are_refused_clearly(scram_broker, authorization, message):
    assert_refused(await lookup(scram_broker, authorization), message)
    request = urllib.request.Request(
        f"{scram_broker.http_url}/admin/v2/clusters", headers={"Authorization": authorization}
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        await asyncio.to_thread(urllib.request.urlopen, request, timeout=TIMEOUT_S)
    assert info.value.code == 401
    assert message in json.loads(info.value.read())["reason"]
    assert pending(scram_broker) == 0


async def test_the_sdk_waits_for_a_starting_broker_and_keeps_its_token_over_a_restart(tmp_path):
    """An exchange that finds no broker is a connection failure (creation retries it), not an
    authentication failure; after a kill -9 and restart the broker still takes the token (its
    key is in the store), so the reconnecting producer needs no new exchange."""
    users = credentials_file(tmp_path)
    broker = StandaloneProcess(
        tmp_path / "data",
        ("--set", "authenticationEnabled=true", "--set", "authenticationProviders=scram",
         "--set", f"scramAuthConf={users}"),
        grpc_port=free_port(),
    )  # fmt: skip
    auth = AuthenticationSCRAM("alice", "wonderland")
    url = f"grpc://127.0.0.1:{broker.grpc_port}"
    try:
        async with Client(url, authentication=auth, initial_backoff_interval_ms=50) as client:
            creating = asyncio.ensure_future(client.create_producer("scram-late"))
            await asyncio.sleep(0.5)  # refused connections, retried
            assert not creating.done()
            await asyncio.to_thread(broker.start)
            producer = await asyncio.wait_for(creating, 30)
            await producer.send(b"1")
            held = auth.authorization()
            await asyncio.to_thread(broker.kill9)
            await asyncio.to_thread(broker.start)
            await asyncio.wait_for(producer.send(b"2"), 30)
            assert auth.authorization() == held
    finally:
        broker.stop()


def test_cli_clients_and_admin_with_scram(scram_broker):
    creds = ["--auth-plugin", "scram", "--auth-params", "userId:alice,password:wonderland"]
    url = ["--service-url", scram_broker.service_url]
    produced = cli("produce", "cli-scram", "-m", "hello", *url, *creds)
    assert produced.returncode == 0, produced.stderr
    admin = ["--admin-url", scram_broker.http_url]
    listed = cli("topics", *admin, *creds, "list")
    assert listed.returncode == 0, listed.stderr
    assert "persistent://public/default/cli-scram" in listed.stdout
    wrong = ["--auth-plugin", "scram", "--auth-params", "userId:alice,password:nope"]
    refused = cli("produce", "cli-scram", "-m", "x", *url, *wrong)
    assert refused.returncode == 1 and "proof does not verify" in refused.stderr, refused.stderr


async def test_streams_ended_for_an_expired_role_token_reopen_with_a_new_exchange(
    scram_broker_factory,
):
    """authenticationRefreshCheckSeconds ends a stream whose role token expired; the SDK runs
    the exchange again and reopens it, and the application sees nothing of it."""
    broker = scram_broker_factory(
        scramRoleTokenExpirySeconds="2", authenticationRefreshCheckSeconds="1"
    )
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(broker.service_url, authentication=auth) as client:
        consumer = await client.subscribe("scram-refresh", "sub")
        producer = await client.create_producer("scram-refresh")
        tokens = {auth.authorization()}
        sent = 0

        async def produce_across_two_renewals() -> None:
            nonlocal sent
            while len(tokens) < 3:
                await producer.send(f"m{sent}".encode())
                sent += 1
                tokens.add(auth.authorization())
                await asyncio.sleep(0.02)  # a steady rate

        await asyncio.wait_for(produce_across_two_renewals(), TIMEOUT_S * 2)
        received = [
            (await consumer.receive(timeout_ms=TIMEOUT_S * 1000)).data() for _ in range(sent)
        ]
        assert received == [f"m{i}".encode() for i in range(sent)]
        assert producer.is_connected() and consumer.is_connected()


async def test_with_authorization_only_a_super_user_rotates_the_keys(scram_broker_factory):
    broker = scram_broker_factory(authorizationEnabled="true", superUserRoles="alice")
    stranger = await role_token(broker, "bob")
    with pytest.raises(urllib.error.HTTPError) as refused:
        await asyncio.to_thread(rotate, broker, False, stranger)
    assert refused.value.code == 403
    assert "super-user" in json.loads(refused.value.read())["reason"]
    ring = await asyncio.to_thread(rotate, broker, False, await role_token(broker, "alice"))
    assert len(ring["keys"]) == 2


async def test_scram_over_a_web_service_url(scram_broker: BrokerThread) -> None:
    """An http:// service URL: the exchange rides on the REST lookup (RFC 7804 headers), and
    the role token it earns opens the gRPC streams; a wrong password fails promptly."""
    auth = AuthenticationSCRAM("alice", "wonderland")
    async with Client(scram_broker.http_url, authentication=auth) as client:
        assert await produce_and_consume(client, "scram-http", b"http") == b"http"
    wrong = AuthenticationSCRAM("alice", "not-it")
    async with Client(scram_broker.http_url, authentication=wrong, operation_timeout_ms=5000) as c:
        with pytest.raises(AuthenticationError):
            await asyncio.wait_for(c.create_producer("scram-http"), 30)
