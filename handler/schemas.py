"""The schema RPCs: GetSchema (Pulsar's CommandGetSchema) and GetOrCreateSchema (Pulsar's
CommandGetOrCreateSchema). GetSchema needs permission to look the topic up (a consumer asks
for the version of a message it received); GetOrCreateSchema registers, so it needs
permission to produce."""

from __future__ import annotations

from grpc import aio

from pulsar_grpc.broker.errors import InvalidSchemaDataError
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.schema import decode_version, encode_version
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.handler import codec
from pulsar_grpc.handler.access import authorize_topic
from pulsar_grpc.handler.errors import abort
from pulsar_grpc.interceptors.parameters import schema_from_wire
from pulsargrpc.v1 import pulsar_pb2 as pb


async def get_schema(
    broker: BrokerContext, raw: bytes, context: aio.ServicerContext
) -> pb.GetSchemaResponse:
    request = pb.GetSchemaRequest()
    try:
        broker.check_open()
        request = codec.parse(pb.GetSchemaRequest, raw)
        topic = TopicName.get(request.topic)
        await authorize_topic(broker, topic, TopicOperation.LOOKUP)
        version = decode_version(request.schema_version) if request.schema_version else None
        stored = await broker.schemas.get(topic, version)
    except Exception as exc:
        await abort(context, exc, request.topic)
    info = stored.info
    schema = pb.Schema(
        name=topic.local_name,
        schema_data=info.data,
        type=int(info.type),  # type: ignore[arg-type]
        properties=dict(info.properties),
    )
    return pb.GetSchemaResponse(schema=schema, schema_version=encode_version(stored.version))


async def get_or_create_schema(
    broker: BrokerContext, raw: bytes, context: aio.ServicerContext
) -> pb.GetOrCreateSchemaResponse:
    request = pb.GetOrCreateSchemaRequest()
    try:
        broker.check_open()
        request = codec.parse(pb.GetOrCreateSchemaRequest, raw)
        topic = TopicName.get(request.topic)
        await authorize_topic(broker, topic, TopicOperation.PRODUCE)
        info = schema_from_wire(request.schema)
        if info is None:
            raise InvalidSchemaDataError("GetOrCreateSchema needs a schema type other than none")
        version = await broker.schemas.add_schema(topic, info)
    except Exception as exc:
        await abort(context, exc, request.topic)
    return pb.GetOrCreateSchemaResponse(schema_version=encode_version(version))
