"""Credentials from a plugin name and its parameters, as Pulsar's client.conf names them
(authPlugin, authParams), like pulsar-client's ``Authentication(plugin, params)``: the CLI, the
Spark options and the broker's own client (brokerClientAuthenticationPlugin/Parameters) all
parse them here.

    token  token:eyJ...  (or file:///path/to/token, read again for every call)
    basic  {"userId":"u","password":"p"}  (or userId:u,password:p)
    scram  {"userId":"u","password":"p"}  (or userId:u,password:p)
    tls    tlsCertFile:/c.pem,tlsKeyFile:/k.pem
    oauth2 {"issuer_url":"https://idp","private_key":"/key.json","audience":"a"}
           (pulsar-client's AuthenticationOauth2 JSON; Java's issuerUrl, privateKey read too)

The plugin may also be Pulsar's class name (org.apache.pulsar.client.impl.auth.AuthenticationToken,
...AuthenticationBasic, ...AuthenticationTls, ...oauth2.AuthenticationOAuth2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from ._auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
    build_plugins_with,
)
from ._oauth2 import AuthenticationOauth2
from ._scram import AuthenticationSCRAM

__all__ = ["authentication_from"]

_PULSAR_PACKAGE = "org.apache.pulsar.client.impl.auth."


def authentication_from(plugin: str | None, params: str = "") -> Authentication | None:
    """The credentials a plugin name and its parameters name (None: no plugin, no
    parameters); ValueError naming what is wrong when they do not parse."""
    name = (plugin or "").strip().removeprefix(_PULSAR_PACKAGE).removeprefix("oauth2.")
    if not name:
        if params:
            raise ValueError("authParams given without authPlugin")
        return None
    make = _PLUGINS.get(name.lower().removeprefix("authentication"))
    if make is None:
        raise ValueError(
            f"authPlugin: unknown plugin {name!r} (token, basic, tls, scram or oauth2)"
        )
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


def _user_password(text: str, plugin: str) -> tuple[str, str]:
    params = _params(text)
    if "userId" not in params or "password" not in params:
        raise ValueError(f"authParams: userId and password for the {plugin} plugin")
    return params["userId"], params["password"]


def _basic(text: str) -> Authentication:
    return AuthenticationBasic(*_user_password(text, "basic"))


def _scram(text: str) -> Authentication:
    return AuthenticationSCRAM(*_user_password(text, "scram"))


def _tls(text: str) -> Authentication:
    params = _params(text)
    if "tlsCertFile" not in params or "tlsKeyFile" not in params:
        raise ValueError("authParams: tlsCertFile and tlsKeyFile for the tls plugin")
    return AuthenticationTLS(params["tlsCertFile"], params["tlsKeyFile"])


# Java's AuthenticationOAuth2 spells its parameters in camel case.
_OAUTH2_JAVA_NAMES = {"issuerUrl": "issuer_url", "privateKey": "private_key"}


def _oauth2(text: str) -> Authentication:
    params = {_OAUTH2_JAVA_NAMES.get(k, k): v for k, v in _params(text).items()}
    return AuthenticationOauth2(json.dumps(params))


_PLUGINS: dict[str, Callable[[str], Authentication]] = {
    "token": _token,
    "basic": _basic,
    "tls": _tls,
    "scram": _scram,
    "oauth2": _oauth2,
}


# What `Authentication(plugin, params)` builds with (client/_auth.py cannot import this module).
build_plugins_with(authentication_from)
