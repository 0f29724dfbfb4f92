"""A durable cursor's state in Pulsar's encoding (MLDataFormats: PositionInfo, ManagedCursorInfo).

Two places hold it, with the same content:

- the ledger store's cursor-state row, rewritten in the store's group commit on every ack: a
  PositionInfo, the entry format of Pulsar's cursor ledger. It is what recovery trusts.
- the cursor's node ``/managed-ledgers/<name>/<cursor>``: a ManagedCursorInfo snapshot written
  when the cursor is created and when its ledger closes gracefully, so that ZooKeeper holds a
  state Pulsar's tools can read without the store. ``cursorsLedgerId`` is -1 ("the position is
  the snapshot here", Pulsar's value for a cursor closed cleanly): there is no BookKeeper
  cursor ledger to point at, and between snapshots the newer state is in the store's row.

Ranges of deleted entries are Pulsar's ``(lowerEndpoint, upperEndpoint]``: the lower end is the
entry before the first deleted one. Batch acks are Pulsar's ackSet: per entry, a bitset whose
SET bits are the indexes not acked yet, stored as 64-bit words (``deleteSet``).

Data written by earlier versions (JSON, starting with ``{``) still decodes; it is rewritten in
this encoding by the next state write.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

from pulsar_grpc.broker.ledger.ack_set import indexes_mask
from pulsar_grpc.broker.ledger.position import Position
from pulsargrpc.internal.v1 import ml_data_formats_pb2 as ml

__all__ = [
    "NO_CURSOR_LEDGER",
    "CursorState",
    "decode_cursor_info",
    "decode_cursor_node",
    "decode_position_info",
    "encode_cursor_info",
    "encode_position_info",
]

NO_CURSOR_LEDGER = -1  # ManagedCursorInfo.cursorsLedgerId: the position is in the info itself

_WORD = 64
_WORD_MASK = (1 << _WORD) - 1


@dataclass(slots=True)
class CursorState:
    """What a cursor persists.

    ``deleted`` holds closed ranges of individually deleted entries, ``(first, last)`` with
    ``first <= last``; a range may cross ledgers only when Pulsar wrote it. ``batch_deleted``
    maps an entry to its unacked-index bitset (negative when the batch size is unknown: every
    index above the acked ones counts as unacked, see ``_legacy_batch_mask``).
    """

    mark_delete: Position
    deleted: list[tuple[Position, Position]] = field(default_factory=list)
    batch_deleted: dict[Position, int] = field(default_factory=dict)
    properties: dict[str, int] = field(default_factory=dict)


def _legacy_batch_mask(acked: list[int]) -> int:
    """The unacked-index bitset for an entry whose batch size is unknown: all bits set but the
    acked ones (a negative int); the cursor cuts it to the batch size on the next ack."""
    valid = [i for i in acked if i >= 0]
    return ~indexes_mask(valid, max(valid) + 1) if valid else -1


def encode_position_info(state: CursorState) -> bytes:
    info = ml.PositionInfo(ledgerId=state.mark_delete.ledger_id, entryId=state.mark_delete.entry_id)
    _fill(info, state)
    return info.SerializeToString()


def encode_cursor_info(state: CursorState, last_active_ms: int) -> bytes:
    info = ml.ManagedCursorInfo(
        cursorsLedgerId=NO_CURSOR_LEDGER,
        markDeleteLedgerId=state.mark_delete.ledger_id,
        markDeleteEntryId=state.mark_delete.entry_id,
        lastActive=last_active_ms,
    )
    _fill(info, state)
    return info.SerializeToString()


def decode_position_info(data: bytes) -> CursorState:
    """A store row: PositionInfo, or the JSON state of earlier versions."""
    if data.startswith(b"{"):
        return _decode_legacy_json(data)
    info = ml.PositionInfo.FromString(data)
    return _state(Position(info.ledgerId, info.entryId), info)


def decode_cursor_info(data: bytes) -> CursorState:
    """A cursor node: ManagedCursorInfo, or the JSON node of earlier versions."""
    return decode_cursor_node(data)[0]


def decode_cursor_node(data: bytes) -> tuple[CursorState, int]:
    """A cursor node's state and its ``lastActive`` (ms; 0 when the node does not say, as the
    JSON of earlier versions), for readers that show when the cursor was last used."""
    if data.startswith(b"{"):
        return _decode_legacy_json(data), 0
    info = ml.ManagedCursorInfo.FromString(data)
    return _state(Position(info.markDeleteLedgerId, info.markDeleteEntryId), info), info.lastActive


def _fill(info: ml.PositionInfo | ml.ManagedCursorInfo, state: CursorState) -> None:
    for first, last in state.deleted:
        info.individualDeletedMessages.add(
            lowerEndpoint=_nested(Position(first.ledger_id, first.entry_id - 1)),
            upperEndpoint=_nested(last),
        )
    for name, value in state.properties.items():
        info.properties.add(name=name, value=value)
    for position, mask in state.batch_deleted.items():
        info.batchedEntryDeletionIndexInfo.add(
            position=_nested(position), deleteSet=_to_words(mask)
        )


def _state(position: Position, info: ml.PositionInfo | ml.ManagedCursorInfo) -> CursorState:
    return CursorState(
        mark_delete=position,
        deleted=[
            (
                Position(r.lowerEndpoint.ledgerId, r.lowerEndpoint.entryId + 1),
                Position(r.upperEndpoint.ledgerId, r.upperEndpoint.entryId),
            )
            for r in info.individualDeletedMessages
        ],
        batch_deleted={
            Position(b.position.ledgerId, b.position.entryId): _from_words(b.deleteSet)
            for b in info.batchedEntryDeletionIndexInfo
        },
        properties={p.name: p.value for p in info.properties},
    )


def _nested(position: Position) -> ml.NestedPositionInfo:
    return ml.NestedPositionInfo(ledgerId=position.ledger_id, entryId=position.entry_id)


def _to_words(mask: int) -> list[int]:
    """java.util.BitSet.toLongArray(): 64-bit words, lowest first, signed, no trailing zero
    words. A negative (unknown-size) mask is cut after the word of its highest acked index.
    Converted through bytes in one step each way: shifting a word off at a time would copy the
    whole mask per word (O(n^2) for a batch of n messages, on every state write)."""
    if mask < 0:
        acked_words = -(-(~mask).bit_length() // _WORD)  # ceil: the words holding acked bits
        mask &= (1 << (acked_words * _WORD)) - 1
    count = -(-mask.bit_length() // _WORD)
    return list(struct.unpack(f"<{count}q", mask.to_bytes(count * 8, "little")))


def _from_words(words: Sequence[int]) -> int:
    raw = struct.pack(f"<{len(words)}Q", *(w & _WORD_MASK for w in words))
    return int.from_bytes(raw, "little")


def _decode_legacy_json(data: bytes) -> CursorState:
    """The JSON of earlier versions: the store row {"markDelete", "individuallyDeleted",
    "batchDeleted", "properties"} or the cursor node {"name", "markDelete", "createdAt"}."""
    doc = json.loads(data)
    return CursorState(
        mark_delete=Position.parse(doc["markDelete"]),
        deleted=[
            (Position(ledger_id, first), Position(ledger_id, last))
            for ledger_id, first, last in doc.get("individuallyDeleted", ())
        ],
        batch_deleted={
            Position.parse(p): _legacy_batch_mask(acked)
            for p, acked in doc.get("batchDeleted", {}).items()
            if acked
        },
        properties={k: int(v) for k, v in doc.get("properties", {}).items()},
    )
