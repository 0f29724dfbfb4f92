"""Every hand-kept copy of a wire constant is tied to its source here (issue 27).

The broker core stays protocol-neutral (it may not import the gRPC protocol's generated code
for its own enums), and the SDK may not import the server's modules, so a few names and
numbers are kept on each side by hand. Each copy must agree with the proto, which is the
contract other languages read; a copy that drifts fails here, not at a client in production.
"""

from __future__ import annotations

from pulsar_grpc.broker.errors import ServerError
from pulsar_grpc.broker.schema.data import SchemaType as BrokerSchemaType
from pulsar_grpc.broker.topics import ProducerAccessMode as BrokerAccessMode
from pulsar_grpc.broker.topics import SubType
from pulsar_grpc.broker.topics.key_shared_policy import KeySharedMode as BrokerKeySharedMode
from pulsar_grpc.client import ConsumerType, KeySharedMode, ProducerAccessMode
from pulsar_grpc.client import _headers as client_headers
from pulsar_grpc.client._compression import CompressionType
from pulsar_grpc.handler import errors as handler_errors
from pulsar_grpc.interceptors import headers as server_headers
from pulsar_grpc.schema.schema import SchemaType as ClientSchemaType
from pulsargrpc.v1 import pulsar_pb2 as pb


def test_the_brokers_server_errors_are_the_protos() -> None:
    assert {e.name: e.value for e in ServerError}.items() <= dict(pb.ServerError.items()).items()


def test_both_schema_type_enums_are_the_protos() -> None:
    wire = {
        ("NONE" if name == "SCHEMA_TYPE_UNSPECIFIED" else name.removeprefix("SCHEMA_TYPE_")): value
        for name, value in pb.SchemaType.items()
    }
    assert {t.name: t.value for t in BrokerSchemaType} == wire
    # The SDK's has client-only members below zero (BYTES, AUTO_CONSUME): never on the wire.
    assert {t.name: t.value for t in ClientSchemaType if t.value >= 0} == wire


def test_the_error_trailer_keys_are_the_same_on_both_sides() -> None:
    assert client_headers.Trailer.ERROR_CODE == handler_errors.ERROR_CODE_KEY
    assert client_headers.Trailer.OWNER_URL == handler_errors.OWNER_URL_KEY
    assert client_headers.Trailer.OWNER_URL_TLS == handler_errors.OWNER_URL_TLS_KEY
    assert len(client_headers.Trailer) == 3  # a new trailer key needs its line above


def test_every_header_the_sdk_sends_is_one_the_server_reads() -> None:
    sent = {h.name: h.value for h in client_headers.Header}
    read = {h.name: h.value for h in server_headers.Header}
    assert sent.items() <= read.items()
    assert client_headers.AUTHORIZATION == server_headers.AUTHORIZATION


def test_the_sdks_compression_types_are_the_protos() -> None:
    """pulsar-client spells one ``ZLib``; the proto's ``ZLIB`` is the same member."""
    assert {name: CompressionType[name].value for name in pb.CompressionType.keys()} == dict(
        pb.CompressionType.items()
    )
    assert len(CompressionType) == len(pb.CompressionType.keys())


def test_the_enum_values_the_sdk_sends_in_headers_are_the_ones_the_server_parses() -> None:
    """A value the server does not know is refused (INVALID_ARGUMENT) at every subscribe."""
    assert {t.value for t in ConsumerType} == {t.value for t in SubType}
    # KeySharedMode and ProducerAccessMode travel by their names (pulsar-client's).
    assert {m.name for m in KeySharedMode} == {m.value for m in BrokerKeySharedMode}
    assert {m.name for m in ProducerAccessMode} == {m.value for m in BrokerAccessMode}
