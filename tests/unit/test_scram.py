"""SCRAM's parts without a network: the credentials file, the bounded table of pending
exchanges, the role-token key ring (rotation, retirement, revocation) over an in-memory store,
the provider's configuration and the CLI's scram plugin."""

from __future__ import annotations

import argparse
import base64
import time
import uuid

import grpc
import jwt
import pytest
from scramp import ScramClient

from pulsar_grpc.broker.config import ConfigError, load_config
from pulsar_grpc.broker.errors import AuthenticationChallenge, AuthenticationError
from pulsar_grpc.broker.metadata import MemoryMetadataStore
from pulsar_grpc.broker.security.authentication import AuthenticationService
from pulsar_grpc.broker.security.role_tokens import KEYS_PATH, KeyRing, RoleTokens
from pulsar_grpc.broker.security.scram import (
    PendingExchanges,
    ScramAuthenticator,
    host_of,
    parse_credentials,
    verifier,
)
from pulsar_grpc.cli.auth import authentication_of
from pulsar_grpc.client import AuthenticationSCRAM
from pulsar_grpc.client._auth import ExchangeAnswer
from pulsar_grpc.client.exceptions import AuthenticationError as ClientAuthenticationError

HOUR_MS = 3600 * 1000


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_credentials_lines_parse_and_every_bad_line_is_reported():
    good = verifier("secret")
    users = parse_credentials(f"# users\n\nalice:{good}\n")
    assert set(users) == {"alice"} and users["alice"].iterations == 4096
    with pytest.raises(ConfigError) as info:
        parse_credentials(
            "bob:$2y$04$notscram\n"  # a bcrypt hash cannot serve SCRAM
            f"carol:{good.replace('4096', '1000', 1)}\n"  # too few iterations
            ":" + good + "\n"
        )
    assert [e.split(":")[1].strip() for e in info.value.errors] == ["line 1", "line 2", "line 3"]
    assert "fewer than the minimum 4096" in info.value.errors[1]


def test_pending_exchanges_expire_are_capped_and_are_taken_once():
    clock = Clock()
    pending = PendingExchanges(limit=2, expiry_s=5, clock=clock)
    server = object()
    first = pending.add(server, "alice", "h1")  # type: ignore[arg-type]
    pending.add(server, "bob", "h2")  # type: ignore[arg-type]
    with pytest.raises(AuthenticationError, match="too many SCRAM exchanges"):
        pending.add(server, "carol", "h3")  # type: ignore[arg-type]
    assert pending.take(first).user == "alice"
    with pytest.raises(AuthenticationError, match="unknown SCRAM state"):
        pending.take(first)  # a replay
    clock.now += 5
    assert len(pending) == 0  # the other one expired
    pending.add(server, "carol", "h3")  # type: ignore[arg-type]  # room again


def test_one_address_holds_a_share_of_the_pending_exchanges():
    """The first step needs no credentials: one host filling the pool would lock everyone
    out, so it may hold a tenth of it; others still get in, and a taken one frees a place."""
    pending = PendingExchanges(limit=20, expiry_s=5, clock=Clock())
    server = object()
    mine = [pending.add(server, "u", "10.0.0.5") for _ in range(2)]  # type: ignore[arg-type]
    with pytest.raises(AuthenticationError, match="from this address"):
        pending.add(server, "u", "10.0.0.5")  # type: ignore[arg-type]
    pending.add(server, "u", "10.0.0.6")  # type: ignore[arg-type]
    pending.take(mine[0])
    pending.add(server, "u", "10.0.0.5")  # type: ignore[arg-type]
    assert host_of("ipv4:10.0.0.5:51234") == "10.0.0.5"
    assert host_of("ipv6:[::1]:51234") == "[::1]"
    assert host_of("127.0.0.1") == "127.0.0.1"


async def test_the_exchange_on_the_authenticator_ends_with_a_token_the_ring_verifies():
    store = MemoryMetadataStore(f"scram-{uuid.uuid4().hex}")
    scram = ScramAuthenticator(parse_credentials(f"alice:{verifier('pw')}"), PendingExchanges(5, 5))
    scram.use_role_tokens(RoleTokens(store, lifetime_s=60))
    client = ScramClient(["SCRAM-SHA-256"], "alice", "pw")
    first = _b64(client.get_client_first())
    with pytest.raises(AuthenticationChallenge) as challenge:
        await scram.authenticate(f"SCRAM-SHA-256 data={first}")
    params = dict(p.split("=", 1) for p in challenge.value.metadata[0][1][14:].split(", "))
    client.set_server_first(_unb64(params["data"]))
    final = f"SCRAM-SHA-256 sid={params['sid']}, data={_b64(client.get_client_final())}"
    with pytest.raises(AuthenticationChallenge) as done:
        await scram.authenticate(final)
    answer = dict(done.value.metadata)
    client.set_server_final(_unb64(answer["authentication-info"].split("data=", 1)[1]))
    assert await scram.authenticate(f"RoleToken {answer['pulsar-role-token']}") == "alice"
    await store.close()


async def test_a_rotated_key_verifies_until_its_tokens_expire_then_drops_out():
    store = MemoryMetadataStore(f"scram-{uuid.uuid4().hex}")
    clock = Clock(time.time())  # near the real one: pyjwt checks exp against time.time()
    tokens = RoleTokens(store, lifetime_s=3600, clock=clock)
    old = (await tokens.issue("alice")).token
    ring = await tokens.rotate()
    assert len(ring.keys) == 2 and ring.keys[0].retired_ms == int(clock.now * 1000)
    new = (await tokens.issue("bob")).token
    assert jwt.get_unverified_header(new)["kid"] == ring.current.id
    assert await tokens.role_of(old) == "alice"
    clock.now += 3600  # the old key's last token has expired: the key no longer verifies
    with pytest.raises(AuthenticationError, match="does not accept"):
        await tokens.role_of(old)
    ring = await tokens.rotate()  # and the next rotation drops it from the store
    assert [k.id for k in ring.keys][:1] == [jwt.get_unverified_header(new)["kid"]]
    assert len(ring.keys) == 2
    ring = await tokens.rotate(revoke_previous=True)
    assert len(ring.keys) == 1
    stored = await store.get(KEYS_PATH)
    assert stored is not None and KeyRing.from_json(stored.value) == ring
    await store.close()


def test_a_damaged_key_ring_is_reported():
    for raw in (b"", b"{}", b'{"keys": []}', b'{"keys": [{"id": "k"}]}'):
        with pytest.raises(ValueError, match=KEYS_PATH):
            KeyRing.from_json(raw)


def test_the_scram_provider_needs_its_credentials_file(tmp_path):
    base = {"authenticationEnabled": "true", "authenticationProviders": "scram"}
    with pytest.raises(ConfigError, match="scramAuthConf: required"):
        AuthenticationService.from_config(load_config(None, {}, base))
    with pytest.raises(ConfigError, match="scramAuthConf: cannot read"):
        missing = str(tmp_path / "absent")
        AuthenticationService.from_config(load_config(None, {}, {**base, "scramAuthConf": missing}))
    users = tmp_path / "users"
    users.write_text(f"alice:{verifier('pw')}\n")
    service = AuthenticationService.from_config(
        load_config(None, {}, {**base, "scramAuthConf": str(users)})
    )
    assert service is not None and service.scram is not None
    with pytest.raises(ConfigError, match="maxInflightSaslContext"):
        load_config(None, {}, {**base, "maxInflightSaslContext": "0"})


def test_the_cli_scram_plugin():
    def args(params: str) -> argparse.Namespace:
        return argparse.Namespace(auth_plugin="scram", auth_params=params)

    assert isinstance(authentication_of(args("userId:u,password:p")), AuthenticationSCRAM)
    assert isinstance(authentication_of(args('{"userId":"u","password":"p"}')), AuthenticationSCRAM)
    with pytest.raises(ValueError, match="userId and password for the scram plugin"):
        authentication_of(args("userId:u"))


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _unb64(text: str) -> str:
    return base64.b64decode(text).decode()


async def test_the_client_refuses_a_challenge_asking_for_absurd_iterations():
    """A fake broker cannot make the client spend hours on PBKDF2 before its signature is
    checked: an iteration count past the bound is refused at once."""

    async def fake_broker(authorization: str) -> ExchangeAnswer:
        client_first = _unb64(authorization.split("data=", 1)[1])
        nonce = client_first.split("r=", 1)[1]
        server_first = f"r={nonce}fake,s={_b64('salt-salt-salt')},i=2000000000"
        challenge = f"SCRAM-SHA-256 sid=x, data={_b64(server_first)}"
        return ExchangeAnswer(grpc.StatusCode.UNAUTHENTICATED, "", {"www-authenticate": challenge})

    started = time.monotonic()
    with pytest.raises(ClientAuthenticationError, match="2000000000 iterations"):
        await AuthenticationSCRAM("alice", "pw").prepare(fake_broker)
    assert time.monotonic() - started < 5
