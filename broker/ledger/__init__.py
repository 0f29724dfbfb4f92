"""Managed ledgers and cursors (Pulsar's ManagedLedger / ManagedCursor) over a LedgerStore."""

from broker.ledger.cursor import ManagedCursor
from broker.ledger.info import LedgerInfo, ManagedLedgerConfig
from broker.ledger.managed_ledger import ManagedLedger, ManagedLedgerFactory
from broker.ledger.position import Entry, Position
from broker.ledger.range_set import PositionRangeSet
from broker.ledger.sqlite_store import SqliteLedgerStore
from broker.ledger.store import LedgerStore

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
