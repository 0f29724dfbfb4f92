"""MessageId format/order/serialization and the mapping of entries and receipts to messages."""

import pytest

from pulsar_grpc.client import MessageId
from pulsar_grpc.client._message import ids_of_receipt, messages_of_entry
from pulsargrpc.v1 import pulsar_pb2 as pb

# One text form everywhere (issue 25): Pulsar's MessageId.toString(),
# ledger:entry:partition[:batch]; the earlier ledger:entry:batch:-1 is read too, since Pulsar's
# form never ends in a batch index of -1. (text, ledger, entry, partition, batch)
FORMS = [
    ("7:3", 7, 3, -1, -1),
    ("7:3:2", 7, 3, 2, -1),  # Pulsar's non-batched form: the partition
    ("7:3:-1", 7, 3, -1, -1),
    ("7:3:-1:4", 7, 3, -1, 4),
    (" 7:3:1:0 ", 7, 3, 1, 0),
    ("12:345:2:6", 12, 345, 2, 6),
    ("7:3:4:-1", 7, 3, -1, 4),  # printed before issue 25 for a non-partitioned topic
    ("7:3:0:-1", 7, 3, -1, 0),
]


@pytest.mark.parametrize(
    ("mid", "text"),
    [
        (MessageId(12, 345, 6, 2), "12:345:2:6"),
        (MessageId(12, 345, 0, -1), "12:345:-1:0"),
        (MessageId(12, 345, -1, 3), "12:345:3"),
        (MessageId(12, 345), "12:345:-1"),
    ],
)
def test_str_is_pulsars_form_and_parses_back(mid, text):
    assert str(mid) == text
    assert MessageId.parse(str(mid)) == mid


@pytest.mark.parametrize(("text", "ledger", "entry", "partition", "batch"), FORMS)
def test_parse(text, ledger, entry, partition, batch):
    assert MessageId.parse(text) == MessageId(ledger, entry, batch, partition)


@pytest.mark.parametrize(("text", "ledger", "entry", "partition", "batch"), FORMS)
def test_the_broker_reads_the_start_message_id_header_alike(text, ledger, entry, partition, batch):
    from pulsar_grpc.broker.ledger import Position
    from pulsar_grpc.interceptors.parameters import parse_message_id

    assert parse_message_id(text.strip()) == (Position(ledger, entry), batch)


@pytest.mark.parametrize(("text", "ledger", "entry", "partition", "batch"), FORMS)
def test_the_admin_command_sends_pulsars_message_id_json_alike(
    text, ledger, entry, partition, batch
):
    from pulsar_grpc.cli.admin_topics import _message_id

    assert _message_id(text) == {
        "ledgerId": ledger,
        "entryId": entry,
        "partitionIndex": partition,
        "batchIndex": batch,
    }


@pytest.mark.parametrize(("text", "expected"), [("EARLIEST", "earliest"), ("latest", "latest")])
def test_parse_words(text, expected):
    assert MessageId.parse(text) == getattr(MessageId, expected)


@pytest.mark.parametrize("text", ["", "7", "1:2:3:4:5", "a:b", "1:x"])
def test_parse_rejects_malformed(text):
    with pytest.raises(ValueError, match="invalid message id"):
        MessageId.parse(text)


def test_sentinels_format_as_words_and_sort_around_real_ids():
    assert str(MessageId.earliest) == "earliest"
    assert str(MessageId.latest) == "latest"
    assert MessageId.earliest < MessageId(0, 0, 0, 0) < MessageId(2**40, 0) < MessageId.latest


def test_order_is_ledger_then_entry_then_batch_index():
    ids = [MessageId(2, 0, 0), MessageId(1, 5, 1), MessageId(1, 5, 0), MessageId(1, 4, 9)]
    assert sorted(ids) == [
        MessageId(1, 4, 9),
        MessageId(1, 5, 0),
        MessageId(1, 5, 1),
        MessageId(2, 0, 0),
    ]


def test_frozen_and_hashable():
    mid = MessageId(1, 2)
    with pytest.raises(AttributeError):
        mid.ledger_id = 3  # type: ignore[misc]
    assert {mid: 1}[MessageId(1, 2, -1, -1)] == 1


@pytest.mark.parametrize("mid", [MessageId(1, 2, 3, 4), MessageId.earliest, MessageId.latest])
def test_serialize_round_trip(mid):
    data = mid.serialize()
    assert isinstance(data, bytes) and len(data) == 24
    assert MessageId.deserialize(data) == mid


def test_deserialize_rejects_wrong_length():
    with pytest.raises(ValueError):
        MessageId.deserialize(b"\x00" * 23)


def test_to_proto_refuses_sentinels():
    assert MessageId(1, 2, 3, -1).to_proto() == pb.MessageId(
        ledger_id=1, entry_id=2, batch_index=3, partition=-1
    )
    with pytest.raises(ValueError):
        MessageId.earliest.to_proto()


def _entry(**kw):
    messages = [
        pb.MessageData(payload=b"m0", key="k0", properties={"a": "0"}, event_time=100),
        pb.MessageData(payload=b"m1", key="k1", ordering_key=b"o1"),
        pb.MessageData(payload=b"m2"),
    ]
    return pb.DeliveredEntry(
        ledger_id=9,
        entry_id=4,
        partition=1,
        redelivery_count=2,
        publish_time=1234,
        producer_name="prod",
        sequence_id=50,
        messages=messages,
        **kw,
    )


def test_messages_of_entry_numbers_messages_inside_the_batch():
    msgs = messages_of_entry(_entry(), partition=1, topic_name="persistent://t/n/x-partition-1")
    assert [m.message_id() for m in msgs] == [MessageId(9, 4, i, 1) for i in range(3)]
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.value() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.sequence_id() for m in msgs] == [50, 51, 52]
    first, second = msgs[0], msgs[1]
    assert first.partition_key() == "k0" and first.properties() == {"a": "0"}
    assert first.event_timestamp() == 100 and second.event_timestamp() == 0
    assert second.ordering_key() == b"o1"
    assert all(m.publish_timestamp() == 1234 for m in msgs)
    assert all(m.producer_name() == "prod" and m.redelivery_count() == 2 for m in msgs)
    assert first.topic_name() == "persistent://t/n/x-partition-1"


def test_messages_of_entry_skips_indexes_acked_before():
    msgs = messages_of_entry(_entry(acked_batch_indexes=[0, 2]), partition=1, topic_name="t")
    assert [(m.message_id().batch_index, m.sequence_id(), m.data()) for m in msgs] == [
        (1, 51, b"m1")
    ]


def test_partition_of_ids_is_the_consumers_own():
    msgs = messages_of_entry(_entry(), partition=-1, topic_name="t")
    assert {m.message_id().partition for m in msgs} == {-1}


def test_ids_of_receipt():
    receipt = pb.SendReceipt(sequence_id=10, ledger_id=3, entry_id=8, partition=2, batch_size=3)
    assert ids_of_receipt(receipt, 3, 2) == [MessageId(3, 8, i, 2) for i in range(3)]


def test_ids_of_duplicate_receipt_are_sentinels():
    receipt = pb.SendReceipt(sequence_id=10, duplicate=True)
    assert ids_of_receipt(receipt, 2, -1) == [MessageId(-1, -1, -1, -1)] * 2
