"""Reading a broker's storage directly: a topic's ledgers, cursors and entries, from a
standalone data directory or a cluster's ZooKeeper and PostgreSQL, read-only and without a
broker (for audits, a broken broker, or reading very old data). ``pulsar-grpc inspect`` is its
command line; see inspector.py for the API."""

from pulsar_grpc.inspector.inspector import (
    DEFAULT_TIMEOUT_S,
    Bound,
    Inspector,
    open_config,
    open_storage,
)
from pulsar_grpc.inspector.model import (
    BatchDeletion,
    CorruptDataError,
    CursorRecord,
    EncryptedBatch,
    EncryptionKeyRecord,
    EntryRecord,
    InspectError,
    LedgerRecord,
    LedgerState,
    MessageRecord,
    StateSource,
    StorageUnavailableError,
    TopicNotFoundError,
)

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "BatchDeletion",
    "Bound",
    "CorruptDataError",
    "CursorRecord",
    "EncryptedBatch",
    "EncryptionKeyRecord",
    "EntryRecord",
    "InspectError",
    "Inspector",
    "LedgerRecord",
    "LedgerState",
    "MessageRecord",
    "StateSource",
    "StorageUnavailableError",
    "TopicNotFoundError",
    "open_config",
    "open_storage",
]
