"""What the inspector shows: typed records of a topic's ledgers, cursors and entries, read
straight from storage (never through a broker), and the errors it reports.

Each record has ``to_json()`` giving what ``pulsar-grpc inspect --json`` prints, so the CLI and
the Python API agree on field names (Pulsar's, where Pulsar's tools name the same thing).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from pulsar_grpc.broker.ledger.position import Position

__all__ = [
    "BatchDeletion",
    "CorruptDataError",
    "CursorRecord",
    "EncryptedBatch",
    "EncryptionKeyRecord",
    "EntryRecord",
    "InspectError",
    "LedgerRecord",
    "LedgerState",
    "MessageRecord",
    "StateSource",
    "StorageUnavailableError",
    "TopicNotFoundError",
]


class InspectError(Exception):
    """Anything the inspector cannot do, said in one line a user can act on."""


class StorageUnavailableError(InspectError):
    """The data directory, ZooKeeper or PostgreSQL cannot be read (missing, unreachable)."""


class TopicNotFoundError(InspectError):
    """No managed ledger of that name in the metadata (or a partitioned topic, named whole)."""


class CorruptDataError(InspectError):
    """A stored value does not decode as what its place says it holds."""


class LedgerState(enum.Enum):
    """Whether a ledger takes more entries: Pulsar's open ledger is the managed ledger's last."""

    OPEN = "open"  # the current ledger: its count comes from the ledger store
    CLOSED = "closed"  # count, size and close time final in the metadata


@dataclass(frozen=True, slots=True)
class LedgerRecord:
    """One ledger of a managed ledger (Pulsar's ManagedLedgerInfo.LedgerInfo).

    ``timestamp`` is the close time in ms (0 while open). For the open ledger the metadata holds
    no count yet; ``entries`` and ``size`` are what the ledger store holds, as the broker's
    recovery recounts them."""

    ledger_id: int
    entries: int
    size: int
    timestamp: int
    state: LedgerState

    def to_json(self) -> dict[str, Any]:
        return {
            "ledgerId": self.ledger_id,
            "entries": self.entries,
            "size": self.size,
            "timestamp": self.timestamp,
            "state": self.state.value,
        }


class StateSource(enum.Enum):
    """Where a cursor's state was read: the ledger store's row is rewritten on every ack, the
    metadata node only at creation and at a graceful close (docs/storage.md)."""

    LEDGER_STORE = "ledger-store"  # the cursors table row (PositionInfo): the newest
    METADATA_NODE = "metadata-node"  # /managed-ledgers/<ml>/<cursor> (ManagedCursorInfo)


@dataclass(frozen=True, slots=True)
class BatchDeletion:
    """A batch entry partly acknowledged: Pulsar's BatchedEntryDeletionIndexInfo.

    ``unacked_indexes`` are the batch indexes still to acknowledge (the set bits of the stored
    ``deleteSet`` words). When the batch size is unknown (state written as JSON by an earlier
    version), ``unacked_from`` says every index from it on is unacknowledged too."""

    position: Position
    unacked_indexes: tuple[int, ...]
    unacked_from: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "position": str(self.position),
            "unackedIndexes": list(self.unacked_indexes),
        }
        if self.unacked_from is not None:
            out["unackedFrom"] = self.unacked_from
        return out


@dataclass(frozen=True, slots=True)
class CursorRecord:
    """A durable cursor (subscription) of a managed ledger, from its newest stored state.

    ``individually_deleted`` holds closed ranges ``(first, last)`` of entries acknowledged
    beyond the mark-delete position (Pulsar prints them ``(first-1..last]``). ``last_active``
    (ms) comes from the metadata node, the only place that records it (None without a node
    value)."""

    name: str
    mark_delete: Position
    individually_deleted: tuple[tuple[Position, Position], ...]
    batch_deletions: tuple[BatchDeletion, ...]
    properties: dict[str, int]
    last_active: int | None
    source: StateSource

    def ranges_text(self) -> str:
        """Pulsar's notation of ``individuallyDeletedMessages``: ``[(3:4..3:7]]``."""
        parts = [
            f"({first.ledger_id}:{first.entry_id - 1}..{last}]"
            for first, last in self.individually_deleted
        ]
        return "[" + ", ".join(parts) + "]"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "markDeletePosition": str(self.mark_delete),
            "individuallyDeletedMessages": self.ranges_text(),
            "individuallyDeletedRanges": [
                {"first": str(first), "last": str(last)}
                for first, last in self.individually_deleted
            ],
            "batchDeletedIndexes": [b.to_json() for b in self.batch_deletions],
            "properties": dict(self.properties),
            "lastActive": self.last_active,
            "source": self.source.value,
        }


@dataclass(frozen=True, slots=True)
class MessageRecord:
    """One message of an entry's batch, as the producer sent it (``payload``: raw bytes)."""

    index: int
    key: str
    ordering_key: bytes
    properties: dict[str, str]
    event_time: int
    payload: bytes
    null_value: bool = False  # sent with no value at all (a tombstone); payload is then empty


@dataclass(frozen=True, slots=True)
class EncryptionKeyRecord:
    """One named key an encrypted batch's data key was wrapped with (never unwrapped here)."""

    name: str
    metadata: dict[str, str]
    wrapped_data_key: bytes


@dataclass(frozen=True, slots=True)
class EncryptedBatch:
    """A batch encrypted end to end: only its envelope is readable without the private key."""

    algorithm: str
    param: bytes
    keys: tuple[EncryptionKeyRecord, ...]
    compression: str
    uncompressed_size: int
    ciphertext: bytes


@dataclass(frozen=True, slots=True)
class EntryRecord:
    """One stored entry: a produced batch with the fields the broker sealed it with.

    ``messages`` is empty for an encrypted batch, whose ``encrypted`` says what is known of it
    (``num_messages`` is in clear). ``compression`` names the codec the batch was stored with
    (NONE when not compressed); a compressed batch is shown decompressed."""

    ledger_id: int
    entry_id: int
    size: int
    num_messages: int
    publish_time: int
    sequence_id: int
    producer_name: str
    schema_version: bytes
    compression: str
    messages: tuple[MessageRecord, ...]
    encrypted: EncryptedBatch | None = None

    @property
    def position(self) -> Position:
        return Position(self.ledger_id, self.entry_id)
