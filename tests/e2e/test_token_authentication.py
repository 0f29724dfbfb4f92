"""Token authentication on a real broker (authenticationProviders=token): a JWT in
``Authorization: Bearer`` proves its ``sub`` role over gRPC and HTTP, with the key given as
Pulsar gives it (``tokenSecretKey=data:;base64,...``); a token made by `pulsar-grpc tokens
create` for the same key works end to end; expired, foreign-key and malformed tokens are
refused UNAUTHENTICATED (401 on HTTP) before the broker does anything for them."""

from __future__ import annotations

import asyncio
import base64
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import AuthenticationError, AuthenticationToken, Client
from tests.e2e.test_authentication import topics_of
from tests.e2e.test_cli import cli
from tests.e2e.test_tls import produce_and_consume
from tests.support import BrokerThread

KEY = create_secret_key()
TIMEOUT_S = 15


@pytest.fixture
def token_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(
        authenticationEnabled="true",
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        tokenSecretKey="data:;base64," + base64.b64encode(KEY).decode(),
    )


def http_status(url: str, token: str | None) -> int:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_a_token_proves_its_role_and_bad_tokens_are_refused(
    token_broker: BrokerThread,
) -> None:
    url = token_broker.service_url
    good = create_token(KEY, "alice", expires_at=int(time.time()) + 3600)
    async with Client(url, authentication=AuthenticationToken(good)) as client:
        assert await produce_and_consume(client, "token-ok", b"hi") == b"hi"
    refused = {
        "expired": create_token(KEY, "alice", expires_at=int(time.time()) - 60),
        "another key": create_token(create_secret_key(), "alice"),
        "malformed": "not-a-jwt",
    }
    for why, token in refused.items():
        auth = AuthenticationToken(token)
        async with Client(url, authentication=auth, operation_timeout_ms=5000) as client:
            with pytest.raises(AuthenticationError):
                await asyncio.wait_for(client.create_producer(f"refused-{why}"), TIMEOUT_S)
    assert topics_of(token_broker) == ["persistent://public/default/token-ok"]

    admin = f"{token_broker.http_url}/admin/v2/persistent/public/default"
    assert await asyncio.to_thread(http_status, admin, good) == 200
    assert await asyncio.to_thread(http_status, admin, None) == 401
    assert await asyncio.to_thread(http_status, admin, refused["expired"]) == 401


async def test_a_token_supplier_gives_each_call_a_fresh_token(token_broker: BrokerThread) -> None:
    made: list[str] = []

    def supplier() -> str:
        made.append(create_token(KEY, "bob", expires_at=int(time.time()) + 60))
        return made[-1]

    async with Client(token_broker.service_url, authentication=AuthenticationToken(supplier)) as c:
        assert await produce_and_consume(c, "supplied", b"fresh") == b"fresh"
    assert len(made) >= 2  # a lookup and the streams each asked


def test_a_token_from_the_tokens_command_works_with_the_cli(
    token_broker: BrokerThread, tmp_path
) -> None:
    key_file = tmp_path / "secret.key"
    key_file.write_bytes(KEY)  # raw bytes, as `tokens create-secret-key --output` writes them
    created = cli("tokens", "create", "--secret-key", f"file://{key_file}", "--subject", "carol")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip()
    url = ["--service-url", token_broker.service_url]
    produced = cli("produce", "cli-token", "-m", "hello", *url,
                   "--auth-plugin", "token", "--auth-params", f"token:{token}")  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    denied = cli("produce", "cli-token", "-m", "x", *url, "--operation-timeout-ms", "3000")
    assert denied.returncode == 1 and "AuthenticationError" in denied.stderr, denied.stderr
