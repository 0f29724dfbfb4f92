"""Where a command connects and with what credentials: its flags, else Pulsar's client.conf,
else the environment's defaults (:mod:`.endpoints`).

The client.conf is the file Pulsar's pulsar-admin and pulsar-client read: ``--conf FILE``, else
the file ``$PULSAR_CLIENT_CONF`` names. Its lines are ``key=value`` (``#`` starts a comment);
these keys are used, others (Pulsar's client.conf has many) are left alone:

    webServiceUrl=http://localhost:8080/          the admin commands' --admin-url
    brokerServiceUrl=grpc://localhost:50051       produce/consume/perf's --service-url
                                                  (or a web service's http(s):// URL)
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

from pulsar_grpc.cli.auth import auth_flags
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
    "add_global_connection_args",
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
    """The flags of a command that connects: its URLs, --conf, credentials and TLS trust.

    They are accepted before the command too (``pulsar-grpc --url U produce ...``, see
    :func:`add_global_connection_args`) and after each of its verbs; every one defaults to
    "not given" (argparse.SUPPRESS), so a flag given at one level is not reset by another's
    default, and :func:`resolve` fills in what none gave."""
    wanted = tuple(urls)
    parser.set_defaults(connection_urls=wanted)
    _add_flags(parser, wanted)


def add_global_connection_args(root: argparse.ArgumentParser) -> None:
    """Every connection flag before the command (``pulsar-grpc --admin-url U topics list``),
    and each command's own flags after any of its verbs (``topics list --admin-url U``), as
    pulsar-admin and pulsar-client take them. Call once the whole parser is built."""
    _add_flags(root, tuple(UrlFlag))
    for command in _children(root):
        _spread(command, command.get_default("connection_urls"))


def _spread(parser: argparse.ArgumentParser, urls: tuple[UrlFlag, ...] | None) -> None:
    """Give the flags of a connecting command to each verb below it (nested groups too)."""
    for child in _children(parser):
        child_urls = child.get_default("connection_urls") or urls
        if child_urls is not None:
            _add_flags(child, child_urls)
        _spread(child, child_urls)


def _children(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found: dict[int, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.setdefault(id(child), child)  # an alias names the same parser
    return list(found.values())


def _add_flags(parser: argparse.ArgumentParser, urls: tuple[UrlFlag, ...]) -> None:
    """Every connection flag. A URL the command does not use is accepted all the same but left
    out of its help, as before the command, where every flag is taken: a shell's habit of
    passing both URLs to every command does not fail after the verb only."""
    url_help = {
        UrlFlag.SERVICE: f"grpc:// or grpc+ssl:// {SERVICE_URL_HELP}; client.conf's "
        "brokerServiceUrl",
        UrlFlag.ADMIN: f"{ADMIN_URL_HELP}; client.conf's webServiceUrl",
    }
    flags: list[tuple[tuple[str, ...], dict[str, object]]] = [
        (
            ("--service-url", "--url", "-u") if url is UrlFlag.SERVICE else (url.value,),
            {"help": url_help[url] if url in urls else argparse.SUPPRESS},
        )
        for url in UrlFlag
    ]
    flags += [
        (("--conf",), {
            "type": Path, "metavar": "FILE",
            "help": f"a client.conf in Pulsar's format (default ${CONF_ENV}); flags override it",
        }),
        *auth_flags(),
        (("--tls-trust-cert-path",), {
            "metavar": "PEM",
            "help": "the CA certificates to trust (client.conf's tlsTrustCertsFilePath)",
        }),
        (("--tls-allow-insecure",), {
            "action": "store_const", "const": True,
            "help": "do not verify the admin API's https certificate (tlsAllowInsecureConnection)",
        }),
    ]  # fmt: skip
    taken = parser._option_string_actions
    for names, options in flags:
        free = [name for name in names if name not in taken]  # admin's own --url stays its own
        if free:
            parser.add_argument(*free, default=argparse.SUPPRESS, **options)  # type: ignore[arg-type]


# What resolve() sets a flag to when neither a flag nor client.conf gave it.
_UNSET: dict[str, object] = {
    "conf": None,
    "auth_plugin": None,
    "auth_params": "",
    "tls_trust_cert_path": None,
    "tls_allow_insecure": None,
}
_URL_DESTS = {UrlFlag.SERVICE: "service_url", UrlFlag.ADMIN: "admin_url"}


def resolve(args: argparse.Namespace) -> None:
    """Fill in what the flags left out from the client.conf, then the defaults; ValueError
    (a usage error) for a client.conf that cannot be used, or for connection flags given to a
    command that connects nowhere."""
    urls: tuple[UrlFlag, ...] | None = getattr(args, "connection_urls", None)
    given = sorted(k for k in (*_UNSET, *_URL_DESTS.values()) if k in vars(args))
    if urls is None:
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ValueError(f"{flags}: this command connects to no broker")
        return
    for dest, unset in _UNSET.items():
        if dest not in vars(args):
            setattr(args, dest, unset)
    for flag, dest in _URL_DESTS.items():
        if dest not in vars(args) and flag in urls:
            setattr(args, dest, None)
    path = args.conf or (Path(os.environ[CONF_ENV]) if os.environ.get(CONF_ENV) else None)
    conf = read_client_conf(path) if path is not None else ClientConf()
    if UrlFlag.SERVICE in urls and not args.service_url:
        url = conf.broker_service_url
        if url is not None and not url.startswith(
            ("grpc://", "grpc+ssl://", "http://", "https://")
        ):
            # A stock Pulsar client.conf says pulsar://: fine for the admin commands, which
            # only read webServiceUrl, but this command would connect there.
            raise ValueError(
                f"client.conf: brokerServiceUrl must be a grpc:// or grpc+ssl:// URL (this "
                f"broker speaks gRPC) or a web service's http(s):// URL, got {url!r}; "
                "or give --service-url"
            )
        args.service_url = url or default_service_url()
    if UrlFlag.ADMIN in urls and not args.admin_url:
        args.admin_url = conf.web_service_url or default_admin_url()
    # Each flag overrides its own key, as in Pulsar's pulsar-admin.
    args.auth_plugin = args.auth_plugin or conf.auth_plugin
    args.auth_params = args.auth_params or conf.auth_params or ""
    args.tls_trust_cert_path = args.tls_trust_cert_path or conf.tls_trust_certs_file_path
    if args.tls_allow_insecure is None:
        args.tls_allow_insecure = bool(conf.tls_allow_insecure_connection)
