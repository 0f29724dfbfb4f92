"""The field numbers the SDK writes by hand (client/_protowire.py) are the proto's: one that
drifts would put payloads, keys or sequence ids in fields the broker reads as something else."""

from __future__ import annotations

from enum import IntEnum

import pytest
from google.protobuf.descriptor import Descriptor

from pulsar_grpc.client import _protowire as wire
from pulsar_grpc.client._wire import encode_message, encode_request, frame_message
from pulsargrpc.v1 import pulsar_pb2 as pb


@pytest.mark.parametrize(
    ("fields", "descriptor"),
    [
        (wire.MessageDataField, pb.MessageData.DESCRIPTOR),
        (wire.ProduceRequestField, pb.ProduceRequest.DESCRIPTOR),
    ],
)
def test_each_hand_written_field_number_is_the_generated_descriptors(
    fields: type[IntEnum], descriptor: Descriptor
) -> None:
    for field in fields:
        assert descriptor.fields_by_name[field.name.lower()].number == field, field


def test_the_hand_encoded_request_is_the_one_protobuf_encodes() -> None:
    """Numbers and wire types together: protobuf reads the hand-made bytes back as sent."""
    messages = [frame_message(b"payload", "key"), frame_message(None), frame_message(b"")]
    expected = pb.ProduceRequest(
        sequence_id=300,
        messages=[
            pb.MessageData(payload=b"payload", key="key"),
            pb.MessageData(null_value=True),
            pb.MessageData(),
        ],
    )
    assert pb.ProduceRequest.FromString(encode_request(300, messages)) == expected
    assert encode_message(b"p", "k") == pb.MessageData(payload=b"p", key="k").SerializeToString()
