"""The broker's own HTTP client for the admin API of the cluster's brokers (itself included):
the leader's unload and split of a bundle on its owner (broker.cluster.load_manager), a
namespace unload's call to each bundle's owner (broker.web.bundles_admin), a partitioned
topic's stats gathered from each partition's owner (broker.web.partitioned_stats).

With authentication on, the other brokers ask this one for credentials like any client's.
Pulsar's brokerClientAuthenticationPlugin and brokerClientAuthenticationParameters name them;
they are parsed by the client's :func:`authentication_from`, as Pulsar's broker makes its
internal client's credentials with its client library's AuthenticationFactory. (With
authorization on, their role must be one of superUserRoles, as in Pulsar.) The Authorization
header goes on every request, each redirect included: aiohttp drops it on a redirect to another
host or port, which every redirect from one broker to another is.

brokerClientTlsEnabled makes the calls over https to the brokers' webServicePortTls addresses,
trusting brokerClientTrustCertsFilePath (else tlsTrustCertsFilePath, as Pulsar falls back);
a tls plugin's certificate is presented there.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import hdrs

from pulsar_grpc.client._auth import Authentication, AuthenticationTLS, ObtainedAuthentication
from pulsar_grpc.client._auth_params import authentication_from

if TYPE_CHECKING:
    from pulsar_grpc.broker.service_configuration import ServiceConfiguration

__all__ = ["BrokerClient", "WebScheme", "config_problems", "refusal"]

# A refusal quotes at most this much of another broker's error body.
REASON_CHARS = 300
_MISSING_CREDENTIALS = (
    " (this broker's own credentials were refused: brokerClientAuthenticationPlugin and "
    "brokerClientAuthenticationParameters name them, a super-user's)"
)


class WebScheme(Enum):
    """Which of a broker's advertised web addresses this broker calls."""

    HTTP = "http"
    HTTPS = "https"


class BrokerClient:
    """Sessions for calls to other brokers, with this broker's credentials and TLS trust."""

    def __init__(self, config: ServiceConfiguration) -> None:
        """Made from configuration that :func:`config_problems` has checked."""
        self.authentication: Authentication | None = authentication_from(
            config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters
        )
        self.scheme = WebScheme.HTTPS if config.brokerClientTlsEnabled else WebScheme.HTTP
        self._ssl = _ssl_context(_trust_certs(config), self.authentication)

    def web_url(self, http_url: str | None, https_url: str | None) -> str | None:
        """The address to call of a broker advertising these two: its https one when
        brokerClientTlsEnabled, else its http one; the other when it has only that one."""
        if self.scheme is WebScheme.HTTPS:
            return https_url or http_url
        return http_url or https_url

    def session(self, timeout: aiohttp.ClientTimeout) -> aiohttp.ClientSession:
        """A session whose every request (and redirect) carries this broker's credentials."""
        return aiohttp.ClientSession(
            timeout=timeout,
            connector=aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True),
            middlewares=(self._authorize,) if self.authentication is not None else (),
        )

    async def _authorize(
        self, request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
    ) -> aiohttp.ClientResponse:
        assert self.authentication is not None
        authorization = self.authentication.authorization()  # a supplier is asked each time
        if authorization:
            request.headers[hdrs.AUTHORIZATION] = authorization
        return await handler(request)


def refusal(status: int, body: str) -> str:
    """How another broker's error answer reads in this broker's own error: the status, its
    ``{"reason"}``, and for 401 or 403 which properties give this broker credentials."""
    try:
        reason = str(json.loads(body)["reason"])
    except (ValueError, KeyError, TypeError):
        reason = body[:REASON_CHARS]
    hint = _MISSING_CREDENTIALS if status in (401, 403) else ""
    return f"{status} {reason}{hint}"


def _trust_certs(config: ServiceConfiguration) -> str | None:
    return config.brokerClientTrustCertsFilePath or config.tlsTrustCertsFilePath


def _ssl_context(trust: str | None, authentication: Authentication | None) -> ssl.SSLContext | None:
    """The context https calls use: None (the system's trust) unless a trust file or a client
    certificate is configured."""
    certificate = authentication if isinstance(authentication, AuthenticationTLS) else None
    if trust is None and certificate is None:
        return None
    context = ssl.create_default_context(cafile=trust)
    if certificate is not None:
        context.load_cert_chain(certificate.certificate_path, certificate.private_key_path)
    return context


def config_problems(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """The broker client's properties that do not parse, or name files it cannot read."""
    try:
        authentication = authentication_from(
            config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters
        )
    except ValueError as exc:  # the message names authPlugin or authParams
        plugin = str(exc).startswith("authPlugin")
        yield f"brokerClientAuthentication{'Plugin' if plugin else 'Parameters'}", str(exc)
        return
    if isinstance(authentication, ObtainedAuthentication):
        # Sent as they are on each call: nothing runs SCRAM's exchange or fetches a token.
        yield (
            "brokerClientAuthenticationPlugin",
            f"{config.brokerClientAuthenticationPlugin} is not supported for the broker's own "
            "credentials (nor a proxy's): use token, basic or tls",
        )
        return
    files = [("brokerClientTrustCertsFilePath", config.brokerClientTrustCertsFilePath)]
    if isinstance(authentication, AuthenticationTLS):
        files += [
            ("brokerClientAuthenticationParameters", authentication.certificate_path),
            ("brokerClientAuthenticationParameters", authentication.private_key_path),
        ]
    for prop, path in files:
        if path is not None and not Path(path).is_file():
            yield prop, f"cannot read {path}"
