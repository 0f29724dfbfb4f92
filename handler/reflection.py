"""gRPC server reflection under both of its names: ``grpc.reflection.v1`` and ``v1alpha``.

grpcio-reflection ships only v1alpha, while newer tools (grpcurl, Postman, grpcui, Go's
reflection client) ask for v1 first and some ask for nothing else. The two versions are the
same protocol: v1 renamed the package and kept every message and field number. So one servicer
answers both, and v1's descriptor (v1alpha's, renamed) joins the default pool so that tools can
describe the v1 service too.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool
from grpc import aio
from grpc_reflection.v1alpha import reflection, reflection_pb2

V1 = "grpc.reflection.v1"
V1ALPHA = "grpc.reflection.v1alpha"
V1_SERVICE_NAME = f"{V1}.ServerReflection"
V1ALPHA_SERVICE_NAME = reflection.SERVICE_NAME
_V1_FILE = "grpc/reflection/v1/reflection.proto"


def enable_reflection(server: aio.Server, service_names: Sequence[str]) -> None:
    """Serve reflection for ``service_names`` (and for itself, under both names)."""
    _register_v1_descriptor()
    names = (*service_names, V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME)
    servicer = reflection.aio.ReflectionServicer(names)
    method = grpc.stream_stream_rpc_method_handler(
        servicer.ServerReflectionInfo,
        request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
        response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
    )
    for service in (V1_SERVICE_NAME, V1ALPHA_SERVICE_NAME):
        handlers = {"ServerReflectionInfo": method}
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))


def _register_v1_descriptor() -> None:
    """Add v1's reflection.proto to the default pool, once per process, unless a library did."""
    pool = descriptor_pool.Default()
    try:
        pool.FindFileByName(_V1_FILE)
        return
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto()
    reflection_pb2.DESCRIPTOR.CopyToProto(proto)
    proto.name = _V1_FILE
    proto.package = V1
    proto.ClearField("options")  # v1alpha's language options name v1alpha's packages
    old, new = f".{V1ALPHA}.", f".{V1}."
    for message in proto.message_type:
        for field in message.field:
            if field.HasField("type_name"):  # only messages and enums: scalars must have none
                field.type_name = field.type_name.replace(old, new)
    for service in proto.service:
        for rpc in service.method:
            rpc.input_type = rpc.input_type.replace(old, new)
            rpc.output_type = rpc.output_type.replace(old, new)
    pool.AddSerializedFile(proto.SerializeToString())
