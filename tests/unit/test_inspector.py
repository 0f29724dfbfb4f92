"""The inspector's decoding, on entries sealed and state encoded by the broker's own code: a
plain batch, a compressed one (decompressed with the SDK's codecs), an encrypted one (shown,
never decoded), corrupt bytes; cursor state with batch acks; entry ranges; and a data directory
written by the broker's embedded stores, read page by page while its files stay unchanged."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.ledger import Position, SqliteLedgerStore
from pulsar_grpc.broker.ledger.cursor_state import (
    CursorState,
    decode_cursor_info,
    decode_cursor_node,
    encode_cursor_info,
    encode_position_info,
)
from pulsar_grpc.broker.ledger.info import LedgerInfo, cursor_path, encode_ledgers, ledger_path
from pulsar_grpc.broker.ledger.store import EntryWrite
from pulsar_grpc.broker.metadata import EmbeddedMetadataStore
from pulsar_grpc.cli.inspect import _entry_json, _print_entry
from pulsar_grpc.client._compression import CompressionType, compress_batch
from pulsar_grpc.inspector import (
    CorruptDataError,
    InspectError,
    LedgerRecord,
    LedgerState,
    StateSource,
    TopicNotFoundError,
    open_storage,
)
from pulsar_grpc.inspector.entries import decode_entry
from pulsar_grpc.inspector.inspector import PAGE_SIZE, _batch_deletion, _span
from pulsargrpc.v1 import pulsar_pb2 as pb

MESSAGES = [
    pb.MessageData(payload=b"one", key="k", properties={"a": "1"}, event_time=5),
    pb.MessageData(payload=b"\xff\x00", ordering_key=b"ok"),
]


def sealed(request: pb.ProduceRequest, schema_version: bytes = b"") -> bytes:
    """What the broker stores for a produced batch (handler: seal with the producer's fields)."""
    fields = entry_format.producer_fields("producer-1", schema_version)
    return entry_format.seal(request.SerializeToString(), 1234, fields)


def test_a_plain_batch_decodes_with_the_broker_sealed_fields() -> None:
    data = sealed(pb.ProduceRequest(sequence_id=9, messages=MESSAGES), b"\x00" * 7 + b"\x02")
    entry = decode_entry(3, 4, data)
    assert (entry.ledger_id, entry.entry_id, entry.size) == (3, 4, len(data))
    assert (entry.num_messages, entry.publish_time, entry.sequence_id) == (2, 1234, 9)
    assert entry.producer_name == "producer-1" and entry.schema_version == b"\x00" * 7 + b"\x02"
    assert entry.compression == "NONE" and entry.encrypted is None
    one, two = entry.messages
    assert (one.index, one.key, one.properties, one.event_time, one.payload) == (
        0,
        "k",
        {"a": "1"},
        5,
        b"one",
    )
    assert (two.index, two.ordering_key, two.payload) == (1, b"ok", b"\xff\x00")


def test_a_null_value_is_told_apart_from_an_empty_payload(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A tombstone (MessageData.null_value) is shown as one, in the record and the JSON that
    `pulsar-grpc inspect entries` prints; an empty payload is not one."""
    tombstone = pb.MessageData(key="gone", null_value=True)
    entry = decode_entry(1, 0, sealed(pb.ProduceRequest(messages=[tombstone, pb.MessageData()])))
    assert [(m.null_value, m.payload) for m in entry.messages] == [(True, b""), (False, b"")]
    doc = _entry_json(entry, "text", None)
    assert [(m["nullValue"], m["payload"]) for m in doc["messages"]] == [(True, ""), (False, "")]
    _print_entry(doc)
    lines = capsys.readouterr().out.splitlines()
    assert [line.rsplit(", ", 1)[1] for line in lines[1:]] == ["payload=<null value>", "payload=''"]


@pytest.mark.parametrize("codec", [c for c in CompressionType if c is not CompressionType.NONE])
def test_a_compressed_batch_is_decompressed_with_the_sdk_codecs(codec: CompressionType) -> None:
    framed = pb.ProduceRequest(messages=MESSAGES).SerializeToString()
    batch = compress_batch(codec, framed, len(MESSAGES), b"k")
    entry = decode_entry(1, 0, sealed(pb.ProduceRequest(sequence_id=1, compressed=batch)))
    assert entry.compression == pb.CompressionType.Name(codec.value)
    assert [m.payload for m in entry.messages] == [b"one", b"\xff\x00"]
    assert entry.num_messages == 2


def test_an_encrypted_batch_is_shown_not_decoded() -> None:
    batch = pb.CompressedBatch(
        compression=pb.ZSTD,
        uncompressed_size=77,
        num_messages=4,
        messages=b"ciphertext",
        encryption=pb.EncryptionContext(
            keys=[pb.EncryptionKey(key="a", value=b"wrapped", metadata={"m": "v"})],
            algorithm="AES-256-GCM",
            param=b"n" * 12,
        ),
    )
    entry = decode_entry(1, 0, sealed(pb.ProduceRequest(compressed=batch)))
    assert entry.messages == () and entry.num_messages == 4 and entry.compression == "ZSTD"
    assert entry.encrypted is not None
    assert entry.encrypted.ciphertext == b"ciphertext" and entry.encrypted.uncompressed_size == 77
    (key,) = entry.encrypted.keys
    assert (key.name, key.metadata, key.wrapped_data_key) == ("a", {"m": "v"}, b"wrapped")


def test_corrupt_entries_are_named() -> None:
    with pytest.raises(CorruptDataError, match="entry 2:3 is not a stored entry"):
        decode_entry(2, 3, b"\xff")
    broken = pb.CompressedBatch(compression=pb.LZ4, uncompressed_size=10, num_messages=1)
    broken.messages = b"not lz4 at all"
    with pytest.raises(CorruptDataError, match="entry 2:4 does not decompress as LZ4"):
        decode_entry(2, 4, sealed(pb.ProduceRequest(compressed=broken)))


def test_a_cursor_node_gives_its_last_active_time() -> None:
    state = CursorState(Position(3, 4), [(Position(3, 6), Position(3, 8))], {Position(3, 9): 0b101})
    node = encode_cursor_info(state, last_active_ms=1_700_000_000_123)
    decoded, last_active = decode_cursor_node(node)
    assert last_active == 1_700_000_000_123
    assert decoded == decode_cursor_info(node) == state
    assert decode_cursor_node(b'{"markDelete": "3:4"}')[1] == 0  # the JSON of old versions


def test_batch_deletions_list_the_unacked_indexes() -> None:
    assert _batch_deletion(Position(1, 2), 0b10110).unacked_indexes == (1, 2, 4)
    legacy = _batch_deletion(Position(1, 2), ~0b101)  # size unknown: 0 and 2 acked
    assert (legacy.unacked_indexes, legacy.unacked_from) == ((1,), 3)


def test_entry_ranges_take_entry_ids_or_positions() -> None:
    ledger = LedgerRecord(5, 10, 100, 0, LedgerState.OPEN)
    assert _span(ledger, None, None) == (0, 9)
    assert _span(ledger, 3, 20) == (3, 9)
    assert _span(ledger, Position(4, 7), Position(6, 0)) == (0, 9)
    assert _span(ledger, Position(5, 7), None) == (7, 9)
    assert _span(ledger, Position(6, 0), None) is None
    assert _span(ledger, None, Position(4, 99)) is None
    assert _span(LedgerRecord(5, 0, 0, 0, LedgerState.OPEN), None, None) is None


def digest(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in directory.iterdir()
        if p.name in ("metadata.db", "ledgers.db")
    }


async def test_a_data_directory_of_the_broker_stores_read_page_by_page(tmp_path: Path) -> None:
    """Two ledgers (one closed, one open, recounted from the store), more entries than a page,
    a cursor whose store row is newer than its node; the files are not changed by reading."""
    name = "public/default/persistent/paged"
    metadata, store = EmbeddedMetadataStore(tmp_path), SqliteLedgerStore(tmp_path)
    try:
        count = PAGE_SIZE * 2 + 5
        owner = await store.fence(name)
        batch = [
            EntryWrite(
                lid, i, sealed(pb.ProduceRequest(sequence_id=i, messages=[pb.MessageData()]))
            )
            for lid, n in ((1, 3), (2, count))
            for i in range(n)
        ]
        node = CursorState(Position(1, 0))
        row = CursorState(Position(2, 5), [(Position(2, 7), Position(2, 7))])
        await store.append(owner, batch, {"sub": encode_position_info(row)})
        closed = LedgerInfo(1, 3, sum(len(e.data) for e in batch[:3]), 1_700_000_000_000)
        await metadata.put(ledger_path(name), encode_ledgers([closed, LedgerInfo(2)]))
        await metadata.put(cursor_path(name, "sub"), encode_cursor_info(node, 42))
        await metadata.put(
            "/admin/partitioned-topics/public/default/persistent/whole", b'{"partitions": 3}'
        )
    finally:
        await metadata.close()
        await store.close()
    before = digest(tmp_path)

    with open_storage(tmp_path) as inspector:
        assert inspector.topics() == ["persistent://public/default/paged"]
        first, current = inspector.ledgers("paged")
        assert (first.ledger_id, first.entries, first.state) == (1, 3, LedgerState.CLOSED)
        assert (current.ledger_id, current.entries, current.state) == (2, count, LedgerState.OPEN)
        assert current.size == sum(len(e.data) for e in batch[3:])
        (cursor,) = inspector.cursors("paged")
        assert (cursor.mark_delete, cursor.source, cursor.last_active) == (
            Position(2, 5),
            StateSource.LEDGER_STORE,
            42,
        )
        entries = inspector.entries("paged")
        assert [(e.ledger_id, e.sequence_id) for e in entries] == [
            (lid, i) for lid, n in ((1, 3), (2, count)) for i in range(n)
        ]
        assert len(list(inspector.entries("paged", ledger=2, start=PAGE_SIZE - 1, limit=3))) == 3
        with pytest.raises(TopicNotFoundError, match="partitioned topic with 3 partitions"):
            inspector.ledgers("whole")
        with pytest.raises(TopicNotFoundError, match="not found"):
            inspector.cursors("absent")
        with pytest.raises(InspectError, match="only persistent topics"):
            inspector.ledgers("non-persistent://public/default/x")
    assert digest(tmp_path) == before
