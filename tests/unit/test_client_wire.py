"""The producer's hand-encoded MessageData (client/_wire.py): a null value (a payload of None)
carries MessageData.null_value on every framing path, byte for byte what protobuf writes, and
an empty payload does not."""

from __future__ import annotations

from typing import Any

import pytest

from pulsar_grpc.client._wire import encode_message, encode_request, frame_message
from pulsargrpc.v1 import pulsar_pb2 as pb

# The framing paths: a payload alone, with a key, and the protobuf-built one (properties,
# ordering key, event time).
PATHS: dict[str, dict[str, Any]] = {
    "alone": {},
    "key": {"key": "k"},
    "rich": {"key": "k", "ordering_key": b"o", "properties": {"a": "1"}, "event_time": 7},
}


def _sent(payload: bytes | None, **fields: Any) -> pb.MessageData:
    request = pb.ProduceRequest.FromString(encode_request(1, [frame_message(payload, **fields)]))
    [message] = request.messages
    return message


@pytest.mark.parametrize("fields", PATHS.values(), ids=PATHS.keys())
def test_a_null_value_round_trips_and_an_empty_payload_is_not_one(fields: dict[str, Any]) -> None:
    null = _sent(None, **fields)
    assert (null.null_value, null.payload, null.key) == (True, b"", fields.get("key", ""))
    empty = _sent(b"", **fields)
    assert (empty.null_value, empty.payload) == (False, b"")
    assert _sent(b"v", **fields).null_value is False


@pytest.mark.parametrize("payload", [None, b"", b"v"])
@pytest.mark.parametrize("fields", PATHS.values(), ids=PATHS.keys())
def test_hand_encoding_is_what_protobuf_writes(
    payload: bytes | None, fields: dict[str, Any]
) -> None:
    expected = pb.MessageData(
        payload=payload or b"",
        key=fields.get("key", ""),
        ordering_key=fields.get("ordering_key", b""),
        properties=fields.get("properties"),
        event_time=fields.get("event_time", 0),
        null_value=payload is None,
    ).SerializeToString(deterministic=True)
    assert encode_message(payload, **fields) == expected
