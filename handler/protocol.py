"""The ``grpc`` protocol handler (PIP-59): grpc.aio servers registered into the broker."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import grpc
from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from broker.config import ServiceConfiguration
from broker.naming import TopicName
from broker.protocol import ProtocolHandler
from broker.service import BrokerService
from handler import codec
from handler.consume import consume
from handler.errors import abort, status_for
from handler.produce import produce
from interceptors import ParametersInterceptor, current
from pulsargrpc.v1 import pulsar_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = "pulsargrpc.v1.PulsarService"
# Room for a batch of maxMessageSize plus its framing; larger gets gRPC's own RESOURCE_EXHAUSTED.
_FRAME_MARGIN = 1 << 20


class GrpcProtocolHandler(ProtocolHandler):
    def __init__(self) -> None:
        self.config: ServiceConfiguration | None = None
        self.service: BrokerService | None = None
        self.server: aio.Server | None = None
        self.ports: dict[str, int] = {}
        self._advertised = ""

    def protocol_name(self) -> str:
        return "grpc"

    def initialize(self, config: ServiceConfiguration) -> None:
        self.config = config
        host = config.advertisedAddress or config.bindAddress
        urls = []
        if config.grpcServicePort is not None:
            urls.append(f"grpc://{host}:{config.grpcServicePort}")
        if config.grpcServicePortTls is not None:
            urls.append(f"grpc+ssl://{host}:{config.grpcServicePortTls}")
        self._advertised = ",".join(urls)

    def protocol_data_to_advertise(self) -> str:
        return self._advertised

    @property
    def grpc_url(self) -> str:
        """The plaintext address actually bound (the port is resolved when configured as 0)."""
        assert self.config is not None
        host = self.config.advertisedAddress or self.config.bindAddress
        return f"grpc://{host}:{self.ports['grpc']}"

    async def start(self, service: BrokerService) -> None:
        assert self.config is not None
        self.service = service
        config = self.config
        limit = config.maxMessageSize + _FRAME_MARGIN
        server = aio.server(
            interceptors=[ParametersInterceptor(status_for)],
            options=[
                ("grpc.max_receive_message_length", limit),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),
            ],
        )
        server.add_generic_rpc_handlers((self._rpc_handlers(),))
        health_servicer = health.aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        if config.grpcServicePort is not None:
            self.ports["grpc"] = server.add_insecure_port(
                f"{config.bindAddress}:{config.grpcServicePort}"
            )
        await server.start()
        await health_servicer.set(SERVICE_NAME, health_pb2.HealthCheckResponse.SERVING)
        await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        self.server = server
        if "grpc" in self.ports:
            self._advertised = self.grpc_url
        log.info("grpc handler listening on %s", self._advertised)

    async def close(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=1.0)
            self.server = None

    # ------------------------------------------------------------ RPCs

    def _rpc_handlers(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Produce": grpc.stream_stream_rpc_method_handler(
                    self._produce,
                    request_deserializer=codec.identity,
                    response_serializer=codec.serialize_response,
                ),
                "Consume": grpc.stream_stream_rpc_method_handler(
                    self._consume,
                    request_deserializer=pb.ConsumeRequest.FromString,
                    response_serializer=codec.serialize_response,
                ),
                "Lookup": grpc.unary_unary_rpc_method_handler(
                    self._lookup,
                    request_deserializer=pb.LookupRequest.FromString,
                    response_serializer=pb.LookupResponse.SerializeToString,
                ),
                "GetPartitionedTopicMetadata": grpc.unary_unary_rpc_method_handler(
                    self._partitioned_metadata,
                    request_deserializer=pb.PartitionedTopicMetadataRequest.FromString,
                    response_serializer=pb.PartitionedTopicMetadataResponse.SerializeToString,
                ),
            },
        )

    async def _produce(self, requests: AsyncIterator[bytes], context: aio.ServicerContext) -> None:
        assert self.service is not None
        await produce(self.service, requests, context)

    async def _consume(
        self, requests: AsyncIterator[pb.ConsumeRequest], context: aio.ServicerContext
    ) -> None:
        assert self.service is not None
        await consume(self.service, requests, context)

    async def _lookup(
        self, request: pb.LookupRequest, context: aio.ServicerContext
    ) -> pb.LookupResponse:
        """Standalone owns every topic, so it answers with its own addresses."""
        try:
            TopicName.get(request.topic)
        except Exception as exc:
            await abort(context, exc)
        listener = request.listener_name or current().listener_name or ""
        return pb.LookupResponse(
            response=pb.LookupResponse.Connect,
            authoritative=True,
            grpc_url=self.grpc_url if "grpc" in self.ports else "",
            http_url=self.service.web.http_url if self.service and self.service.web else "",  # type: ignore[attr-defined]
            listener_name=listener,
        )

    async def _partitioned_metadata(
        self, request: pb.PartitionedTopicMetadataRequest, context: aio.ServicerContext
    ) -> pb.PartitionedTopicMetadataResponse:
        assert self.service is not None
        try:
            partitions = await self.service.get_partitioned_metadata(request.topic)
        except Exception as exc:
            await abort(context, exc)
        return pb.PartitionedTopicMetadataResponse(partitions=partitions)
