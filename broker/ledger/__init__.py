"""Managed ledgers and cursors (Pulsar's ManagedLedger / ManagedCursor) over a LedgerStore."""

from pulsar_grpc.broker.ledger.cursor import ManagedCursor
from pulsar_grpc.broker.ledger.info import LedgerInfo, ManagedLedgerConfig
from pulsar_grpc.broker.ledger.ledger_factory import ManagedLedgerFactory
from pulsar_grpc.broker.ledger.managed_ledger import ManagedLedger
from pulsar_grpc.broker.ledger.position import Entry, Position
from pulsar_grpc.broker.ledger.range_set import PositionRangeSet
from pulsar_grpc.broker.ledger.sqlite_store import SqliteLedgerStore
from pulsar_grpc.broker.ledger.store import LedgerStore

__all__ = [
    "Entry",
    "LedgerInfo",
    "LedgerStore",
    "ManagedCursor",
    "ManagedLedger",
    "ManagedLedgerConfig",
    "ManagedLedgerFactory",
    "Position",
    "PositionRangeSet",
    "SqliteLedgerStore",
]
