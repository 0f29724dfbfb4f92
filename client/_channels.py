"""Where the client connects: service URLs, lookup answers, one gRPC channel per broker address
and the channel options (message size, reconnect backoff, keepalive) every channel gets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc

from ._errors import LookupFailed
from ._headers import Header
from ._wire import serialize as serialize_produce_request

_SCHEMES = {"grpc": False, "grpc+ssl": True}
# Pulsar's binary-protocol schemes, refused with the scheme to use here instead.
_BINARY_SCHEMES = {"pulsar": "grpc", "pulsar+ssl": "grpc+ssl"}
# A broker's web service as the service URL: lookups over HTTP (client/_http_lookup.py).
WEB_SERVICE_SCHEMES = ("http://", "https://")

_MAX_CHANNEL_BACKOFF_MS = 1000
# Keepalive pings on channels with calls open: Pulsar's keepAliveIntervalSeconds. The broker
# answers pings at any rate; a gRPC server at its defaults (another service behind the same
# URL, a proxy) refuses more than one per 5 minutes on a connection without data (GOAWAY
# "too_many_pings"): raise the interval to 300 s for such a server (docs/protocol.md).
DEFAULT_KEEP_ALIVE_INTERVAL_S = 30
# A ping unanswered this long means the peer is gone (Pulsar waits one interval; gRPC 20 s).
_MAX_KEEP_ALIVE_TIMEOUT_S = 20


def _user_agent() -> str:
    try:
        return f"pulsar-grpc-python/{version('pulsar-grpc')}"
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "pulsar-grpc-python"


USER_AGENT = _user_agent()


@dataclass(frozen=True, slots=True)
class LookupResult:
    """Where a topic is served (the answer of the Lookup RPC)."""

    grpc_url: str
    grpc_url_tls: str
    http_url: str
    http_url_tls: str
    authoritative: bool
    redirect: bool
    listener_name: str
    # PIP-1: answered by a proxy; the grpc URLs are then the proxy's, and the calls about the
    # topic name the owner broker (proxy_to_broker_url) for the proxy to forward them to.
    proxy_through_service_url: bool = False
    proxy_to_broker_url: str = ""

    def route(self) -> dict[str, str]:
        """The header that sends calls through a proxy to the topic's broker; none when the
        answer came from a broker itself (the proxy forwards them to the broker its lookup
        answered, so that it need not look the topic up itself).

        >>> route = LookupResult("grpc://p:1", "", "", "", True, False, "", True, "grpc://b:2").route()
        >>> route == {"x-pulsar-proxy-to-broker-url": "grpc://b:2"}
        True
        """
        if not self.proxy_through_service_url or not self.proxy_to_broker_url:
            return {}
        return {Header.PROXY_TO_BROKER_URL: self.proxy_to_broker_url}

    def grpc_address(self, tls: bool) -> tuple[str, bool]:
        """The (``host:port``, tls) to connect to: ``grpc_url_tls`` when ``tls`` is preferred,
        else ``grpc_url``; the other one when only one is answered. Raises
        :class:`~client.LookupFailed` when neither is.

        >>> LookupResult("grpc://b:1", "", "", "", True, False, "x").grpc_address(tls=True)
        ('b:1', False)
        """
        preferred, other = (
            (self.grpc_url_tls, self.grpc_url) if tls else (self.grpc_url, self.grpc_url_tls)
        )
        url = preferred or other
        if not url:
            raise LookupFailed(
                f"the lookup answered no gRPC address (listener {self.listener_name!r})"
            )
        try:
            return parse_service_url(url)
        except ValueError as exc:
            raise LookupFailed(f"the lookup answered an unusable address: {exc}") from None


def parse_service_url(service_url: str) -> tuple[str, bool]:
    """``grpc://host:port`` or ``grpc+ssl://host:port`` -> (``host:port``, tls).

    >>> parse_service_url("grpc+ssl://broker:6651")
    ('broker:6651', True)
    """
    scheme, sep, rest = service_url.partition("://")
    target = rest.rstrip("/")
    if scheme in _BINARY_SCHEMES:
        host = target.rpartition(":")[0] or target
        raise ValueError(
            f"invalid service URL {service_url!r}: {scheme}:// is Pulsar's binary protocol, "
            f"which this broker does not speak: use {_BINARY_SCHEMES[scheme]}://{host}:<port> "
            "on the broker's gRPC port (grpcServicePort, 50051 by default; grpcServicePortTls "
            "for TLS), or its web service URL (http:// or https://) for lookups over HTTP"
        )
    if not sep or scheme not in _SCHEMES or not target or "/" in target:
        raise ValueError(
            f"invalid service URL {service_url!r}: expected grpc://host:port or grpc+ssl://host:port"
        )
    return target, _SCHEMES[scheme]


def service_address(service_url: str) -> tuple[str, bool]:
    """The ``host:port`` and TLS of a gRPC service URL, or of a web service URL (``http://``
    or ``https://``, whose port defaults to 80 or 443), which a failover probe connects to.

    >>> service_address("https://broker:8443/")
    ('broker:8443', True)
    """
    if not service_url.startswith(WEB_SERVICE_SCHEMES):
        return parse_service_url(service_url)
    tls = service_url.startswith("https://")
    host = service_url.partition("://")[2].rstrip("/")
    if not host or "/" in host:
        raise ValueError(
            f"invalid service URL {service_url!r}: expected http://host:port or https://host:port"
        )
    return (host if ":" in host.rpartition("]")[2] else f"{host}:{443 if tls else 80}"), tls


def full_topic_name(topic: str) -> str:
    """Pulsar's short forms: ``t`` and ``tenant/ns/t`` are persistent topics.

    >>> full_topic_name("my-topic")
    'persistent://public/default/my-topic'
    """
    if "://" in topic:
        return topic
    if "/" in topic:
        return f"persistent://{topic}"
    return f"persistent://public/default/{topic}"


class ChannelPool:
    """One channel per broker address and security, created on first use inside the loop.

    Lookups answer each topic's broker address; streams open on the channel for it. A channel
    to a ``grpc+ssl`` address uses the client's TLS options (trusted CAs, client certificate,
    server name override), whatever the scheme of the service URL.
    """

    def __init__(
        self,
        tls_credentials: Callable[[], grpc.ChannelCredentials],
        options: Sequence[tuple[str, Any]],
        tls_options: Sequence[tuple[str, Any]] = (),
    ) -> None:
        self._tls_credentials = tls_credentials
        self._options = list(options)
        self._tls_options = list(tls_options)
        self._channels: dict[tuple[str, bool], grpc.aio.Channel] = {}
        self._stubs: dict[tuple[str, bool], pb_grpc.PulsarServiceStub] = {}

    def stub(self, target: str, tls: bool) -> pb_grpc.PulsarServiceStub:
        """The stub for ``host:port`` (over TLS when ``tls``), opening its channel if needed."""
        key = (target, tls)
        stub = self._stubs.get(key)
        if stub is None:
            if tls:
                channel = grpc.aio.secure_channel(
                    target, self._tls_credentials(), options=self._options + self._tls_options
                )
            else:
                channel = grpc.aio.insecure_channel(target, options=self._options)
            self._channels[key] = channel
            stub = self._stubs[key] = pb_grpc.PulsarServiceStub(channel)
            # Producers write hand-encoded requests (see _wire): let bytes through.
            stub.Produce = channel.stream_stream(  # type: ignore[method-assign]
                "/pulsargrpc.v1.PulsarService/Produce",
                request_serializer=serialize_produce_request,
                response_deserializer=pb.ProduceResponse.FromString,
            )
        return stub

    @property
    def addresses(self) -> list[tuple[str, bool]]:
        """The (``host:port``, tls) of every open channel, in the order they were opened."""
        return list(self._channels)

    async def close(self) -> None:
        """Close every channel."""
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        await asyncio.gather(*(c.close() for c in channels))


def channel_options(
    max_message_size: int, initial_backoff_ms: int, keep_alive_s: float
) -> list[tuple[str, Any]]:
    """gRPC channel options: message size limits, reconnect backoff, keepalive.

    gRPC's default 4 MiB receive limit would strand an entry the broker accepted under its
    maxMessageSize (5 MB by default) and a consume response carrying several entries; -1
    lifts the limit. The channel's own reconnect backoff is capped at a second so that once
    the broker is back, the stream's reconnect attempts (which follow the client's backoff)
    are not refused for up to two minutes by a channel still waiting to redial.

    Keepalive (``keep_alive_s`` > 0) pings only while calls are open (an idle channel has
    nothing to lose, and servers refuse pings on idle connections unless told otherwise),
    without a limit on pings between data frames (gRPC sends at most 2 by default, which would
    stop the pings on a stream waiting for messages). Any ping unanswered within the timeout
    closes the connection: gRPC sends one ping at a time, so a keepalive waits behind a
    flow-control (BDP) ping sent just before the silence, whose own timeout is a minute.

    >>> dict(channel_options(-1, 100, 30))["grpc.keepalive_time_ms"]
    30000
    """
    keep_alive: list[tuple[str, Any]] = []
    if keep_alive_s > 0:
        timeout_ms = int(min(keep_alive_s, _MAX_KEEP_ALIVE_TIMEOUT_S) * 1000)
        keep_alive = [
            ("grpc.keepalive_time_ms", int(keep_alive_s * 1000)),
            ("grpc.keepalive_timeout_ms", timeout_ms),
            ("grpc.http2.ping_timeout_ms", timeout_ms),
            ("grpc.keepalive_permit_without_calls", 0),
            ("grpc.http2.max_pings_without_data", 0),
        ]
    return [
        *keep_alive,
        # Leads the user-agent: the broker's stats show it as clientVersion, as Pulsar's do.
        ("grpc.primary_user_agent", USER_AGENT),
        ("grpc.max_receive_message_length", max_message_size),
        ("grpc.max_send_message_length", max_message_size),
        ("grpc.initial_reconnect_backoff_ms", initial_backoff_ms),
        ("grpc.min_reconnect_backoff_ms", initial_backoff_ms),
        ("grpc.max_reconnect_backoff_ms", max(initial_backoff_ms, _MAX_CHANNEL_BACKOFF_MS)),
    ]


def grpc_url(target: str, tls: bool) -> str:
    return f"{'grpc+ssl' if tls else 'grpc'}://{target}"


def tls_credentials_from(
    trust_path: str | None, cert_path: str | None, key_path: str | None
) -> Callable[[], grpc.ChannelCredentials]:
    """Reads the files now (a missing one is reported at once) and makes the credentials on
    first use: a plaintext client may never open a TLS channel."""
    trust, chain, key = (
        Path(p).read_bytes() if p else None for p in (trust_path, cert_path, key_path)
    )
    made: list[grpc.ChannelCredentials] = []

    def credentials() -> grpc.ChannelCredentials:
        if not made:
            made.append(
                grpc.ssl_channel_credentials(
                    root_certificates=trust, private_key=key, certificate_chain=chain
                )
            )
        return made[0]

    return credentials


def channel_pool(
    trust_path: str | None,
    *,
    cert_path: str | None,
    key_path: str | None,
    options: Sequence[tuple[str, Any]],
    tls_options: Sequence[tuple[str, Any]],
) -> ChannelPool:
    """A pool whose TLS channels trust ``trust_path``'s CAs (None: the system's): one per
    cluster a client may use, each with its own CAs (cluster failover)."""
    return ChannelPool(tls_credentials_from(trust_path, cert_path, key_path), options, tls_options)


def partition_indexes(partitions: int) -> list[int]:
    """The partition index of each stream of a topic with ``partitions`` (-1: not partitioned)."""
    return list(range(partitions)) if partitions else [-1]


def partition_topics(topic: str, partitions: int) -> list[str]:
    """The topic of each stream of a topic with ``partitions``: its partitions, or itself."""
    if not partitions:
        return [topic]
    return [f"{topic}-partition-{i}" for i in range(partitions)]
