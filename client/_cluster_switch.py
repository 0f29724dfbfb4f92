"""How a client moves to another cluster when its :class:`ServiceInfoProvider` says so
(cluster-level failover, :class:`AutoClusterFailover` included).

Why this shape: every lookup and call starts at the service URL held by the client's
:class:`BrokerCalls`, and every producer and consumer stream reopens through a fresh lookup.
So a switch is: point BrokerCalls at the new cluster (its address, its authentication, channels
trusting its CAs), point the ownership watch there, then make every open stream reconnect at
once (:meth:`ConnectionHandler.cluster_switched`), which puts it on the new cluster's broker
for its topic. Producers resend what has no receipt; consumers resubscribe. The application
does nothing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from ._auth import AuthenticationTLS
from ._calls import BrokerCalls
from ._channels import ChannelPool, channel_pool
from ._cluster_failover import OneCluster
from ._connection import ConnectionHandler
from ._http_lookup import HttpLookup
from ._ownership_watch import OwnershipWatcher
from ._service_info import ServiceInfo, ServiceInfoProvider

__all__ = ["ClusterSwitch", "cluster_pool"]

log = logging.getLogger("pulsar_grpc.client")

# Channels for a cluster, from its ServiceInfo.
PoolFor = Callable[[ServiceInfo], ChannelPool]
# Where a cluster's lookups go: its gRPC service address, or its web service over HTTP.
LookupsFor = Callable[[ServiceInfo], tuple[str, bool] | HttpLookup]


def cluster_pool(
    service_info: ServiceInfo,
    *,
    cert_path: str | None,
    key_path: str | None,
    options: Sequence[tuple[str, Any]],
    tls_options: Sequence[tuple[str, Any]],
) -> ChannelPool:
    """Channels to one cluster: trusting its CAs, presenting its AuthenticationTLS
    certificate when it has one, else the client's (``cert_path``, ``key_path``)."""
    authentication = service_info.authentication
    if isinstance(authentication, AuthenticationTLS):
        cert_path, key_path = authentication.certificate_path, authentication.private_key_path
    return channel_pool(
        service_info.tls_trust_certs_file_path,
        cert_path=cert_path,
        key_path=key_path,
        options=options,
        tls_options=tls_options,
    )


class ClusterSwitch:
    """The client's current cluster and the streams to move when it changes."""

    def __init__(
        self,
        provider: ServiceInfoProvider,
        initial: ServiceInfo,
        calls: BrokerCalls,
        ownership_watch: OwnershipWatcher,
        pool_for: PoolFor,
        lookups_for: LookupsFor,
    ) -> None:
        self._provider = provider
        self.current = initial
        self._calls = calls
        self._watch = ownership_watch
        self._pools = {initial: calls.pool}
        self._pool_for = pool_for
        self._lookups_for = lookups_for
        self._connections: set[ConnectionHandler] = set()
        self.switches = 0  # clusters switched to, for tests and stats

    def start(self) -> None:
        """Hand the provider its update callback (on the client's loop, which the callback
        reaches from whichever thread the provider calls it on). A plain service URL has
        nothing to start."""
        if isinstance(self._provider, OneCluster):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise ValueError(
                "a client with AutoClusterFailover or a ServiceInfoProvider is created inside a "
                "running event loop (SyncClient does so)"
            ) from None

        def on_service_info_update(service_info: ServiceInfo) -> None:
            if not isinstance(service_info, ServiceInfo):
                raise ValueError("Expected a pulsar_grpc.client.ServiceInfo instance")
            if not loop.is_closed():  # else the client is closed: nothing to switch
                loop.call_soon_threadsafe(self._use, service_info)

        self._provider.initialize(on_service_info_update)

    def add(self, connection: ConnectionHandler) -> None:
        """Move ``connection`` with the client until its handle closes."""
        self._connections.add(connection)
        connection.on_end.append(lambda: self._connections.discard(connection))

    def _use(self, service_info: ServiceInfo) -> None:
        if service_info is self.current or self._calls.closed:
            return
        log.warning(
            "switching from cluster %s to %s", self.current.service_url, service_info.service_url
        )
        if service_info not in self._pools:
            try:
                self._pools[service_info] = self._pool_for(service_info)
            except OSError as exc:  # its CA or certificate cannot be read: no way out there
                log.error("cannot switch to %s: %s", service_info.service_url, exc)
                return
        self._calls.use(
            self._lookups_for(service_info),
            service_info.authentication,
            self._pools[service_info],
        )
        # A web service URL has no ownership watch (the watch is a gRPC call).
        self._watch.use(
            None if service_info.web_service else (service_info.target, service_info.use_tls)
        )
        self.current = service_info
        self.switches += 1
        for connection in list(self._connections):
            connection.cluster_switched()

    def close(self) -> None:
        """The client closes: the provider stops."""
        self._provider.close()
