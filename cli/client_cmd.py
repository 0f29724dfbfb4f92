"""What `produce`, `consume` and `read` share: their connection flags, the client they make,
flag value parsers, pacing for ``-r``, and how a failure becomes one line and an exit code."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from enum import StrEnum

from pulsar_grpc.broker.errors import InvalidTopicNameError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.cli.auth import authentication_of
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.client import Client, ConnectError, InvalidTopicName, PulsarError


class UsageError(Exception):
    """Bad input found after argparse: reported on one line, exit code 2."""


def add_client_args(parser: argparse.ArgumentParser) -> None:
    """The flags of a command that talks to a broker over gRPC."""
    add_connection_args(parser, [UrlFlag.SERVICE])
    parser.add_argument("--listener-name", help="advertised listener to look topics up through")
    parser.add_argument(
        "--operation-timeout-ms", type=positive_int, default=30000, metavar="MS",
        help="how long to keep trying to reach a broker that is down or restarting before "
        "giving up (Pulsar's operationTimeoutMs; default 30000)",
    )  # fmt: skip


def choice_of(values: type[StrEnum]) -> Callable[[str], str]:
    """An argparse ``type`` taking Pulsar's spelling (Shared, Earliest) or any other case
    (shared, EARLIEST), as pulsar-client's enum converters do, and giving Pulsar's."""
    by_lower = {v.value.lower(): v.value for v in values}

    def parse(text: str) -> str:
        try:
            return by_lower[text.lower()]
        except KeyError:
            names = ", ".join(v.value for v in values)
            raise argparse.ArgumentTypeError(f"{text!r} is not one of {names}") from None

    parse.__name__ = values.__name__  # argparse names the type in its message
    return parse


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


def topic_of(name: str) -> str:
    """The full topic name, or UsageError naming what is wrong with it."""
    try:
        return TopicName.get(name).full_name
    except InvalidTopicNameError as exc:
        raise UsageError(str(exc)) from None


def split_pairs(values: Sequence[str], flag: str) -> dict[str, str]:
    """``-p k1=v1,k2=v2 -p k3=v3``: each value is a comma list of KEY=VALUE, as pulsar-client's."""
    pairs: dict[str, str] = {}
    for value in values:
        for pair in value.split(","):
            key, sep, text = pair.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"{flag} {value!r}: expected KEY=VALUE[,KEY=VALUE...]")
            pairs[key.strip()] = text
    return pairs


class Pacer:
    """``-r RATE``: at most RATE steps a second, evenly spaced (0: no limit), as the
    RateLimiter pulsar-client's commands take a permit from before each message."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._next = time.monotonic()

    async def wait(self) -> None:
        if not self._interval:
            return
        now = time.monotonic()
        if self._next > now:
            await asyncio.sleep(self._next - now)
        self._next = max(self._next, now) + self._interval


def client_of(args: argparse.Namespace) -> Client:
    """The client the connection flags (and client.conf) describe."""
    if args.tls_allow_insecure:
        raise UsageError(
            "tlsAllowInsecureConnection: not offered over gRPC; trust the broker's CA with "
            "--tls-trust-cert-path (client.conf's tlsTrustCertsFilePath)"
        )
    return Client(
        args.service_url,
        listener_name=args.listener_name,
        operation_timeout_ms=args.operation_timeout_ms,
        authentication=authentication_of(args),
        tls_trust_certs_file_path=args.tls_trust_cert_path,
    )


def unreachable(url: str, exc: BaseException, auth_plugin: str | None = None) -> str:
    """Why the broker at ``url`` could not be reached, naming the likely mistake when gRPC's
    message shows one: an HTTP server (the web service port given as the gRPC URL), or a TLS
    broker that closed the connection during the handshake: gRPC says only "Socket closed"
    when the broker wants a client certificate that was not given (or refuses the one that
    was)."""
    text = " ".join(str(exc).split())
    if url.startswith("grpc+ssl://") and "Socket closed" in text:
        plugin = auth_plugin or ""
        if plugin.lower() == "tls" or plugin.endswith("AuthenticationTls"):
            why = "it may not trust the client certificate given (--auth-params tlsCertFile:...)"
        else:
            why = (
                "it may require a client certificate (tlsRequireTrustedClientCertOnConnect): "
                "give one with --auth-plugin tls --auth-params tlsCertFile:cert.pem,"
                "tlsKeyFile:key.pem (client.conf's authPlugin and authParams)"
            )
        return f"the broker at {url} closed the connection during the TLS handshake: {why}"
    if "http1.x server" in text:
        return (
            f"{url} is an HTTP/1.x server (the web service port?), not gRPC: --url takes the "
            "broker's gRPC URL (grpcServicePort, default 50051)"
        )
    if "Failed parsing HTTP/2" in text:
        return f"{url} does not speak gRPC (is it the broker's gRPC port?)"
    return f"cannot reach the broker at {url}: {text}"


def fail(command: str, args: argparse.Namespace, exc: BaseException) -> int:
    """One line on stderr and the exit code; anything unexpected keeps its traceback."""
    if isinstance(exc, UsageError | InvalidTopicName | ValueError):  # ValueError: --url
        code, text = 2, str(exc)
    elif isinstance(exc, ConnectError):
        code, text = 1, unreachable(args.service_url, exc, getattr(args, "auth_plugin", None))
    elif isinstance(exc, PulsarError):
        code, text = 1, f"{type(exc).__name__}: {exc}"
    else:
        raise exc
    print(f"pulsar-grpc {command}: {' '.join(text.split())}", file=sys.stderr)
    return code
