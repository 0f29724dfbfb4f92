"""Hostile tokens against real brokers, over gRPC and HTTP alike: each is refused before the
broker does anything for it (UNAUTHENTICATED with Pulsar's AuthenticationError code; 401 with
a reason on the admin API), the reason says what is wrong without echoing the token, nothing is
created, and thousands of refusals leave the broker's memory where it was.

One broker checks HS256 tokens made with a secret key and an audience (tokenAudienceClaim=aud,
tokenAudience=broker-a); another checks RS256 tokens with a public key, where the classic
algorithm confusion (an HS256 token "signed" with the public key as its secret) must fail.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import grpc
import psutil
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token, decode_private_key
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_authentication import produce_refusal, topics_of
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread
from tests.unit.test_tokens import b64url, claims_token, der_private, hs256, jws

KEY = create_secret_key()
RSA_KEY = rsa.generate_private_key(65537, 2048)
PUBLIC_PEM = RSA_KEY.public_key().public_bytes(
    serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
)
AUDIENCE = "broker-a"
NONE_HEADER = b64url(b'{"alg":"none"}')
TIMEOUT_S = 15


def hostile_tokens() -> list[tuple[str, str, str, str]]:
    """(case, broker kind, token, what the refusal says), made when the test runs."""
    now = int(time.time())
    ok = {"sub": "alice", "aud": AUDIENCE}
    good = claims_token(ok, key=KEY)
    header, payload, signature = good.split(".")
    return [
        ("garbage", "secret", "not-a-jwt", "malformed token"),
        ("two parts", "secret", f"{header}.{payload}", "malformed token"),
        ("alg none", "secret", f"{NONE_HEADER}.{payload}.", "alg=none"),
        ("another key", "secret", claims_token(ok, key=create_secret_key()), "does not verify"),
        (
            "tampered payload",
            "secret",
            f"{header}.{b64url(json.dumps({**ok, 'sub': 'root'}).encode())}.{signature}",
            "does not verify",
        ),
        ("expired", "secret", claims_token({**ok, "exp": now - 60}, key=KEY), "expired"),
        ("not yet valid", "secret", claims_token({**ok, "nbf": now + 600}, key=KEY), "not valid"),
        ("no audience", "secret", claims_token({"sub": "alice"}, key=KEY), "no audience claim"),
        (
            "wrong audience",
            "secret",
            claims_token({"sub": "alice", "aud": "broker-b"}, key=KEY),
            "does not include",
        ),
        (
            "RS256 token against a secret key",
            "secret",
            create_token(decode_private_key(der_private(RSA_KEY), "RS256"), "alice"),
            "signed with 'RS256'",
        ),
        (
            "HS256 signed with the RSA public key as secret",
            "public",
            jws(b'{"alg":"HS256"}', b'{"sub":"admin"}', hs256(PUBLIC_PEM)),
            "verifies only RS256",
        ),
    ]


@pytest.fixture
def brokers(broker_factory: Callable[..., BrokerThread]) -> dict[str, BrokerThread]:
    public = base64.b64encode(
        RSA_KEY.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    ).decode()
    return {
        "secret": broker_factory(
            authenticationEnabled="true",
            authenticationProviders="token",
            tokenSecretKey="data:;base64," + base64.b64encode(KEY).decode(),
            tokenAudienceClaim="aud",
            tokenAudience=AUDIENCE,
        ),
        "public": broker_factory(
            authenticationEnabled="true",
            authenticationProviders="token",
            tokenPublicKey="data:;base64," + public,
            tokenPublicAlg="RS256",
        ),
    }


def http_refusal(broker: BrokerThread, authorization: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{broker.http_url}/admin/v2/persistent/public/default")
    request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status), ""
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return exc.code, str(json.loads(body).get("reason", ""))
        except ValueError:  # refused before the broker's own handlers: a plain-text answer
            return exc.code, body.decode(errors="replace")


async def lookup_refusal(broker: BrokerThread, authorization: str) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub(channel).Lookup(
                pb.LookupRequest(topic="persistent://public/default/hostile"),
                metadata=[("authorization", authorization)],
                timeout=TIMEOUT_S,
            )
    return info.value


async def test_every_hostile_token_is_refused_over_grpc_and_http(
    brokers: dict[str, BrokerThread],
) -> None:
    good = claims_token({"sub": "alice", "aud": AUDIENCE}, key=KEY)
    assert (await asyncio.to_thread(http_refusal, brokers["secret"], f"Bearer {good}"))[0] == 200
    for case, kind, token, says in hostile_tokens():
        broker, authorization = brokers[kind], f"Bearer {token}"
        error = await lookup_refusal(broker, authorization)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (case, error)
        assert error_code(error) == pb.AuthenticationError, case
        details = error.details() or ""
        assert says in details and len(details) < 300, (case, details)
        refusal = await produce_refusal(
            broker, f"hostile-{len(case)}", [("authorization", authorization)]
        )
        assert refusal == (grpc.StatusCode.UNAUTHENTICATED, pb.AuthenticationError), case
        status, reason = await asyncio.to_thread(http_refusal, broker, authorization)
        assert status == 401 and says in reason, (case, status, reason)
    # A header past gRPC's metadata limit (16 KiB) is refused by the transport; HTTP's own
    # limit answers a 4xx: either way, clearly and at once.
    oversized = "Bearer " + "x" * 20000
    error = await lookup_refusal(brokers["secret"], oversized)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
    status, _ = await asyncio.to_thread(http_refusal, brokers["secret"], oversized)
    assert status in (400, 401, 431), status
    for broker in brokers.values():
        assert topics_of(broker) == []  # nothing was created for any of them


async def test_thousands_of_refused_tokens_leave_memory_where_it_was(
    brokers: dict[str, BrokerThread],
) -> None:
    broker = brokers["secret"]
    bad = [token for _, kind, token, _ in hostile_tokens() if kind == "secret"]

    async def refuse(channel: grpc.aio.Channel, count: int) -> None:
        for start in range(0, count, 50):
            calls = [
                stub(channel).Lookup(
                    pb.LookupRequest(topic="persistent://public/default/hostile"),
                    metadata=[("authorization", f"Bearer {bad[i % len(bad)]}")],
                    timeout=TIMEOUT_S,
                )
                for i in range(start, start + 50)
            ]
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert all(
                isinstance(r, grpc.aio.AioRpcError) and r.code() == grpc.StatusCode.UNAUTHENTICATED
                for r in results
            )

    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        await refuse(channel, 1000)  # warm up: allocator pools, caches, the channel
        rss = psutil.Process().memory_info().rss
        await refuse(channel, 3000)
        growth = psutil.Process().memory_info().rss - rss
    assert growth < 16 * 1024 * 1024, f"RSS grew {growth} bytes over 3000 refusals"
