"""Raw-stub helpers for tests that check the wire contract itself, without the SDK."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pbg


def stub(channel: grpc.aio.Channel) -> pbg.PulsarServiceStub:
    return pbg.PulsarServiceStub(channel)


def batch(sequence_id: int, payloads: Sequence[bytes], key: str = "") -> pb.ProduceRequest:
    return pb.ProduceRequest(
        sequence_id=sequence_id, messages=[pb.MessageData(payload=p, key=key) for p in payloads]
    )


def error_code(error: grpc.aio.AioRpcError) -> int:
    """Pulsar's ServerError number from the trailing metadata."""
    for key, value in error.trailing_metadata() or ():
        if key == "pulsar-error-code":
            return int(value)
    raise AssertionError(f"no pulsar-error-code in {error!r}")
