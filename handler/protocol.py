"""The ``grpc`` protocol handler (PIP-59): grpc.aio servers registered into the broker."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.listeners import GRPC_SCHEMES, BindAddress, ListenerConfig
from pulsar_grpc.broker.lookup import resolve_ports
from pulsar_grpc.broker.protocol import BrokerContext, ProtocolHandler
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.broker.tls import TlsFiles, read_tls_files
from pulsar_grpc.broker.tls_front import (
    LOOPBACK,
    LoopFactory,
    PipedPeers,
    TlsFront,
    front_ssl_context,
    needs_front,
)
from pulsar_grpc.handler import advertised, codec
from pulsar_grpc.handler.access import authorize_namespace_topics, authorize_topic
from pulsar_grpc.handler.consume import consume
from pulsar_grpc.handler.errors import abort
from pulsar_grpc.handler.ownership import watch_topic_ownership
from pulsar_grpc.handler.produce import produce
from pulsar_grpc.handler.reflection import enable_reflection
from pulsar_grpc.handler.schemas import get_or_create_schema, get_schema
from pulsar_grpc.handler.server_options import server_options
from pulsar_grpc.interceptors import ListenerInterceptor, ParametersInterceptor, current
from pulsar_grpc.interceptors.auth import AuthenticationInterceptor
from pulsargrpc.v1 import pulsar_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = "pulsargrpc.v1.PulsarService"
# After close() has ended every stream (topics closed), how long the servers wait for calls to
# finish writing what they had queued before gRPC cancels them.
_STOP_GRACE_S = 2.0


class GrpcProtocolHandler(ProtocolHandler):
    """One grpc.aio server per gRPC bind address (PIP-95), all serving the same broker; each
    knows its listener, so a call is answered for the network it came from."""

    def __init__(self) -> None:
        self.config: ServiceConfiguration | None = None
        self.listeners: ListenerConfig | None = None
        self.broker: BrokerContext | None = None
        self.servers: list[aio.Server] = []
        # The TLS fronts of listeners that ask for a client certificate optionally.
        self.fronts: list[TlsFront] = []
        # Shared by every server: "" and the service report SERVING until drain().
        self.health: health.aio.HealthServicer | None = None
        # Ends streams whose credentials expire (none expire while authentication is off).
        self.expiry: CredentialExpiryCheck | None = None
        self._advertised = ""

    def protocol_name(self) -> str:
        return advertised.PROTOCOL_NAME

    def initialize(self, config: ServiceConfiguration) -> None:
        self.config = config
        self.listeners = ListenerConfig.from_config(config)
        self._advertised = advertised.advertise(self.listeners.listeners)

    def protocol_data_to_advertise(self) -> str:
        """JSON: for every listener, this handler's ``grpc`` and ``grpc+ssl`` URLs."""
        return self._advertised

    async def start(self, context: BrokerContext) -> None:
        assert self.config is not None and self.listeners is not None
        self.broker = context
        self.expiry = CredentialExpiryCheck(self.config.authenticationRefreshCheckSeconds)
        binds = self.listeners.bind_addresses_for(GRPC_SCHEMES)
        tls = read_tls_files(self.config) if any(b.tls for b in binds) else None
        health_servicer = self.health = health.aio.HealthServicer()
        try:
            for bind in binds:
                if bind.tls and needs_front(self.config):
                    port = await self._serve_behind_front(bind, health_servicer)
                    context.record_bound(bind, port)
                    continue
                server = self._server(bind.listener, health_servicer)
                self.servers.append(server)
                if bind.tls:
                    assert tls is not None
                    port = server.add_secure_port(bind.address, _credentials(tls))
                else:
                    port = server.add_insecure_port(bind.address)
                context.record_bound(bind, port)
                await server.start()
        except BaseException:
            await self.close()
            raise
        await health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        # Ports configured as 0 are known now: advertise the real ones.
        self._advertised = advertised.advertise(resolve_ports(self.listeners, context.bound))
        log.info("grpc handler listening: %s", self._advertised)

    async def _serve_behind_front(
        self, bind: BindAddress, health_servicer: health.aio.HealthServicer
    ) -> int:
        """A plaintext server on an ephemeral loopback port behind a :class:`TlsFront` on the
        bind address (broker/tls_front.py); the front's bound port."""
        assert self.config is not None
        peers = PipedPeers()
        server = self._server(bind.listener, health_servicer, peers)
        self.servers.append(server)
        internal_port = server.add_insecure_port(f"{LOOPBACK}:0")
        await server.start()
        front = TlsFront(
            bind.host,
            bind.port,
            front_ssl_context(self.config),
            internal_port,
            self.config.grpcTlsFrontMaxConnections,
            peers,
            _loop_factory(),
        )
        self.fronts.append(front)
        return await front.start()

    def _server(
        self,
        listener: str | None,
        health_servicer: health.aio.HealthServicer,
        piped_peers: PipedPeers | None = None,
    ) -> aio.Server:
        assert self.config is not None and self.listeners is not None
        assert self.broker is not None
        interceptors: list[aio.ServerInterceptor] = [
            ListenerInterceptor(listener, self.listeners.listeners, abort),
            ParametersInterceptor(abort),
        ]
        if self.broker.authentication is not None:  # first: nothing runs for a stranger
            interceptors.insert(
                0,
                AuthenticationInterceptor(self.broker.authentication, listener, abort, piped_peers),
            )
        server = aio.server(
            interceptors=interceptors,
            options=server_options(
                self.config.maxMessageSize,
                self.config.keepAliveIntervalSeconds,
                self.config.grpcMaxPendingCalls,
            ),
        )
        server.add_generic_rpc_handlers((self._rpc_handlers(),))
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        enable_reflection(server, (SERVICE_NAME, health.SERVICE_NAME))
        return server

    async def drain(self) -> None:
        """NOT_SERVING for "" and the service, to every Check and Watch, from now on (later
        sets are ignored): balancers stop routing new streams here while the broker closes."""
        if self.health is not None:
            await self.health.enter_graceful_shutdown()

    async def close(self) -> None:
        """Stop the servers. The broker has closed its topics first, so every Produce and
        Consume stream is already ending with ServiceNotReady, and calls arriving meanwhile
        were refused with it: the grace only bounds a call still writing to a slow reader."""
        servers, self.servers = self.servers, []
        fronts, self.fronts = self.fronts, []
        await asyncio.gather(*(server.stop(grace=_STOP_GRACE_S) for server in servers))
        # After the servers: what they wrote in their grace still reaches the clients.
        await asyncio.gather(*(front.close() for front in fronts))
        if self.expiry is not None:
            await self.expiry.close()

    # ------------------------------------------------------------ RPCs

    def _rpc_handlers(self) -> grpc.GenericRpcHandler:
        # Requests arrive as bytes (each servicer parses its own, so a bad one is its error);
        # the streams' responses are serialized by the codec, the unary ones by their type.
        def stream(method: Any) -> grpc.RpcMethodHandler:
            return grpc.stream_stream_rpc_method_handler(
                method,
                request_deserializer=codec.identity,
                response_serializer=codec.serialize_response,
            )

        def unary(method: Any, response: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(
                method,
                request_deserializer=codec.identity,
                response_serializer=response.SerializeToString,
            )

        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Produce": stream(self._produce),
                "Consume": stream(self._consume),
                "Lookup": unary(self._lookup, pb.LookupResponse),
                "GetLastMessageId": unary(self._last_message_id, pb.GetLastMessageIdResponse),
                "GetPartitionedTopicMetadata": unary(
                    self._partitioned_metadata, pb.PartitionedTopicMetadataResponse
                ),
                "GetTopicsOfNamespace": unary(
                    self._topics_of_namespace, pb.GetTopicsOfNamespaceResponse
                ),
                "GetSchema": unary(self._get_schema, pb.GetSchemaResponse),
                "GetOrCreateSchema": unary(
                    self._get_or_create_schema, pb.GetOrCreateSchemaResponse
                ),
                "WatchTopicOwnership": grpc.unary_stream_rpc_method_handler(
                    self._watch_topic_ownership,
                    request_deserializer=codec.identity,
                    response_serializer=pb.WatchTopicOwnershipResponse.SerializeToString,
                ),
            },
        )

    async def _produce(self, requests: AsyncIterator[bytes], context: aio.ServicerContext) -> None:
        assert self.broker is not None and self.expiry is not None
        await produce(self.broker, requests, context, self.expiry)

    async def _consume(self, requests: AsyncIterator[bytes], context: aio.ServicerContext) -> None:
        assert self.broker is not None and self.expiry is not None
        await consume(
            self.broker, codec.parse_stream(pb.ConsumeRequest, requests), context, self.expiry
        )

    async def _watch_topic_ownership(self, raw: bytes, context: aio.ServicerContext) -> None:
        assert self.broker is not None
        await watch_topic_ownership(self.broker, raw, context)

    async def _get_schema(self, raw: bytes, context: aio.ServicerContext) -> pb.GetSchemaResponse:
        assert self.broker is not None
        return await get_schema(self.broker, raw, context)

    async def _get_or_create_schema(
        self, raw: bytes, context: aio.ServicerContext
    ) -> pb.GetOrCreateSchemaResponse:
        assert self.broker is not None
        return await get_or_create_schema(self.broker, raw, context)

    async def _lookup(self, raw: bytes, context: aio.ServicerContext) -> pb.LookupResponse:
        assert self.broker is not None
        ctx = current()
        request = pb.LookupRequest()
        try:
            self.broker.check_open()
            request = codec.parse(pb.LookupRequest, raw)
            await authorize_topic(self.broker, request.topic, TopicOperation.LOOKUP)
            result = await self.broker.lookup_topic(
                request.topic,
                request.listener_name or ctx.listener_name,
                ctx.bind_listener,
                request.authoritative,
            )
        except Exception as exc:
            await abort(context, exc, request.topic)
        grpc_url, grpc_url_tls = advertised.grpc_urls(result)
        return pb.LookupResponse(
            response=pb.LookupResponse.Redirect if result.redirect else pb.LookupResponse.Connect,
            authoritative=result.authoritative,
            grpc_url=grpc_url or "",
            grpc_url_tls=grpc_url_tls or "",
            http_url=result.http_url or "",
            http_url_tls=result.http_url_tls or "",
            listener_name=result.listener,
        )

    async def _last_message_id(
        self, raw: bytes, context: aio.ServicerContext
    ) -> pb.GetLastMessageIdResponse:
        assert self.broker is not None
        request = pb.GetLastMessageIdRequest()
        try:
            request = codec.parse(pb.GetLastMessageIdRequest, raw)
            await authorize_topic(self.broker, request.topic, TopicOperation.CONSUME)
            topic = await self.broker.get_topic(request.topic, create=False)
            last = await topic.last_message()
        except Exception as exc:
            await abort(context, exc, request.topic)
        if last is None:
            return pb.GetLastMessageIdResponse()
        position, batch_index = last
        message_id = pb.MessageId(
            ledger_id=position.ledger_id,
            entry_id=position.entry_id,
            batch_index=batch_index,
            partition=topic.partition,
        )
        return pb.GetLastMessageIdResponse(last_message_id=message_id)

    async def _partitioned_metadata(
        self, raw: bytes, context: aio.ServicerContext
    ) -> pb.PartitionedTopicMetadataResponse:
        assert self.broker is not None
        request = pb.PartitionedTopicMetadataRequest()
        try:
            self.broker.check_open()
            request = codec.parse(pb.PartitionedTopicMetadataRequest, raw)
            await authorize_topic(self.broker, request.topic, TopicOperation.LOOKUP)
            partitions = await self.broker.get_partitioned_metadata(request.topic)
        except Exception as exc:
            await abort(context, exc, request.topic)
        return pb.PartitionedTopicMetadataResponse(partitions=partitions)

    async def _topics_of_namespace(
        self, raw: bytes, context: aio.ServicerContext
    ) -> pb.GetTopicsOfNamespaceResponse:
        assert self.broker is not None
        try:
            self.broker.check_open()
            request = codec.parse(pb.GetTopicsOfNamespaceRequest, raw)
            await authorize_namespace_topics(self.broker, request.namespace)
            topics = await self.broker.list_topics(request.namespace)
        except Exception as exc:
            await abort(context, exc)
        return pb.GetTopicsOfNamespaceResponse(topics=topics)


def _credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(tls.private_key, tls.certificate_chain)],
        root_certificates=tls.trust_certs,
        require_client_auth=tls.require_client_cert,
    )


def _loop_factory() -> LoopFactory | None:
    """uvloop for a front when the broker runs on it (the CLI's broker does), else asyncio's."""
    if type(asyncio.get_running_loop()).__module__.startswith("uvloop"):
        import uvloop

        return uvloop.new_event_loop
    return None
