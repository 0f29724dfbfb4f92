"""What makes a broker a cluster member: its load report and cluster-wide unique ids.

A broker is a cluster member when its metadataStoreUrl names a store other brokers can share
(zk: or memory:); the embedded store of `standalone` belongs to one broker.
"""

from __future__ import annotations

from collections.abc import Mapping

from pulsar_grpc.broker.listeners import (
    GRPC,
    GRPC_TLS,
    HTTP,
    HTTPS,
    BindAddress,
    Endpoint,
    Listener,
    ListenerConfig,
)
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata.factory import StoreKind, parse_metadata_store_url

__all__ = [
    "LISTENER_FIELDS",
    "advertised_listener",
    "broker_data_of",
    "broker_id",
    "is_cluster_store",
]

# Pulsar's AdvertisedListener field names, and the listener scheme each one carries (this
# product's broker service URL is its gRPC address).
LISTENER_FIELDS = {
    "brokerServiceUrl": GRPC,
    "brokerServiceUrlTls": GRPC_TLS,
    "brokerHttpUrl": HTTP,
    "brokerHttpsUrl": HTTPS,
}


def is_cluster_store(metadata_store_url: str) -> bool:
    """Whether brokers can share the store: zk: and memory:, not the embedded one."""
    return parse_metadata_store_url(metadata_store_url).kind is not StoreKind.EMBEDDED


def broker_id(
    advertised_address: str | None, listeners: ListenerConfig, bound: Mapping[BindAddress, int]
) -> str:
    """Pulsar's lookupServiceAddress, `<advertisedAddress>:<webServicePort>`: the broker's name
    in the cluster (its load-report node). The port is the one the primary web socket really
    got (plain HTTP first, else HTTPS); the host is advertisedAddress, else the internal
    listener's host."""
    primary = {bind.scheme: port for bind, port in bound.items() if bind.listener is None}
    port = primary.get(HTTP) or primary.get(HTTPS)
    if port is None:
        raise ValueError("a cluster member needs webServicePort or webServicePortTls")
    host = advertised_address
    if not host:
        internal = listeners.listeners[listeners.internal_listener_name]
        host = next(iter(internal.urls.values())).host
    return f"{host}:{port}"


def advertised_listener(listener: Listener) -> dict[str, str]:
    """A listener as Pulsar's AdvertisedListener JSON (the URLs it has), as both the load
    report and the ownership data carry it."""
    return {
        field: url for field, scheme in LISTENER_FIELDS.items() if (url := listener.url(scheme))
    }


def broker_data_of(
    advertised_listeners: dict[str, dict[str, str]], protocols: dict[str, str]
) -> BrokerData:
    """A broker's addresses in the shape lookups answer from, read back from the
    AdvertisedListener JSON its load report or ownership data carries."""
    listeners = {
        name: Listener(
            name,
            {LISTENER_FIELDS[f]: _endpoint(url) for f, url in urls.items() if f in LISTENER_FIELDS},
        )
        for name, urls in advertised_listeners.items()
    }
    return BrokerData(listeners, dict(protocols))


def _endpoint(url: str) -> Endpoint:
    host_port = url.partition("://")[2]
    host, _, port = host_port.rpartition(":")
    return Endpoint(host.strip("[]"), int(port))
