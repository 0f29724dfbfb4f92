"""Topic lookup: which broker serves a topic, and at which addresses for the client's listener.

The answer is built from the owner's broker data, as Pulsar builds it from the owner's load
report (PIP-59: the protocol handler advertises its endpoints there). Standalone owns every
topic, so the owner is the local broker; the cluster reuses this with other brokers' data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.listeners import (
    GRPC,
    GRPC_TLS,
    HTTP,
    HTTPS,
    BindAddress,
    Endpoint,
    Listener,
    ListenerConfig,
    choose_listener,
)


@dataclass(frozen=True)
class LookupResult:
    """Pulsar's LookupData plus the gRPC addresses (PIP-338: every address of the listener)."""

    listener: str
    grpc_url: str | None
    grpc_url_tls: str | None
    http_url: str | None
    http_url_tls: str | None
    authoritative: bool = True
    redirect: bool = False
    # The owner's protocol handlers' advertised data (BrokerData.protocols): a handler answers
    # with the addresses its own data gives for ``listener``.
    protocols: dict[str, str] = field(default_factory=dict)

    def as_lookup_data(self) -> dict[str, object]:
        """The JSON of Pulsar's HTTP lookup; brokerUrl carries this product's client protocol."""
        return {
            "brokerUrl": self.grpc_url,
            "brokerUrlTls": self.grpc_url_tls,
            "httpUrl": self.http_url,
            "httpUrlTls": self.http_url_tls,
            "grpcUrl": self.grpc_url,
            "grpcUrlTls": self.grpc_url_tls,
            "nativeUrl": self.grpc_url,
        }


@dataclass
class BrokerData:
    """What a broker publishes about itself (Pulsar's LocalBrokerData, the parts lookups use).

    ``listeners`` holds the advertised addresses with bound ports filled in; ``protocols`` the
    handlers' advertised data, keyed by protocol name, opaque here: each protocol handler
    reads its own (the broker core does not know their formats).
    """

    listeners: dict[str, Listener]
    protocols: dict[str, str] = field(default_factory=dict)


def resolve_ports(config: ListenerConfig, bound: Mapping[BindAddress, int]) -> dict[str, Listener]:
    """Listeners with each advertised port 0 replaced by the port its socket really got.

    Only primary addresses can be advertised with port 0 (the implicit listener advertises the
    primary ports as configured), so a 0 is matched to the primary bind address of its scheme.
    """
    primary = {bind.scheme: port for bind, port in bound.items() if bind.listener is None}
    resolved = {}
    for name, listener in config.listeners.items():
        urls = {
            scheme: Endpoint(ep.host, primary.get(scheme, 0)) if ep.port == 0 else ep
            for scheme, ep in listener.urls.items()
        }
        resolved[name] = replace(listener, urls=urls)
    return resolved


def lookup(
    config: ListenerConfig, owner: BrokerData, requested: str | None, via: str | None
) -> LookupResult:
    """Answer a lookup with the owner's addresses for the chosen listener (see
    :func:`broker.listeners.choose_listener` for the precedence; an unknown name raises
    InvalidArgumentError, one the owner does not advertise ServiceNotReadyError). The gRPC
    addresses are the listener's advertised ones; the gRPC handler answers from its own
    advertised data in ``protocols``."""
    name = choose_listener(config, requested, via).name
    listener = owner.listeners.get(name)
    if listener is None:
        # Brokers configured with different listeners: the owner cannot be reached on this
        # one. Pulsar answers ServiceNotReady ("the broker do not have <name> listener").
        raise ServiceNotReadyError(
            f"the broker that owns the topic advertises no listener {name!r} "
            f"(it has: {', '.join(sorted(owner.listeners))})"
        )
    return LookupResult(
        listener=name,
        grpc_url=listener.url(GRPC),
        grpc_url_tls=listener.url(GRPC_TLS),
        http_url=listener.url(HTTP),
        http_url_tls=listener.url(HTTPS),
        protocols=dict(owner.protocols),
    )
