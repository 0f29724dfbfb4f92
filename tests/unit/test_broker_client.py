"""The broker's own client for other brokers (broker/web/broker_client.py): its properties are
checked at load as a client's authPlugin/authParams are; its credentials go on every request,
the redirect to another broker (another port, so another origin) included; which advertised
address it calls."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration, load_config
from pulsar_grpc.broker.web.broker_client import BrokerClient, WebScheme, refusal

TIMEOUT = aiohttp.ClientTimeout(total=10)


def config(**properties: str) -> ServiceConfiguration:
    return load_config(None, {}, properties)


def test_bad_broker_client_properties_are_refused_at_load(tmp_path) -> None:
    absent = tmp_path / "absent.pem"
    refused = [
        (
            {"brokerClientAuthenticationPlugin": "kerberos"},
            "brokerClientAuthenticationPlugin: authPlugin: unknown plugin 'kerberos'",
        ),
        (
            {"brokerClientAuthenticationParameters": "token:x"},
            "brokerClientAuthenticationParameters: authParams given without authPlugin",
        ),
        (
            {
                "brokerClientAuthenticationPlugin": "basic",
                "brokerClientAuthenticationParameters": "userId:u",
            },
            "brokerClientAuthenticationParameters: authParams: userId and password",
        ),
        (
            {
                "brokerClientAuthenticationPlugin": "oauth2",
                "brokerClientAuthenticationParameters": '{"issuer_url":"http://i","private_key":"k"}',
            },
            "brokerClientAuthenticationPlugin: oauth2 is not supported for the broker's own",
        ),
        (
            {"brokerClientTrustCertsFilePath": str(absent)},
            f"brokerClientTrustCertsFilePath: cannot read {absent}",
        ),
    ]
    for properties, expected in refused:
        with pytest.raises(ConfigError) as failure:
            config(**properties)
        assert expected in str(failure.value)
    token = config(
        brokerClientAuthenticationPlugin="org.apache.pulsar.client.impl.auth.AuthenticationToken",
        brokerClientAuthenticationParameters="token:abc",
    )
    client = BrokerClient(token)
    assert client.authentication is not None
    assert client.authentication.authorization() == "Bearer abc"
    assert BrokerClient(config()).authentication is None


def test_the_address_called_follows_broker_client_tls_enabled() -> None:
    plain = BrokerClient(config())
    tls = BrokerClient(config(brokerClientTlsEnabled="true"))
    assert (plain.scheme, tls.scheme) == (WebScheme.HTTP, WebScheme.HTTPS)
    both = ("http://b:8080", "https://b:8443")
    assert plain.web_url(*both) == "http://b:8080"
    assert tls.web_url(*both) == "https://b:8443"
    assert tls.web_url("http://b:8080", None) == "http://b:8080"  # the only one it has


def test_a_refusal_names_the_properties_when_credentials_were_refused() -> None:
    assert refusal(401, '{"reason": "no credentials sent"}').startswith(
        "401 no credentials sent (this broker's own credentials were refused"
    )
    assert refusal(500, "boom") == "500 boom"


@pytest.fixture
async def two_brokers() -> AsyncIterator[tuple[str, list[str | None]]]:
    """Two web servers on their own ports: the first redirects (307) to the second, which
    records the Authorization header of each request it gets."""
    seen: list[str | None] = []

    async def owner(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization"))
        return web.Response(status=204)

    owner_app = web.Application()
    owner_app.router.add_put("/admin/x", owner)
    owner_runner = web.AppRunner(owner_app)
    await owner_runner.setup()
    owner_site = web.TCPSite(owner_runner, "127.0.0.1", 0)
    await owner_site.start()
    owner_port = owner_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect(f"http://127.0.0.1:{owner_port}/admin/x")

    asked_app = web.Application()
    asked_app.router.add_put("/admin/x", redirect)
    asked_runner = web.AppRunner(asked_app)
    await asked_runner.setup()
    asked_site = web.TCPSite(asked_runner, "127.0.0.1", 0)
    await asked_site.start()
    asked_port = asked_site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{asked_port}/admin/x", seen
    await asked_runner.cleanup()
    await owner_runner.cleanup()


async def test_the_credentials_follow_a_redirect_to_another_broker(
    two_brokers: tuple[str, list[str | None]],
) -> None:
    url, seen = two_brokers
    client = BrokerClient(
        config(
            brokerClientAuthenticationPlugin="token",
            brokerClientAuthenticationParameters="token:abc",
        )
    )
    async with client.session(TIMEOUT) as http, http.put(url) as response:
        assert response.status == 204
    assert seen == ["Bearer abc"]  # aiohttp alone drops it on a redirect to another port
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as plain,
        plain.put(url, headers={"Authorization": "Bearer abc"}) as response,
    ):
        assert response.status == 204
    assert seen == ["Bearer abc", None]
