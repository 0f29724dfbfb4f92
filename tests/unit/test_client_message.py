"""MessageId format/order/serialization and the mapping of entries and receipts to messages."""

import copy
import pickle
import struct

import pytest

from pulsar_grpc.client import MessageId, TopicMessageId
from pulsar_grpc.client._message import messages_of_entry
from pulsar_grpc.client._message_id import ids_of_receipt
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
        (MessageId(ledger_id=12, entry_id=345, batch_index=6, partition=2), "12:345:2:6"),
        (MessageId(ledger_id=12, entry_id=345, batch_index=0, partition=-1), "12:345:-1:0"),
        (MessageId(ledger_id=12, entry_id=345, batch_index=-1, partition=3), "12:345:3"),
        (MessageId(ledger_id=12, entry_id=345), "12:345:-1"),
    ],
)
def test_str_is_pulsars_form_and_parses_back(mid, text):
    assert str(mid) == text
    assert MessageId.parse(str(mid)) == mid


@pytest.mark.parametrize(("text", "ledger", "entry", "partition", "batch"), FORMS)
def test_parse(text, ledger, entry, partition, batch):
    assert MessageId.parse(text) == MessageId(
        ledger_id=ledger, entry_id=entry, batch_index=batch, partition=partition
    )


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
    assert (
        MessageId.earliest
        < MessageId(ledger_id=0, entry_id=0, batch_index=0, partition=0)
        < MessageId(ledger_id=2**40, entry_id=0)
        < MessageId.latest
    )


def test_order_is_ledger_then_entry_then_batch_index():
    ids = [
        MessageId(ledger_id=2, entry_id=0, batch_index=0),
        MessageId(ledger_id=1, entry_id=5, batch_index=1),
        MessageId(ledger_id=1, entry_id=5, batch_index=0),
        MessageId(ledger_id=1, entry_id=4, batch_index=9),
    ]
    assert sorted(ids) == [
        MessageId(ledger_id=1, entry_id=4, batch_index=9),
        MessageId(ledger_id=1, entry_id=5, batch_index=0),
        MessageId(ledger_id=1, entry_id=5, batch_index=1),
        MessageId(ledger_id=2, entry_id=0, batch_index=0),
    ]


def test_frozen_and_hashable():
    mid = MessageId(ledger_id=1, entry_id=2)
    with pytest.raises(AttributeError):
        mid.ledger_id = 3  # type: ignore[misc]
    assert {mid: 1}[MessageId(ledger_id=1, entry_id=2, batch_index=-1, partition=-1)] == 1


@pytest.mark.parametrize(
    "mid",
    [
        MessageId(ledger_id=1, entry_id=2, batch_index=3, partition=4),
        MessageId.earliest,
        MessageId.latest,
    ],
)
def test_serialize_round_trip(mid):
    data = mid.serialize()
    assert isinstance(data, bytes) and data[:1] == b"\x08"  # MessageIdData's ledgerId tag
    assert MessageId.deserialize(data) == mid


_IDS = [(-1, 7, 3, -1), (2, 7, 3, 4), (0, 1, 0, 0), (-1, -1, -1, -1), (5, 2**40, 2**33, 999)]


@pytest.mark.parametrize("fields", [*_IDS, (-1, 2**63 - 1, 2**63 - 1, -1)])
def test_serialize_is_pulsar_clients_encoding_both_ways(fields):
    """Bytes of pulsar-client's own serialize() (no broker needed) load here, and ours load
    there: ids saved by a pulsar-client application survive the switch, and back."""
    pulsar = pytest.importorskip("pulsar")
    theirs = pulsar.MessageId(*fields)
    ours = MessageId(*fields)
    assert ours.serialize() == theirs.serialize()
    assert MessageId.deserialize(theirs.serialize()) == ours
    back = pulsar.MessageId.deserialize(ours.serialize())
    assert (back.partition(), back.ledger_id(), back.entry_id(), back.batch_index()) == fields


def test_pickle_and_copy_keep_the_fields():
    """Spark ships ids to its executors pickled: the tuple's storage order must not leak into
    the constructor's (partition first)."""
    for mid in (MessageId(2, 7, 3, 4), TopicMessageId.of("persistent://public/default/t", 7, 3)):
        for again in (pickle.loads(pickle.dumps(mid)), copy.copy(mid), copy.deepcopy(mid)):
            assert again == mid and type(again) is type(mid)
            assert (again.partition(), again.ledger_id()) == (mid.partition(), mid.ledger_id())
    topic_id = pickle.loads(pickle.dumps(TopicMessageId.of("persistent://public/default/t", 7, 3)))
    assert topic_id.topic_name() == "persistent://public/default/t"


def test_deserialize_skips_fields_it_does_not_keep():
    # ack_set (5, packed varints) and batch_size (6), as Java's client writes for batch acks.
    data = MessageId(-1, 7, 3, 2).serialize() + b"\x2a\x02\x01\x02" + b"\x30\x0a"
    assert MessageId.deserialize(data) == MessageId(-1, 7, 3, 2)


def test_deserialize_reads_ids_this_sdk_serialized_before_issue_26():
    """24 bytes, four big-endian fields (ledger, entry, batch, partition): never starting
    with 0x08, the first byte of Pulsar's encoding."""
    legacy = struct.Struct(">qqii")
    for ledger, entry, batch, partition in [
        (7, 3, 4, 2),
        (-1, -1, -1, -1),
        (2**63 - 1, 2**63 - 1, -1, -1),
    ]:
        data = legacy.pack(ledger, entry, batch, partition)
        assert MessageId.deserialize(data) == MessageId(partition, ledger, entry, batch)
    topic = "persistent://public/default/t"
    mid = MessageId.deserialize(legacy.pack(7, 3, -1, -1), topic=topic)
    assert isinstance(mid, TopicMessageId) and mid.topic_name() == topic


def test_deserialize_rejects_garbage():
    for data in (b"\x00" * 23, b"\x08", b"\x08\x01", b"\x08\x01\x10\x02\x1f"):
        with pytest.raises(ValueError):
            MessageId.deserialize(data)


def test_constructor_accessors_order_and_equality_as_pulsar_clients():
    pulsar = pytest.importorskip("pulsar")
    mid = MessageId(2, 7, 3, 4)
    assert (mid.partition(), mid.ledger_id(), mid.entry_id(), mid.batch_index()) == (2, 7, 3, 4)
    assert MessageId() == MessageId.earliest
    assert MessageId.wrap(mid) == mid and type(MessageId.wrap(mid)) is MessageId
    pairs = [
        ((1, 7, 3, -1), (2, 7, 3, -1)),  # the partition: equal neither way, not ordered
        ((-1, 7, 3, -1), (-1, 7, 3, 0)),
        ((-1, 7, 3, 5), (-1, 8, 0, -1)),
        ((-1, 7, 3, 5), (-1, 7, 3, 5)),
    ]
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            ours, theirs = (
                (MessageId(*x), MessageId(*y)),
                (pulsar.MessageId(*x), pulsar.MessageId(*y)),
            )
            for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
                assert getattr(ours[0], op)(ours[1]) == getattr(theirs[0], op)(theirs[1]), (
                    x,
                    y,
                    op,
                )
    assert MessageId(-1, 7, 3) != (7, 3, -1, -1)  # not equal to a plain tuple
    assert hash(MessageId(1, 2, 3, 4)) == hash(MessageId(1, 2, 3, 4))


def test_to_proto_refuses_sentinels():
    assert MessageId(
        ledger_id=1, entry_id=2, batch_index=3, partition=-1
    ).to_proto() == pb.MessageId(ledger_id=1, entry_id=2, batch_index=3, partition=-1)
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
    assert [m.message_id() for m in msgs] == [
        MessageId(ledger_id=9, entry_id=4, batch_index=i, partition=1) for i in range(3)
    ]
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.value() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.sequence_id() for m in msgs] == [50, 51, 52]
    first, second = msgs[0], msgs[1]
    assert first.partition_key() == "k0" and first.properties() == {"a": "0"}
    assert first.event_timestamp() == 100 and second.event_timestamp() == 0
    assert second.ordering_key() == "o1"
    assert all(m.publish_timestamp() == 1234 for m in msgs)
    assert all(m.producer_name() == "prod" and m.redelivery_count() == 2 for m in msgs)
    assert first.topic_name() == "persistent://t/n/x-partition-1"


def test_messages_of_entry_skips_indexes_acked_before():
    msgs = messages_of_entry(_entry(acked_batch_indexes=[0, 2]), partition=1, topic_name="t")
    assert [(m.message_id().batch_index(), m.sequence_id(), m.data()) for m in msgs] == [
        (1, 51, b"m1")
    ]


def test_partition_of_ids_is_the_consumers_own():
    msgs = messages_of_entry(_entry(), partition=-1, topic_name="t")
    assert {m.message_id().partition() for m in msgs} == {-1}


def test_ids_of_receipt():
    receipt = pb.SendReceipt(sequence_id=10, ledger_id=3, entry_id=8, partition=2, batch_size=3)
    assert ids_of_receipt(receipt, 3, 2) == [
        MessageId(ledger_id=3, entry_id=8, batch_index=i, partition=2) for i in range(3)
    ]


def test_ids_of_duplicate_receipt_are_sentinels():
    receipt = pb.SendReceipt(sequence_id=10, duplicate=True)
    assert (
        ids_of_receipt(receipt, 2, -1)
        == [MessageId(ledger_id=-1, entry_id=-1, batch_index=-1, partition=-1)] * 2
    )
