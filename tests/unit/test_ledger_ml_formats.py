"""Managed-ledger and cursor metadata in Pulsar's MLDataFormats encoding: round trips, the bit
layout of batch acks (java.util.BitSet words), and data directories written by the JSON version
opening unchanged."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from pulsar_grpc.broker.ledger import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteLedgerStore,
)
from pulsar_grpc.broker.ledger.cursor_state import (
    CursorState,
    decode_cursor_info,
    decode_position_info,
    encode_cursor_info,
    encode_position_info,
)
from pulsar_grpc.broker.ledger.info import (
    LedgerInfo,
    cursor_path,
    decode_ledgers,
    decode_properties,
    encode_ledgers,
    ledger_path,
)
from pulsar_grpc.broker.metadata import (
    EmbeddedMetadataStore,
    SessionEvent,
    ZooKeeperMetadataStore,
)
from pulsargrpc.internal.v1 import ml_data_formats_pb2 as ml
from tests.zookeeper import ZooKeeperServer

NAME = "public/default/persistent/upgraded"
P = Position


def sample_state() -> CursorState:
    return CursorState(
        mark_delete=P(7, 1),
        deleted=[(P(7, 3), P(7, 4)), (P(9, 0), P(9, 0))],
        # 70 messages, index 5 acked: two words, the first with bit 63 set (negative).
        batch_deleted={P(7, 6): ((1 << 70) - 1) & ~(1 << 5), P(9, 2): 0b101},
        properties={"seq": 42, "other": -1},
    )


def test_position_info_round_trip_in_pulsars_layout() -> None:
    state = sample_state()
    data = encode_position_info(state)
    assert decode_position_info(data) == state
    info = ml.PositionInfo.FromString(data)
    assert (info.ledgerId, info.entryId) == (7, 1)
    # Pulsar's ranges are open below: (7:2, 7:4] holds entries 3 and 4.
    first = info.individualDeletedMessages[0]
    assert (first.lowerEndpoint.ledgerId, first.lowerEndpoint.entryId) == (7, 2)
    assert (first.upperEndpoint.ledgerId, first.upperEndpoint.entryId) == (7, 4)
    batch = info.batchedEntryDeletionIndexInfo[0]
    assert (batch.position.ledgerId, batch.position.entryId) == (7, 6)
    assert list(batch.deleteSet) == [~(1 << 5), 0b111111]
    assert {p.name: p.value for p in info.properties} == {"seq": 42, "other": -1}


def test_cursor_info_round_trip_holds_the_position_itself() -> None:
    state = sample_state()
    data = encode_cursor_info(state, last_active_ms=1_700_000_000_000)
    assert decode_cursor_info(data) == state
    info = ml.ManagedCursorInfo.FromString(data)
    assert info.cursorsLedgerId == -1
    assert (info.markDeleteLedgerId, info.markDeleteEntryId) == (7, 1)
    assert info.lastActive == 1_700_000_000_000
    assert len(info.individualDeletedMessages) == 2
    assert len(info.batchedEntryDeletionIndexInfo) == 2


def test_ledger_list_is_a_managed_ledger_info() -> None:
    ledgers = [LedgerInfo(3, 10, 710, 1628234384802), LedgerInfo(5)]
    data = encode_ledgers(ledgers)
    info = ml.ManagedLedgerInfo.FromString(data)
    assert [(i.ledgerId, i.entries, i.size, i.timestamp) for i in info.ledgerInfo] == [
        (3, 10, 710, 1628234384802),
        (5, 0, 0, 0),
    ]
    assert decode_ledgers(data) == ledgers
    assert decode_properties(data) == {}


def test_ledger_properties_are_the_managed_ledger_info_properties() -> None:
    """Where the topic epoch lives (issue 26): Pulsar's ManagedLedgerInfo.properties."""
    data = encode_ledgers([LedgerInfo(5)], {"pulsar.topic.epoch": "3"})
    info = ml.ManagedLedgerInfo.FromString(data)
    assert [(p.key, p.value) for p in info.properties] == [("pulsar.topic.epoch", "3")]
    assert decode_properties(data) == {"pulsar.topic.epoch": "3"}
    assert decode_properties(b'{"ledgers": []}') == {}


def test_json_of_earlier_versions_decodes() -> None:
    old_row = (
        b'{"markDelete":"7:1","individuallyDeleted":[[7,3,4]],'
        b'"batchDeleted":{"7:6":[0,2]},"properties":{"seq":42}}'
    )
    state = decode_position_info(old_row)
    assert state.mark_delete == P(7, 1)
    assert state.deleted == [(P(7, 3), P(7, 4))]
    assert state.properties == {"seq": 42}
    # The batch size was not recorded: every index but the acked ones counts as unacked.
    mask = state.batch_deleted[P(7, 6)]
    assert [i for i in range(100) if not mask >> i & 1] == [0, 2]
    # Re-encoded, the unknown size becomes one word of unacked bits around the acked ones.
    again = decode_position_info(encode_position_info(state)).batch_deleted[P(7, 6)]
    assert [i for i in range(64) if not again >> i & 1] == [0, 2]
    old_node = b'{"name":"sub","markDelete":"7:2","createdAt":1}'
    assert decode_cursor_info(old_node) == CursorState(P(7, 2))


async def test_a_data_directory_written_by_the_json_version_opens(tmp_path: Path) -> None:
    """The ledger node, a cursor's store row and a cursor node, as the JSON version wrote them
    (its format inline here): the ledger reopens with its entries and both cursors' state,
    and from the next write on everything is in Pulsar's encoding."""
    store = SqliteLedgerStore(tmp_path, sync=False)
    metadata = EmbeddedMetadataStore(tmp_path)
    try:
        factory = ManagedLedgerFactory(store, metadata)
        ml_ = await factory.open(NAME)
        await ml_.open_cursor("sub", "earliest")
        await ml_.open_cursor("created-only", "earliest")
        positions = [await ml_.add_entry(f"e{i}".encode()) for i in range(8)]
        await factory.close()
        lid = positions[0].ledger_id
        old_ledgers = {"ledgers": [{"ledgerId": lid, "entries": 0, "size": 0, "timestamp": 0}]}
        await metadata.put(ledger_path(NAME), json.dumps(old_ledgers).encode())
        old_row = {
            "markDelete": f"{lid}:1",
            "individuallyDeleted": [[lid, 3, 4]],
            "batchDeleted": {f"{lid}:6": [0, 2]},
            "properties": {"seq": 42},
        }
        await store.append(
            await store.fence(NAME),
            (),
            {
                "sub": json.dumps(old_row).encode(),
                "created-only": None,  # its first state write never committed
            },
        )
        old_node = {"name": "created-only", "markDelete": f"{lid}:2", "createdAt": 1}
        await metadata.put(cursor_path(NAME, "created-only"), json.dumps(old_node).encode())

        factory = ManagedLedgerFactory(store, metadata)
        ml_ = await factory.open(NAME)
        assert ml_.last_confirmed_entry == positions[-1]
        cursor = ml_.cursors["sub"]
        assert cursor.mark_delete_position == positions[1]
        assert cursor.properties == {"seq": 42}
        assert cursor.acked_batch_indexes(positions[6], 4) == {0, 2}
        read = [e.position for e in await cursor.read_entries(100)]
        assert read == [positions[i] for i in (2, 5, 6, 7)]
        assert ml_.cursors["created-only"].mark_delete_position == positions[2]

        # The open rewrote the ledger node; the next ack rewrites the cursor's row.
        got = await metadata.get(ledger_path(NAME))
        assert got is not None and not got.value.startswith(b"{")
        ledger_ids = [i.ledgerId for i in ml.ManagedLedgerInfo.FromString(got.value).ledgerInfo]
        assert ledger_ids[0] == lid
        await cursor.ack_batch_indexes(positions[6], [1], batch_size=4)
        row = (await store.get_cursor_states(NAME))["sub"]
        assert not row.startswith(b"{")
        info = ml.PositionInfo.FromString(row)
        assert [b.deleteSet for b in info.batchedEntryDeletionIndexInfo] == [[0b1000]]
        await cursor.ack_batch_indexes(positions[6], [3], batch_size=4)
        assert cursor.is_deleted(positions[6])
        await factory.close()

        # Closed gracefully: the cursor nodes hold Pulsar's ManagedCursorInfo snapshot.
        got = await metadata.get(cursor_path(NAME, "sub"))
        assert got is not None
        node = ml.ManagedCursorInfo.FromString(got.value)
        assert node.cursorsLedgerId == -1
        assert (node.markDeleteLedgerId, node.markDeleteEntryId) == (lid, 1)
        deleted = [
            (r.lowerEndpoint.entryId, r.upperEndpoint.entryId)
            for r in node.individualDeletedMessages
        ]
        assert deleted == [(2, 4), (5, 6)]
    finally:
        await store.close()
        await metadata.close()


async def test_a_pulsar_range_across_ledgers_restores(tmp_path: Path) -> None:
    """Pulsar may write one deleted range over a ledger boundary, (L1:1, L2:1]: every entry
    of it is deleted here too, and nothing past the end of L1."""
    store = SqliteLedgerStore(tmp_path, sync=False)
    metadata = EmbeddedMetadataStore(tmp_path)
    try:
        factory = ManagedLedgerFactory(
            store, metadata, ManagedLedgerConfig(max_entries_per_ledger=4)
        )
        ml_ = await factory.open(NAME)
        cursor = await ml_.open_cursor("sub", "earliest")
        positions = [await ml_.add_entry(f"e{i}".encode()) for i in range(8)]
        first, second = positions[0].ledger_id, positions[4].ledger_id
        assert first != second
        node = ml.ManagedCursorInfo(
            cursorsLedgerId=-1, markDeleteLedgerId=first, markDeleteEntryId=0
        )
        node.individualDeletedMessages.add(
            lowerEndpoint=ml.NestedPositionInfo(ledgerId=first, entryId=1),
            upperEndpoint=ml.NestedPositionInfo(ledgerId=second, entryId=1),
        )
        cursor.restore_state(decode_cursor_info(node.SerializeToString()))
        assert [e.position for e in await cursor.read_entries(100)] == [
            positions[1],
            *positions[6:],
        ]
        assert cursor.individually_deleted.ranges() == [
            (P(first, 2), P(first, 3)),
            (P(second, 0), P(second, 1)),
        ]
        await factory.close()
    finally:
        await store.close()
        await metadata.close()


async def test_a_close_while_zookeeper_is_down_skips_the_snapshots(tmp_path: Path) -> None:
    """The snapshots at close are a courtesy to Pulsar's tools: with the metadata store's
    connection down, closing does not wait out an operation timeout per managed ledger, and
    the store's rows still hold the cursor's state for the next open."""
    server = ZooKeeperServer(tmp_path / "zk").start()
    store = SqliteLedgerStore(tmp_path / "ledgers", sync=False)
    try:
        metadata = await ZooKeeperMetadataStore.connect(
            server.hosts, "/ml", session_timeout_s=20, operation_timeout_s=10
        )
        factory = ManagedLedgerFactory(store, metadata)
        lost = asyncio.Event()
        # Registered after the factory's listener, so it runs after the factory saw the event.
        metadata.register_session_listener(
            lambda e: lost.set() if e is SessionEvent.CONNECTION_LOST else None
        )
        ml_ = await factory.open(NAME)
        cursor = await ml_.open_cursor("sub", "earliest")
        positions = [await ml_.add_entry(b"x") for _ in range(3)]
        await cursor.mark_delete(positions[1])
        await asyncio.to_thread(server.stop)
        await asyncio.wait_for(lost.wait(), 30)
        started = time.monotonic()
        await factory.close()
        assert time.monotonic() - started < 5  # an attempt would wait 10 s for the timeout
        await metadata.close()

        await asyncio.to_thread(server.start)
        metadata = await ZooKeeperMetadataStore.connect(server.hosts, "/ml")
        factory = ManagedLedgerFactory(store, metadata)
        ml_ = await factory.open(NAME)
        assert ml_.cursors["sub"].mark_delete_position == positions[1]
        await factory.close()
        await metadata.close()
    finally:
        await store.close()
        server.stop()
