"""``--auth-plugin`` / ``--auth-params``: the credentials of a CLI command, as Pulsar's
client.conf names them (authPlugin, authParams); parsed by the SDK's
:func:`~pulsar_grpc.client.authentication_from`.

    --auth-plugin token  --auth-params token:eyJ...        (or file:///path/to/token)
    --auth-plugin basic  --auth-params '{"userId":"u","password":"p"}'   (or userId:u,password:p)
    --auth-plugin tls    --auth-params tlsCertFile:/c.pem,tlsKeyFile:/k.pem
    --auth-plugin scram  --auth-params '{"userId":"u","password":"p"}'   (or userId:u,password:p)

The plugin may also be Pulsar's class name (org.apache.pulsar.client.impl.auth.AuthenticationToken,
...AuthenticationBasic, ...AuthenticationTls).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pulsar_grpc.client import Authentication


def auth_flags() -> list[tuple[tuple[str, ...], dict[str, object]]]:
    """The two flags, as (option strings, add_argument keywords) for the connection flags."""
    return [
        (("--auth-plugin",), {
            "metavar": "PLUGIN",
            "help": "token, basic, tls, scram or oauth2 (or Pulsar's class name): authPlugin",
        }),
        (("--auth-params",), {
            "metavar": "PARAMS",
            "help": "the plugin's parameters (Pulsar's authParams), e.g. token:XYZ, "
            '{"userId":"u","password":"p"}, tlsCertFile:c.pem,tlsKeyFile:k.pem',
        }),
    ]  # fmt: skip


def authentication_of(args: argparse.Namespace) -> Authentication | None:
    """The credentials the flags name; ValueError (a usage error) when they do not parse.
    The SDK, which parses them, is imported only when a flag names some: a command without
    credentials starts without it."""
    if not (args.auth_plugin or args.auth_params):
        return None
    from pulsar_grpc.client import authentication_from

    return authentication_from(args.auth_plugin, args.auth_params)
