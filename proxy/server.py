"""The proxy's lifecycle: what it opens, in which order, and how it stops.

Start: the metadata store (when the brokers are discovered there), the broker channels, the
gRPC servers (plain and TLS ports, each with the authentication interceptor when clients
authenticate), then the web port (/metrics, /status.html). Stop: the web port, then the gRPC
servers (streams get a short grace, then are cancelled: clients reconnect through another
proxy, nothing is held here), then the broker channels and the store.

The proxy holds no state a client relies on: several proxies serve the same cluster side by
side, and one restarting loses nothing that had a receipt.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pulsar_grpc.broker.metadata.factory import (
    StoreKind,
    open_metadata_store,
    parse_metadata_store_url,
)
from pulsar_grpc.broker.metadata.store import MetadataStore
from pulsar_grpc.broker.security.authentication import AuthenticationService
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.broker.tls import read_tls_files
from pulsar_grpc.client._auth import AuthenticationTLS
from pulsar_grpc.client._auth_params import authentication_from
from pulsar_grpc.client._channels import channel_options, grpc_url
from pulsar_grpc.handler.errors import abort
from pulsar_grpc.handler.server_options import max_frame, server_options
from pulsar_grpc.interceptors.auth import AuthenticationInterceptor
from pulsar_grpc.proxy.brokers import BrokerDirectory
from pulsar_grpc.proxy.config import ProxyConfiguration, broker_view
from pulsar_grpc.proxy.forwarding.pool import BrokerChannels
from pulsar_grpc.proxy.lookup import BrokerLookups
from pulsar_grpc.proxy.metrics import ProxyStats
from pulsar_grpc.proxy.servicer import SERVICE_NAME, OwnAddress, ProxyServicer
from pulsar_grpc.proxy.web import ProxyWeb

log = logging.getLogger(__name__)

_STOP_GRACE_S = 2.0
# The proxy's own calls to brokers (lookups): Pulsar clients' operation timeout.
_LOOKUP_TIMEOUT_S = 30.0
_BROKER_BACKOFF_MS = 100


class ProxyService:
    """One proxy: ``await start()``, then ``await close()``.

    >>> proxy = ProxyService(load_proxy_config(Path("proxy.conf"), os.environ, {}))
    >>> await proxy.start(); print(proxy.grpc_url)
    """

    def __init__(self, config: ProxyConfiguration) -> None:
        self.config = config
        self.stats = ProxyStats()
        view = broker_view(config)
        self._authentication = AuthenticationService.from_config(view)
        self._credentials = authentication_from(
            config.brokerClientAuthenticationPlugin, config.brokerClientAuthenticationParameters
        )
        self._store: MetadataStore | None = None
        self._channels: BrokerChannels | None = None
        self._servers: list[aio.Server] = []
        self._health = health.aio.HealthServicer()
        self._web: ProxyWeb | None = None
        # Ends client streams whose credentials expire (none do while authentication is off).
        self._expiry = CredentialExpiryCheck(config.authenticationRefreshCheckSeconds)
        self.grpc_port: int | None = None
        self.grpc_port_tls: int | None = None

    @property
    def advertised_host(self) -> str:
        config = self.config
        if config.advertisedAddress:
            return config.advertisedAddress
        if config.bindAddress not in ("0.0.0.0", "::", ""):
            return config.bindAddress
        return socket.gethostname()

    def own_address(self) -> OwnAddress:
        host = self.advertised_host
        return OwnAddress(
            grpc_url(f"{host}:{self.grpc_port}", False) if self.grpc_port is not None else None,
            grpc_url(f"{host}:{self.grpc_port_tls}", True)
            if self.grpc_port_tls is not None
            else None,
        )

    @property
    def web_url(self) -> str | None:
        return self._web.url if self._web is not None else None

    async def start(self) -> None:
        config = self.config
        try:
            if parse_metadata_store_url(config.metadataStoreUrl).kind is not StoreKind.EMBEDDED:
                self._store = await open_metadata_store(
                    config.metadataStoreUrl,
                    Path("."),
                    config.metadataStoreSessionTimeoutMillis / 1000,
                )
                if self._authentication is not None:  # SCRAM's role-token keys live there
                    self._authentication.use_metadata(self._store)
            self._channels = BrokerChannels(
                config.connectionsPerBroker,
                channel_options(
                    max_frame(config.maxMessageSize),
                    _BROKER_BACKOFF_MS,
                    config.keepAliveIntervalSeconds,
                ),
                self._broker_tls_credentials,
            )
            brokers = BrokerDirectory(
                self._store,
                [u for u in (config.brokerServiceURL, config.brokerServiceURLTLS) if u],
                config.tlsEnabledWithBroker,
            )
            lookups = BrokerLookups(
                brokers,
                self._channels,
                config.tlsEnabledWithBroker,
                config.maxLookupRedirects,
                _LOOKUP_TIMEOUT_S,
            )
            servicer = ProxyServicer(
                brokers,
                self._channels,
                lookups,
                self._credentials,
                self._authentication is not None,
                self.own_address,
                config.maxConcurrentLookupRequests,
                self._expiry,
                self.stats,
            )
            await self._start_servers(servicer.handler())
            await self._health.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
            await self._health.set("", health_pb2.HealthCheckResponse.SERVING)
            if config.webServicePort is not None:
                self._web = ProxyWeb(self.stats)
                await self._web.start(config.bindAddress, config.webServicePort)
        except BaseException:
            await self.close()
            raise
        log.info("proxy serving %s", self.own_address())

    async def _start_servers(self, handler: grpc.GenericRpcHandler) -> None:
        config = self.config
        tls = read_tls_files(broker_view(config)) if config.grpcServicePortTls is not None else None
        for port, secure in ((config.grpcServicePort, False), (config.grpcServicePortTls, True)):
            if port is None:
                continue
            server = self._server(handler)
            self._servers.append(server)
            address = f"{config.bindAddress}:{port}"
            if secure:
                assert tls is not None
                credentials = grpc.ssl_server_credentials(
                    [(tls.private_key, tls.certificate_chain)],
                    root_certificates=tls.trust_certs,
                    require_client_auth=tls.require_client_cert,
                )
                self.grpc_port_tls = server.add_secure_port(address, credentials)
            else:
                self.grpc_port = server.add_insecure_port(address)
            await server.start()

    def _server(self, handler: grpc.GenericRpcHandler) -> aio.Server:
        config = self.config
        interceptors: list[aio.ServerInterceptor] = []
        if self._authentication is not None:
            interceptors.append(AuthenticationInterceptor(self._authentication, None, abort))
        server = aio.server(
            interceptors=interceptors,
            options=server_options(
                config.maxMessageSize,
                config.keepAliveIntervalSeconds,
                config.grpcMaxPendingCalls,
            ),
        )
        server.add_generic_rpc_handlers((handler,))
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        return server

    def _broker_tls_credentials(self) -> grpc.ChannelCredentials:
        """Trust brokerClientTrustCertsFilePath; present the tls plugin's certificate."""
        trust = self.config.brokerClientTrustCertsFilePath
        key = chain = None
        if isinstance(self._credentials, AuthenticationTLS):
            key = Path(self._credentials.private_key_path).read_bytes()
            chain = Path(self._credentials.certificate_path).read_bytes()
        return grpc.ssl_channel_credentials(
            root_certificates=Path(trust).read_bytes() if trust else None,
            private_key=key,
            certificate_chain=chain,
        )

    async def close(self) -> None:
        """Stop serving (see the module docstring for the order). Idempotent."""
        if self._web is not None:
            await self._web.close()
            self._web = None
        await self._health.enter_graceful_shutdown()
        servers, self._servers = self._servers, []
        await asyncio.gather(*(s.stop(grace=_STOP_GRACE_S) for s in servers))
        await self._expiry.close()
        if self._channels is not None:
            await self._channels.close()
            self._channels = None
        if self._store is not None:
            await self._store.close()
            self._store = None
