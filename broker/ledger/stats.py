"""A managed ledger's own figures (Pulsar's ManagedLedgerMBean): what was added, read and
mark-deleted, how long adds took to become durable and how large the entries were.

The ledger only counts (integer additions and one clock reading per entry); the broker's stats
task calls :meth:`LedgerStats.update` every statsUpdateFrequencyInSecs, and the stats and
/metrics (pulsar_storage_write_latency_le_*, pulsar_entry_size_le_*, pulsar_ml_*) read the
figures of the last interval.
"""

from __future__ import annotations

from pulsar_grpc.broker.meters import (
    ENTRY_LATENCY_BUCKETS_MS,
    ENTRY_SIZE_BUCKETS_BYTES,
    Buckets,
    RateMeter,
)


class LedgerStats:
    def __init__(self) -> None:
        self.added = RateMeter()  # entries made durable, and their bytes
        self.add_errors = RateMeter()  # entries whose add failed
        self.read = RateMeter()  # entries read (cache or store), and their bytes
        self.read_errors = RateMeter()  # reads that failed
        self.mark_deletes = RateMeter()  # mark-delete moves of its cursors
        self.add_latency_ms = Buckets(ENTRY_LATENCY_BUCKETS_MS)  # add_entry to durable
        self.entry_size = Buckets(ENTRY_SIZE_BUCKETS_BYTES)

    def update(self) -> None:
        """The stats task's tick."""
        for meter in (self.added, self.add_errors, self.read, self.read_errors, self.mark_deletes):
            meter.update()
        self.add_latency_ms.update()
        self.entry_size.update()
