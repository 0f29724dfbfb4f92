"""Client credentials, named as pulsar-client's: ``Client(..., authentication=...)``.

A token or a user and password travel as the ``authorization`` header of every call (a token
supplier is asked again for each call and each reconnection, so a refreshed token is picked
up, and a stream the broker ends because its token expired reopens with a fresh one); a TLS
client certificate is presented on the TLS channels (mutual TLS), and the broker takes its
common name as the role. SCRAM (client/_scram.py) first runs its two-way exchange with the
broker, then sends the role token it earned. client/_auth_params.py builds any of them from
Pulsar's authPlugin and authParams.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from abc import ABCMeta, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import grpc

from ._arguments import check_type
from ._errors import AuthenticationError


class CredentialRenewal(Enum):
    """Whether connecting again can bring credentials other than those the broker refused."""

    FIXED = "fixed"  # the same every time: a token string, a password, a certificate
    SUPPLIED = "supplied"  # asked for afresh at every call: a token supplier, SCRAM's exchange


@dataclass(frozen=True, slots=True)
class ExchangeAnswer:
    """How the broker ended one call of a two-way exchange."""

    code: grpc.StatusCode
    details: str
    trailers: dict[str, str]


# Makes one call carrying the given ``authorization`` header and says how it ended.
Exchange = Callable[[str], Awaitable[ExchangeAnswer]]


# pulsar-client's (plugin, params) -> credentials: client/_auth_params.py's builder. That module
# imports this one for the classes it builds, so it hands the builder over as it loads
# (:func:`build_plugins_with`) rather than this one importing it; the package's __init__ loads
# it, so it is here before any Authentication can be made.
_build_plugin: Callable[[str, str], Authentication | None]


def build_plugins_with(build: Callable[[str, str], Authentication | None]) -> None:
    """Make ``build`` what ``Authentication(plugin, params)`` calls."""
    global _build_plugin
    _build_plugin = build


class _ByPlugin(ABCMeta):
    """``Authentication(plugin, params)`` itself, as pulsar-client's
    ``Authentication(dynamicLibPath, authParamsString)``, gives the credentials the plugin
    names (client/_auth_params.py: token, basic, tls, scram, or Pulsar's class names); its
    subclasses are made as usual."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is Authentication:
            return _by_plugin(*args, **kwargs)
        return super().__call__(*args, **kwargs)


def _by_plugin(dynamicLibPath: str, authParamsString: str) -> Authentication:
    check_type(str, dynamicLibPath, "dynamicLibPath")
    check_type(str, authParamsString, "authParamsString")
    authentication = _build_plugin(dynamicLibPath, authParamsString)
    if authentication is None:
        raise ValueError("Authentication needs a plugin name (token, basic, tls, scram or oauth2)")
    return authentication


class Authentication(metaclass=_ByPlugin):
    """What a client proves itself with. ``Authentication(plugin, params)`` (pulsar-client's
    ``Authentication(dynamicLibPath, authParamsString)``) builds one from a plugin name and
    its parameters: ``Authentication("token", "token:eyJ...")``."""

    @abstractmethod
    def authorization(self) -> str | None:
        """The ``authorization`` header value for the next call (None: no header)."""

    @property
    def renewal(self) -> CredentialRenewal:
        """SUPPLIED: when the broker ends a stream because its credentials expired (it checks
        every authenticationRefreshCheckSeconds), the stream reopens at once with fresh ones;
        FIXED: the application gets the AuthenticationError."""
        return CredentialRenewal.FIXED

    async def prepare(self, exchange: Exchange) -> None:
        """Runs before each call: a two-way method completes its exchange with the broker
        here (on ``exchange``) when it has nothing valid to send; one-step methods have
        nothing to do."""
        return None

    def refused(self, authorization: str | None) -> bool:
        """The broker refused a call sent with ``authorization``: whether that credential is
        now dropped, so that the call is worth one more try after :meth:`prepare`."""
        return False


# A credential obtained for a while is replaced when this share of its lifetime is left, so
# that a call never leaves with one about to expire on its way.
_RENEW_AT_REMAINING = 0.1


@dataclass(frozen=True, slots=True)
class ExpiringHeader:
    """An ``authorization`` header value good until ``expires`` (``time.time()``)."""

    header: str
    received: float
    expires: float

    def fresh(self, now: float) -> bool:
        return now < self.expires - (self.expires - self.received) * _RENEW_AT_REMAINING


class ObtainedAuthentication(Authentication):
    """Credentials obtained for a limited time (a SCRAM role token, an OAuth2 access token):
    :meth:`obtain` runs before the first call and again when the current one nears its
    expiry or the broker refuses it, once for all the calls waiting."""

    # The scheme of the headers :meth:`obtain` gives ("Bearer "): a refused header of
    # another scheme was a step of obtaining one, not one to drop.
    scheme: str

    def __init__(self) -> None:
        self._current: ExpiringHeader | None = None
        self._lock = asyncio.Lock()

    @abstractmethod
    async def obtain(self, exchange: Exchange) -> ExpiringHeader:
        """A new header, or :class:`AuthenticationError` saying why there is none."""

    def authorization(self) -> str | None:
        return self._current.header if self._current is not None else None

    @property
    def renewal(self) -> CredentialRenewal:
        """A stream ended because its credentials expired reopens at once: :meth:`prepare`
        obtains new ones for it."""
        return CredentialRenewal.SUPPLIED

    def refused(self, authorization: str | None) -> bool:
        if authorization is None or not authorization.startswith(self.scheme):
            return False  # a refused step of obtaining one: AuthenticationError was raised
        if self._current is not None and authorization == self._current.header:
            self._current = None  # expired early, or its key was revoked: obtain another
        # Otherwise a concurrent call has dropped or replaced it already: retry with that.
        return True

    async def prepare(self, exchange: Exchange) -> None:
        if self._current is not None and self._current.fresh(time.time()):
            return
        async with self._lock:
            if self._current is None or not self._current.fresh(time.time()):
                self._current = await self.obtain(exchange)


class AuthenticationToken(Authentication):
    """A token (a JWT), or a function returning the current one, sent as ``Bearer``."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not (isinstance(token, str) or callable(token)):
            raise ValueError(
                "Argument token is expected to be of type 'str' or a function returning 'str'"
            )
        if not callable(token) and not token:
            raise ValueError("AuthenticationToken needs a token or a token supplier")
        self._token = token

    def authorization(self) -> str:
        """The ``Bearer`` header; a supplier that raises, or returns no str, is an
        :class:`AuthenticationError` (its exception chained), as pulsar-client reports it."""
        if not callable(self._token):
            return f"Bearer {self._token}"
        try:
            token = self._token()
        except Exception as exc:
            raise AuthenticationError(f"the token supplier raised {exc!r}") from exc
        if not isinstance(token, str) or not token:
            raise AuthenticationError(f"the token supplier returned {token!r}, not a token")
        return f"Bearer {token}"

    @property
    def renewal(self) -> CredentialRenewal:
        return CredentialRenewal.SUPPLIED if callable(self._token) else CredentialRenewal.FIXED


class AuthenticationBasic(Authentication):
    """A user name and password (the broker checks them against its htpasswd file), as
    pulsar-client's: ``AuthenticationBasic(username, password)``, or
    ``AuthenticationBasic(auth_params_string='{"username": "u", "password": "p"}')`` (Java's
    ``userId`` is read too; ``method`` may be in it)."""

    def __init__(
        self,
        username: str | None = None,
        password: str | None = None,
        method: str = "basic",
        auth_params_string: str | None = None,
    ) -> None:
        if auth_params_string is not None:
            check_type(str, auth_params_string, "auth_params_string")
            username, password, method = _basic_params(auth_params_string)
        check_type(str, username, "username")
        check_type(str, password, "password")
        check_type(str, method, "method")
        assert username is not None and password is not None  # checked above, for mypy
        if method != "basic":
            raise NotImplementedError(
                f"AuthenticationBasic method {method!r}: the broker's provider is 'basic'"
            )
        if not username or ":" in username:
            raise ValueError("AuthenticationBasic needs a user name without ':'")
        pair = f"{username}:{password}".encode()
        self._header = "Basic " + base64.b64encode(pair).decode()

    def authorization(self) -> str:
        return self._header


def _basic_params(text: str) -> tuple[str, str, str]:
    """(username, password, method) of pulsar-client's basic auth_params_string (JSON)."""
    try:
        params = json.loads(text)
    except ValueError:
        params = None
    if not isinstance(params, dict):
        raise ValueError("auth_params_string: a JSON object with username and password")
    username = params.get("username", params.get("userId"))
    if username is None or "password" not in params:
        raise ValueError("auth_params_string: a JSON object with username and password")
    return username, params["password"], params.get("method", "basic")


class AuthenticationTLS(Authentication):
    """A client certificate and its key (PEM files), presented on TLS connections."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        check_type(str, certificate_path, "certificate_path")
        check_type(str, private_key_path, "private_key_path")
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    def authorization(self) -> None:
        return None
