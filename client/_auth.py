"""Client credentials, named as pulsar-client's: ``Client(..., authentication=...)``.

A token or a user and password travel as the ``authorization`` header of every call (a token
supplier is asked again for each call and each reconnection, so a refreshed token is picked
up); a TLS client certificate is presented on the TLS channels (mutual TLS), and the broker
takes its common name as the role.

:func:`authentication_from` builds one from a plugin name and its parameters as Pulsar's
client.conf names them (authPlugin, authParams), like pulsar-client's
``Authentication(plugin, params)``; the CLI, the Spark options and the broker's own client
(brokerClientAuthenticationPlugin/Parameters) all parse them here.

    token  token:eyJ...  (or file:///path/to/token, read again for every call)
    basic  {"userId":"u","password":"p"}  (or userId:u,password:p)
    tls    tlsCertFile:/c.pem,tlsKeyFile:/k.pem

The plugin may also be Pulsar's class name (org.apache.pulsar.client.impl.auth.AuthenticationToken,
...AuthenticationBasic, ...AuthenticationTls).
"""

from __future__ import annotations

import base64
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

_PULSAR_PACKAGE = "org.apache.pulsar.client.impl.auth."


class Authentication(ABC):
    """What a client proves itself with."""

    @abstractmethod
    def authorization(self) -> str | None:
        """The ``authorization`` header value for the next call (None: no header)."""


class AuthenticationToken(Authentication):
    """A token (a JWT), or a function returning the current one, sent as ``Bearer``."""

    def __init__(self, token: str | Callable[[], str]) -> None:
        if not callable(token) and not token:
            raise ValueError("AuthenticationToken needs a token or a token supplier")
        self._token = token

    def authorization(self) -> str:
        token = self._token() if callable(self._token) else self._token
        return f"Bearer {token}"


class AuthenticationBasic(Authentication):
    """A user name and password (the broker checks them against its htpasswd file)."""

    def __init__(self, username: str, password: str) -> None:
        if not username or ":" in username:
            raise ValueError("AuthenticationBasic needs a user name without ':'")
        pair = f"{username}:{password}".encode()
        self._header = "Basic " + base64.b64encode(pair).decode()

    def authorization(self) -> str:
        return self._header


class AuthenticationTLS(Authentication):
    """A client certificate and its key (PEM files), presented on TLS connections."""

    def __init__(self, certificate_path: str, private_key_path: str) -> None:
        self.certificate_path = certificate_path
        self.private_key_path = private_key_path

    def authorization(self) -> None:
        return None


def authentication_from(plugin: str | None, params: str = "") -> Authentication | None:
    """The credentials a plugin name and its parameters name (None: no plugin, no
    parameters); ValueError naming what is wrong when they do not parse."""
    name = (plugin or "").strip().removeprefix(_PULSAR_PACKAGE)
    if not name:
        if params:
            raise ValueError("authParams given without authPlugin")
        return None
    make = _PLUGINS.get(name.lower().removeprefix("authentication"))
    if make is None:
        raise ValueError(f"authPlugin: unknown plugin {name!r} (token, basic or tls)")
    return make(params)


def _params(text: str) -> dict[str, str]:
    """Pulsar's two authParams forms: a JSON object, or ``key:value,key:value``."""
    if text.lstrip().startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            raise ValueError("authParams: not a JSON object") from None
        if not isinstance(parsed, dict):
            raise ValueError("authParams: not a JSON object")
        return {str(k): str(v) for k, v in parsed.items()}
    pairs = (item.partition(":") for item in text.split(",") if item)
    return {key.strip(): value for key, _, value in pairs}


def _token(text: str) -> Authentication:
    if text.startswith("token:"):
        return AuthenticationToken(text.removeprefix("token:"))
    if text.startswith("file:"):
        path = Path(text.removeprefix("file:").removeprefix("//"))
        # Read on every call: a token file rotated on disk is picked up.
        return AuthenticationToken(lambda: path.read_text().strip())
    if text:
        return AuthenticationToken(text)
    raise ValueError("authParams: token:<token> or file:<path> for the token plugin")


def _basic(text: str) -> Authentication:
    params = _params(text)
    if "userId" not in params or "password" not in params:
        raise ValueError("authParams: userId and password for the basic plugin")
    return AuthenticationBasic(params["userId"], params["password"])


def _tls(text: str) -> Authentication:
    params = _params(text)
    if "tlsCertFile" not in params or "tlsKeyFile" not in params:
        raise ValueError("authParams: tlsCertFile and tlsKeyFile for the tls plugin")
    return AuthenticationTLS(params["tlsCertFile"], params["tlsKeyFile"])


_PLUGINS: dict[str, Callable[[str], Authentication]] = {
    "token": _token,
    "basic": _basic,
    "tls": _tls,
}
