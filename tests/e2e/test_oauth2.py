"""OAuth 2.0 client credentials (pulsar-client's ``AuthenticationOauth2``) against a real
issuer (tests/oauth2_issuer.py) and a real broker whose token provider verifies the issuer's
key, with authorization on: only the OAuth2 client's role (its ``client_id``, the tokens'
``sub``) may produce and consume. A wrong secret, an unreachable issuer and a missing key file
are AuthenticationErrors naming what failed, promptly; a token that expires is replaced
without the application noticing."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pulsar_grpc.client import (
    AuthenticationError,
    AuthenticationOauth2,
    AuthenticationToken,
    AuthorizationError,
    Client,
    SyncClient,
)
from pulsar_grpc.client._auth_params import authentication_from
from tests.e2e.test_authorization import AUTHZ, KEY, grant, token
from tests.e2e.test_tls import produce_and_consume
from tests.oauth2_issuer import Issuer
from tests.support import BrokerThread
from tests.waiting import eventually

TIMEOUT_S = 30
APP, SECRET = "oauth-app", "s3cret"
AUDIENCE, SCOPE = "urn:pulsar:test", "produce consume"


@pytest.fixture
def oauth_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    # AUTHZ's tokenSecretKey verifies the issuer's tokens too (the same KEY); expired tokens
    # end their streams at the next check (a second).
    return broker_factory(**AUTHZ, authenticationRefreshCheckSeconds="1")


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    started = await Issuer(KEY, {APP: SECRET}).start()
    yield started
    await started.stop()


def key_file(directory: Path, secret: str = SECRET) -> Path:
    path = directory / "credentials.json"
    path.write_text(json.dumps({"client_id": APP, "client_secret": secret}))
    return path


def oauth2(issuer_url: str, private_key: str) -> AuthenticationOauth2:
    params = {
        "type": "client_credentials",
        "issuer_url": issuer_url,
        "private_key": private_key,
        "audience": AUDIENCE,
        "scope": SCOPE,
    }
    return AuthenticationOauth2(json.dumps(params))


async def refusal(auth: AuthenticationOauth2, broker: BrokerThread) -> str:
    """The AuthenticationError creating a producer ends with (promptly: no hang)."""
    async with Client(broker.service_url, authentication=auth, operation_timeout_ms=5000) as c:
        with pytest.raises(AuthenticationError) as info:
            await asyncio.wait_for(c.create_producer("refused"), TIMEOUT_S)
    return str(info.value)


async def test_the_oauth2_client_produces_and_consumes_as_its_role(
    oauth_broker: BrokerThread, issuer: Issuer, tmp_path: Path
) -> None:
    await grant(oauth_broker, APP, ["produce", "consume"])
    auth = oauth2(issuer.url, f"file://{key_file(tmp_path)}")
    async with Client(oauth_broker.service_url, authentication=auth) as client:
        assert await produce_and_consume(client, "oauth", b"hi") == b"hi"
    assert {**issuer.issued[0].form, "client_secret": "-"} == {
        "grant_type": "client_credentials",
        "client_id": APP,
        "client_secret": "-",
        "audience": AUDIENCE,
        "scope": SCOPE,
    }
    assert len(issuer.issued) == 1  # one token for every call while it is valid
    # Another role, authenticated, may not produce there.
    other = Client(oauth_broker.service_url, authentication=AuthenticationToken(token("else")))
    async with other:
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(other.create_producer("oauth"), TIMEOUT_S)

    def blocking() -> bytes:  # pulsar-client's blocking Client takes the same object
        sync = SyncClient(oauth_broker.service_url, authentication=auth)
        try:
            sync.create_producer("oauth-sync").send(b"sync")
            consumer = sync.subscribe("oauth-sync", "s", initial_position="earliest")
            return consumer.receive(timeout_millis=10_000).data()
        finally:
            sync.close()

    assert await asyncio.to_thread(blocking) == b"sync"


async def test_a_wrong_secret_is_an_authentication_error_naming_the_endpoint(
    oauth_broker: BrokerThread, issuer: Issuer, tmp_path: Path
) -> None:
    message = await refusal(oauth2(issuer.url, str(key_file(tmp_path, "wrong"))), oauth_broker)
    assert f"token endpoint {issuer.url}/oauth/token answered HTTP 401" in message
    assert issuer.issued == []


async def test_an_unreachable_issuer_or_a_missing_key_file_is_an_authentication_error(
    oauth_broker: BrokerThread, issuer: Issuer, tmp_path: Path
) -> None:
    with socket.socket() as bound:  # bound, never listening: connections are refused
        bound.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{bound.getsockname()[1]}"
        message = await refusal(oauth2(nowhere, str(key_file(tmp_path))), oauth_broker)
    assert f"{nowhere}/.well-known/openid-configuration is unreachable" in message
    missing = tmp_path / "missing.json"
    message = await refusal(oauth2(issuer.url, str(missing)), oauth_broker)
    assert f"cannot read the private_key file {missing}" in message
    (tmp_path / "bad.json").write_text("{not json")
    message = await refusal(oauth2(issuer.url, str(tmp_path / "bad.json")), oauth_broker)
    assert "is not JSON with client_id and client_secret" in message


@pytest.mark.parametrize(
    "params, words",
    [
        ("not json", "not a JSON object"),
        ('{"private_key": "/k.json"}', "issuer_url is required"),
        ('{"issuer_url": "http://i"}', "private_key is required"),
        ('{"type": "device", "issuer_url": "http://i", "private_key": "k"}', "not supported"),
        (
            '{"tokenEndpointAuthMethod": "tls_client_auth", "issuer_url": "i", "private_key": "k"}',
            "tokenEndpointAuthMethod 'tls_client_auth' is not supported",
        ),
    ],
)
def test_bad_auth_params_are_refused_at_once(params: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        AuthenticationOauth2(params)


async def test_an_expired_token_is_replaced_and_the_client_goes_on(
    oauth_broker: BrokerThread, issuer: Issuer
) -> None:
    """The first token lives 3 s: the broker ends the producer's stream at its first check
    after the token's exp, the SDK reconnects with a token fetched anew, and sending goes on.
    The key file is a data: URL here."""
    await grant(oauth_broker, APP, ["produce", "consume"])
    issuer.lifetimes_s = [3, 3600]
    credentials = json.dumps({"client_id": APP, "client_secret": SECRET}).encode()
    data_url = "data:application/json;base64," + base64.b64encode(credentials).decode()
    async with Client(oauth_broker.service_url, authentication=oauth2(issuer.url, data_url)) as c:
        producer = await c.create_producer("refreshed", batching_max_messages=1)
        consumer = await c.subscribe("refreshed", "sub", initial_position="earliest")
        await producer.send(b"before")
        await eventually(lambda: len(issuer.issued) >= 2, timeout=TIMEOUT_S,
                         what="a second token fetched when the first expired")  # fmt: skip
        await producer.send(b"after")
        received = [(await consumer.receive(timeout_ms=10_000)).data() for _ in range(2)]
    assert received == [b"before", b"after"]
    assert issuer.issued[0].token != issuer.issued[1].token
    assert issuer.configurations_served == 1  # the token endpoint is read once


async def test_the_oauth2_plugin_of_pulsar_conf_files(
    oauth_broker: BrokerThread, issuer: Issuer, tmp_path: Path
) -> None:
    """authPlugin/authParams as Java's client.conf spells them (the CLI and Spark read them)."""
    await grant(oauth_broker, APP, ["produce", "consume"])
    params = json.dumps({"issuerUrl": issuer.url, "privateKey": str(key_file(tmp_path))})
    auth = authentication_from(
        "org.apache.pulsar.client.impl.auth.oauth2.AuthenticationOAuth2", params
    )
    async with Client(oauth_broker.service_url, authentication=auth) as client:
        assert await produce_and_consume(client, "conf", b"conf") == b"conf"


async def test_lookups_over_http_carry_the_oauth2_token(
    oauth_broker: BrokerThread, issuer: Issuer, tmp_path: Path
) -> None:
    """A web service URL: the REST lookups and the gRPC streams send the same access token."""
    await grant(oauth_broker, APP, ["produce", "consume"])
    auth = oauth2(issuer.url, str(key_file(tmp_path)))
    async with Client(oauth_broker.http_url, authentication=auth) as client:
        assert await produce_and_consume(client, "over-http", b"http") == b"http"
    assert len(issuer.issued) == 1
