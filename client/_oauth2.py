"""OAuth 2.0 client credentials, as pulsar-client's ``AuthenticationOauth2(auth_params_string)``.

The flow is pulsar-client-cpp's ClientCredentialFlow (lib/auth/AuthOauth2.cc): the token
endpoint is read from ``{issuer_url}/.well-known/openid-configuration``; a POST of
``grant_type=client_credentials`` with the key file's ``client_id`` and ``client_secret``,
``audience`` and ``scope`` (when given) answers an ``access_token``, sent to the broker as a
``Bearer`` token (its token provider verifies it). The token is fetched again before its
``expires_in`` runs out, and when the broker refuses it. Any failure (the issuer unreachable,
the endpoint refusing the client, an answer that is not the expected JSON, an unreadable key
file) is an :class:`AuthenticationError` naming the URL or file, as pulsar-client reports
``ResultAuthenticationError``.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from ._arguments import check_type
from ._auth import Exchange, ExpiringHeader, ObtainedAuthentication
from ._errors import AuthenticationError

__all__ = ["AuthenticationOauth2"]

_WELL_KNOWN = "/.well-known/openid-configuration"
_FLOW = "client_credentials"
# How the client proves itself to the token endpoint: its secret in the form (pulsar-client-cpp
# also has tls_client_auth, a client certificate, not offered here).
_AUTH_METHOD = "client_secret_post"
_DATA_PREFIX = "data:application/json;base64,"
# pulsar-client-cpp's connect_timeout_seconds and request_timeout_seconds parameters.
_DEFAULT_CONNECT_TIMEOUT_S = 10
_DEFAULT_REQUEST_TIMEOUT_S = 30


@dataclass(frozen=True, slots=True)
class _Settings:
    """The parsed auth params string."""

    issuer_url: str
    private_key: str
    audience: str
    scope: str
    timeout: aiohttp.ClientTimeout


class AuthenticationOauth2(ObtainedAuthentication):
    """OAuth 2.0 client credentials from a JSON string: ``issuer_url`` and ``private_key``
    (required; a path, ``file://`` or ``file:`` URL, or ``data:application/json;base64,``
    URL of a JSON object with ``client_id`` and ``client_secret``), ``audience``, ``scope``,
    ``type`` (``client_credentials``, the only flow), ``connect_timeout_seconds`` and
    ``request_timeout_seconds``. The key file is read when a token is fetched, so a rotated
    secret is picked up."""

    scheme = "Bearer "

    def __init__(self, auth_params_string: str) -> None:
        check_type(str, auth_params_string, "auth_params_string")
        super().__init__()
        self._settings = _settings(auth_params_string)
        # Read from the issuer's well-known configuration once it answered (as pulsar-client).
        self._token_endpoint: str | None = None

    async def obtain(self, exchange: Exchange) -> ExpiringHeader:
        """Fetch an access token from the issuer (the broker plays no part: ``exchange`` is
        unused)."""
        settings = self._settings
        client_id, client_secret = _key_file(settings.private_key)
        form = {
            "grant_type": "client_credentials",
            "client_id": client_id,
            "client_secret": client_secret,
            "audience": settings.audience,
        }
        if settings.scope:
            form["scope"] = settings.scope
        async with aiohttp.ClientSession(timeout=settings.timeout) as session:
            if self._token_endpoint is None:
                self._token_endpoint = await _token_endpoint(session, settings.issuer_url)
            endpoint = self._token_endpoint
            answer = await _json(session.post(endpoint, data=form), f"token endpoint {endpoint}")
        return _access_token(answer, endpoint)


async def _token_endpoint(session: aiohttp.ClientSession, issuer_url: str) -> str:
    """The ``token_endpoint`` of the issuer's OpenID configuration."""
    well_known = issuer_url.rstrip("/") + _WELL_KNOWN
    configuration = await _json(session.get(well_known), well_known)
    endpoint = configuration.get("token_endpoint")
    if not isinstance(endpoint, str) or not endpoint:
        raise AuthenticationError(f"OAuth2: {well_known} names no token_endpoint")
    return endpoint


def _settings(text: str) -> _Settings:
    """The auth params string's settings; ValueError naming what is wrong."""
    try:
        params = json.loads(text)
    except ValueError:
        params = None
    if not isinstance(params, dict):
        raise ValueError("AuthenticationOauth2: auth_params_string is not a JSON object")
    flow = params.get("type", _FLOW)
    if flow != _FLOW:
        raise ValueError(f"AuthenticationOauth2: type {flow!r} is not supported ({_FLOW!r} is)")
    method = params.get("tokenEndpointAuthMethod", _AUTH_METHOD)
    if method != _AUTH_METHOD:
        raise ValueError(
            f"AuthenticationOauth2: tokenEndpointAuthMethod {method!r} is not supported "
            f"({_AUTH_METHOD!r} is)"
        )
    for required in ("issuer_url", "private_key"):
        if not isinstance(params.get(required), str) or not params[required]:
            raise ValueError(f"AuthenticationOauth2: {required} is required")
    for optional in ("audience", "scope"):
        check_type(str, params.get(optional, ""), optional)
    return _Settings(
        params["issuer_url"],
        params["private_key"],
        params.get("audience", ""),
        params.get("scope", ""),
        aiohttp.ClientTimeout(
            total=_seconds(params, "request_timeout_seconds", _DEFAULT_REQUEST_TIMEOUT_S),
            connect=_seconds(params, "connect_timeout_seconds", _DEFAULT_CONNECT_TIMEOUT_S),
        ),
    )


def _seconds(params: dict[str, Any], key: str, default: int) -> int:
    value = params.get(key, default)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"AuthenticationOauth2: {key} must be a positive number of seconds")
    return value


def _key_file(private_key: str) -> tuple[str, str]:
    """(client_id, client_secret) of the key file ``private_key`` names."""
    if private_key.startswith("data:"):
        if not private_key.startswith(_DATA_PREFIX):
            raise AuthenticationError(f"OAuth2: private_key must be a {_DATA_PREFIX}... URL")
        try:
            text = base64.b64decode(private_key.removeprefix(_DATA_PREFIX), validate=True)
        except (binascii.Error, ValueError):
            raise AuthenticationError("OAuth2: the private_key data URL is not base64") from None
        where = "the private_key data URL"
    else:
        path = Path(private_key.removeprefix("file:").removeprefix("//"))
        where = f"the private_key file {path}"
        try:
            text = path.read_bytes()
        except OSError as exc:
            raise AuthenticationError(f"OAuth2: cannot read {where}: {exc.strerror}") from None
    try:
        key = json.loads(text)
    except ValueError:
        key = None
    if not isinstance(key, dict) or not all(
        isinstance(key.get(name), str) for name in ("client_id", "client_secret")
    ):
        raise AuthenticationError(f"OAuth2: {where} is not JSON with client_id and client_secret")
    return key["client_id"], key["client_secret"]


async def _json(request: Any, what: str) -> dict[str, Any]:
    """The JSON object a 200 answer to ``request`` carries; AuthenticationError naming
    ``what`` otherwise."""
    try:
        async with request as response:
            if response.status != 200:
                body = (await response.text())[:200]
                raise AuthenticationError(f"OAuth2: {what} answered HTTP {response.status}: {body}")
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise AuthenticationError(f"OAuth2: {what} is unreachable: {exc!r}") from None
    try:
        answer = json.loads(text)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise AuthenticationError(f"OAuth2: {what} answered no JSON object: {text[:200]!r}")
    return answer


def _access_token(answer: dict[str, Any], endpoint: str) -> ExpiringHeader:
    """The Bearer header of the token endpoint's answer, until its ``expires_in``
    (pulsar-client refuses an answer without a positive one too)."""
    token, expires_in = answer.get("access_token"), answer.get("expires_in")
    if not isinstance(token, str) or not token:
        raise AuthenticationError(f"OAuth2: token endpoint {endpoint} answered no access_token")
    if not isinstance(expires_in, int) or isinstance(expires_in, bool) or expires_in <= 0:
        raise AuthenticationError(
            f"OAuth2: token endpoint {endpoint} answered expires_in {expires_in!r}, "
            "not a positive number of seconds"
        )
    now = time.time()
    return ExpiringHeader(f"Bearer {token}", now, now + expires_in)
