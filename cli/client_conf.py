"""Where a command connects and with what credentials: its flags, else Pulsar's client.conf,
else the environment's defaults (:mod:`.endpoints`).

The client.conf is the file Pulsar's pulsar-admin and pulsar-client read: ``--conf FILE``, else
the file ``$PULSAR_CLIENT_CONF`` names. Its lines are ``key=value`` (``#`` starts a comment);
these keys are used, others (Pulsar's client.conf has many) are left alone:

    webServiceUrl=http://localhost:8080/          the admin commands' --admin-url
    brokerServiceUrl=grpc://localhost:50051       produce/consume/perf's --service-url
    authPlugin=org.apache.pulsar.client.impl.auth.AuthenticationToken     --auth-plugin
    authParams=token:eyJ...                                               --auth-params
    tlsTrustCertsFilePath=/path/to/ca.cert.pem                            --tls-trust-cert-path
    tlsAllowInsecureConnection=false              (https admin calls only) --tls-allow-insecure

A file that cannot be read, a line that is not ``key=value``, or a value that cannot be used is
a usage error (exit 2) naming the file and line.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from pulsar_grpc.cli.auth import add_auth_args
from pulsar_grpc.cli.endpoints import (
    ADMIN_URL_HELP,
    SERVICE_URL_HELP,
    default_admin_url,
    default_service_url,
)

__all__ = [
    "CONF_ENV",
    "ClientConf",
    "UrlFlag",
    "add_connection_args",
    "read_client_conf",
    "resolve",
]

CONF_ENV = "PULSAR_CLIENT_CONF"
_BOOLEANS = {"true": True, "false": False}


class UrlFlag(Enum):
    """Which address a command takes: the broker's gRPC one, its admin one, or both."""

    SERVICE = "--service-url"
    ADMIN = "--admin-url"


@dataclass(frozen=True)
class ClientConf:
    """The keys of a client.conf a command uses (None or empty: not in the file)."""

    web_service_url: str | None = None
    broker_service_url: str | None = None
    auth_plugin: str | None = None
    auth_params: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_allow_insecure_connection: bool | None = None


# A line of a Java properties file, as Pulsar's tools read client.conf: the key ends at the
# first '=', ':' or blank.
_PROPERTY = re.compile(r"(?P<key>[^=:\s]+)\s*(?:[=:]|\s)(?P<value>.*)")

_KEYS = {
    "webServiceUrl": "web_service_url",
    "brokerServiceUrl": "broker_service_url",
    "authPlugin": "auth_plugin",
    "authParams": "auth_params",
    "tlsTrustCertsFilePath": "tls_trust_certs_file_path",
    "tlsAllowInsecureConnection": "tls_allow_insecure_connection",
}


def read_client_conf(path: Path) -> ClientConf:
    """The file's keys; ValueError naming the file (and line) when it cannot be used."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"client.conf {path}: cannot be read ({exc})") from None
    found: dict[str, object] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _PROPERTY.match(line)
        if match is None:
            raise ValueError(f"{path}:{number}: expected <key>=<value>, got {line!r}")
        key, value = match["key"], match["value"].strip()
        if key not in _KEYS or not value:
            continue  # another client setting, or one left empty as Pulsar's file does
        found[_KEYS[key]] = _value(key, value, f"{path}:{number}")
    return ClientConf(**found)  # type: ignore[arg-type]


def _value(key: str, value: str, where: str) -> object:
    if key == "tlsAllowInsecureConnection":
        if value.lower() not in _BOOLEANS:
            raise ValueError(f"{where}: {key} must be true or false, got {value!r}")
        return _BOOLEANS[value.lower()]
    if key == "webServiceUrl" and not value.startswith(("http://", "https://")):
        raise ValueError(f"{where}: {key} must be an http:// or https:// URL, got {value!r}")
    return value  # brokerServiceUrl is checked where a command uses it (see resolve)


def add_connection_args(parser: argparse.ArgumentParser, urls: Iterable[UrlFlag]) -> None:
    """The flags of a command that connects: its URLs, --conf, credentials and TLS trust."""
    for url in urls:
        if url is UrlFlag.SERVICE:
            parser.add_argument(
                "--service-url", "-u",
                help=f"grpc:// or grpc+ssl:// {SERVICE_URL_HELP}; client.conf's brokerServiceUrl",
            )  # fmt: skip
        else:
            parser.add_argument(
                "--admin-url", help=f"{ADMIN_URL_HELP}; client.conf's webServiceUrl"
            )
    parser.add_argument(
        "--conf", type=Path, metavar="FILE",
        help=f"a client.conf in Pulsar's format (default ${CONF_ENV}); flags override it",
    )  # fmt: skip
    add_auth_args(parser)
    parser.add_argument(
        "--tls-trust-cert-path", metavar="PEM",
        help="the CA certificates to trust (client.conf's tlsTrustCertsFilePath)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-allow-insecure", action="store_const", const=True, default=None,
        help="do not verify the admin API's https certificate (tlsAllowInsecureConnection)",
    )  # fmt: skip


def resolve(args: argparse.Namespace) -> None:
    """Fill in what the flags left out from the client.conf, then the defaults; ValueError
    (a usage error) for a client.conf that cannot be used. Commands without --conf: as given."""
    if not hasattr(args, "conf"):
        return
    path = args.conf or (Path(os.environ[CONF_ENV]) if os.environ.get(CONF_ENV) else None)
    conf = read_client_conf(path) if path is not None else ClientConf()
    if hasattr(args, "service_url") and not args.service_url:
        url = conf.broker_service_url
        if url is not None and not url.startswith(("grpc://", "grpc+ssl://")):
            # A stock Pulsar client.conf says pulsar://: fine for the admin commands, which
            # only read webServiceUrl, but this command would connect there.
            raise ValueError(
                f"client.conf: brokerServiceUrl must be a grpc:// or grpc+ssl:// URL (this "
                f"broker speaks gRPC), got {url!r}; or give --service-url"
            )
        args.service_url = url or default_service_url()
    if hasattr(args, "admin_url") and not args.admin_url:
        args.admin_url = conf.web_service_url or default_admin_url()
    # Each flag overrides its own key, as in Pulsar's pulsar-admin.
    args.auth_plugin = args.auth_plugin or conf.auth_plugin
    args.auth_params = args.auth_params or conf.auth_params or ""
    args.tls_trust_cert_path = args.tls_trust_cert_path or conf.tls_trust_certs_file_path
    if args.tls_allow_insecure is None:
        args.tls_allow_insecure = bool(conf.tls_allow_insecure_connection)
