"""What a produced batch's message count may be (handler/codec.py check_batch): backed by its
bytes, at most maxMessagesPerBatch, and deliverable to a client on gRPC's default 4 MiB
receive limit; and the start message id a reader may name."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.entry_format import encode_varint
from pulsar_grpc.broker.errors import InvalidArgumentError, TooLargeError
from pulsar_grpc.handler import codec
from pulsar_grpc.interceptors.parameters import parse_message_id
from pulsargrpc.v1 import pulsar_pb2 as pb

LIMITS = codec.BatchLimits(max_messages=100_000, max_message_size=5 << 20, producer_fields_size=20)


def compressed(num_messages: int, uncompressed_size: int) -> pb.ProduceRequest:
    return pb.ProduceRequest(
        compressed=pb.CompressedBatch(
            num_messages=num_messages, uncompressed_size=uncompressed_size, messages=b"x"
        )
    )


def check(request: pb.ProduceRequest, limits: codec.BatchLimits = LIMITS) -> None:
    codec.check_batch(request, request.ByteSize(), limits)


def test_a_declared_count_must_fit_its_declared_uncompressed_size() -> None:
    check(compressed(5, 10))
    with pytest.raises(InvalidArgumentError, match="each message takes at least 2"):
        check(compressed(6, 10))
    with pytest.raises(InvalidArgumentError, match="each message takes at least 2"):
        check(compressed(4_294_967_295, 1))  # the batch: refused, nothing allocated


def test_an_uncompressed_size_over_max_message_size_is_refused() -> None:
    check(compressed(1, 5 << 20))
    with pytest.raises(InvalidArgumentError, match="exceeds maxMessageSize"):
        check(compressed(1, (5 << 20) + 1))


def test_a_count_over_max_messages_per_batch_is_refused_plain_or_compressed() -> None:
    plain = pb.ProduceRequest(messages=[pb.MessageData() for _ in range(101)])
    small = codec.BatchLimits(100, 5 << 20, 20)
    check(compressed(100, 1000), small)
    with pytest.raises(InvalidArgumentError, match="exceeds maxMessagesPerBatch 100"):
        check(plain, small)
    with pytest.raises(InvalidArgumentError, match="exceeds maxMessagesPerBatch 100"):
        check(compressed(101, 1000), small)


def test_a_batch_whose_delivery_could_exceed_4_mib_is_too_large() -> None:
    fits = pb.ProduceRequest(messages=[pb.MessageData(payload=bytes(4_000_000))])
    check(fits)
    over = pb.ProduceRequest(messages=[pb.MessageData(payload=bytes(4_194_304))])
    with pytest.raises(TooLargeError, match="receive limit of 4194304"):
        check(over)


def test_the_delivery_bound_covers_a_redelivery_listing_every_index_but_one() -> None:
    for n in (1, 128, 129, 16_384, 16_385, 100_000):
        listed = b"".join(encode_varint(i) for i in range(1, n))  # index 0 unacked
        assert codec.varints_size(n) >= len(listed)
    assert codec.varints_size(100_000) == sum(len(encode_varint(i)) for i in range(100_000))


@pytest.mark.parametrize(
    "raw",
    ["1:2:-2", "1:2:-5", "1:2:2147483648", "1:2:0:-5", "1:2:0:2147483648", "1:" + "9" * 5000],
)
def test_a_start_message_id_with_a_bad_batch_index_or_a_huge_number_is_refused(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="is not ledger:entry"):
        parse_message_id(raw)


def test_a_start_message_id_may_name_a_whole_entry_or_an_index() -> None:
    assert parse_message_id("1:2:-1")[1] == -1
    assert parse_message_id("1:2:0:7")[1] == 7  # Pulsar's ledger:entry:partition:batch
