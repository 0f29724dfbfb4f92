"""``--auth-plugin`` / ``--auth-params``: the credentials of a CLI command, as Pulsar's
client.conf names them (authPlugin, authParams).

    --auth-plugin token  --auth-params token:eyJ...        (or file:///path/to/token)
    --auth-plugin basic  --auth-params '{"userId":"u","password":"p"}'   (or userId:u,password:p)
    --auth-plugin tls    --auth-params tlsCertFile:/c.pem,tlsKeyFile:/k.pem
    --auth-plugin scram  --auth-params '{"userId":"u","password":"p"}'   (or userId:u,password:p)

The plugin may also be Pulsar's class name (org.apache.pulsar.client.impl.auth.AuthenticationToken,
...AuthenticationBasic, ...AuthenticationTls).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

from pulsar_grpc.client import (
    Authentication,
    AuthenticationBasic,
    AuthenticationSCRAM,
    AuthenticationTLS,
    AuthenticationToken,
)

_PULSAR_PACKAGE = "org.apache.pulsar.client.impl.auth."


def add_auth_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--auth-plugin", metavar="PLUGIN",
        help="token, basic, tls or scram (or Pulsar's class name): Pulsar's authPlugin",
    )  # fmt: skip
    parser.add_argument(
        "--auth-params", metavar="PARAMS", default="",
        help="the plugin's parameters (Pulsar's authParams), e.g. token:XYZ, "
        '{"userId":"u","password":"p"}, tlsCertFile:c.pem,tlsKeyFile:k.pem',
    )  # fmt: skip


def authentication_of(args: argparse.Namespace) -> Authentication | None:
    """The credentials the flags name; ValueError (a usage error) when they do not parse."""
    plugin = (args.auth_plugin or "").removeprefix(_PULSAR_PACKAGE)
    if not plugin:
        if args.auth_params:
            raise ValueError("--auth-params needs --auth-plugin")
        return None
    make = _PLUGINS.get(plugin.lower().removeprefix("authentication"))
    if make is None:
        raise ValueError(f"--auth-plugin: unknown plugin {plugin!r} (token, basic, tls or scram)")
    return make(args.auth_params)


def _params(text: str) -> dict[str, str]:
    """Pulsar's two authParams forms: a JSON object, or ``key:value,key:value``."""
    if text.lstrip().startswith("{"):
        try:
            parsed = json.loads(text)
        except ValueError:
            raise ValueError("--auth-params: not a JSON object") from None
        if not isinstance(parsed, dict):
            raise ValueError("--auth-params: not a JSON object")
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
    raise ValueError("--auth-params: token:<token> or file:<path> for the token plugin")


def _user_password(text: str, plugin: str) -> tuple[str, str]:
    params = _params(text)
    if "userId" not in params or "password" not in params:
        raise ValueError(f"--auth-params: userId and password for the {plugin} plugin")
    return params["userId"], params["password"]


def _basic(text: str) -> Authentication:
    return AuthenticationBasic(*_user_password(text, "basic"))


def _scram(text: str) -> Authentication:
    return AuthenticationSCRAM(*_user_password(text, "scram"))


def _tls(text: str) -> Authentication:
    params = _params(text)
    if "tlsCertFile" not in params or "tlsKeyFile" not in params:
        raise ValueError("--auth-params: tlsCertFile and tlsKeyFile for the tls plugin")
    return AuthenticationTLS(params["tlsCertFile"], params["tlsKeyFile"])


_PLUGINS: dict[str, Callable[[str], Authentication]] = {
    "token": _token,
    "basic": _basic,
    "tls": _tls,
    "scram": _scram,
}
