"""LedgerIdPool: ledger ids available synchronously.

ManagedLedger.add_entry assigns positions synchronously, so a rollover must get a new ledger
id without awaiting. The pool reserves ids from the store in blocks and refills in the
background when half empty; ids left over at shutdown are simply never used.

Opening ledgers (many at once after a restart) awaits :meth:`LedgerIdPool.ensure`: a waiter
that finds the pool emptied by others waits for the next refill instead of failing, and each
refill is sized to the waiters it serves, so a thousand topics opening together cost a few
store round trips, not a thousand.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.store import LedgerStore

__all__ = ["LedgerIdPool"]

log = logging.getLogger(__name__)


class LedgerIdPool:
    def __init__(self, store: LedgerStore, block: int = 16) -> None:
        self._store = store
        self._block = block
        self._ranges: deque[range] = deque()
        self._refill: asyncio.Task[None] | None = None
        self._waiters = 0  # ensure() calls waiting for ids: the next refill's demand

    def available(self) -> int:
        return sum(len(r) for r in self._ranges)

    async def ensure(self, above: int = 0) -> None:
        """Wait until an id greater than `above` is available; the caller takes it without
        awaiting in between.

        Ids are increasing within one pool, not across the brokers sharing a store: each
        reserves its own blocks. A managed ledger's ledgers must be in id order (positions
        compare by ledger id first), so a broker opening a ledger another broker wrote
        passes its last ledger id as `above`, and the pool drops its ids up to it; the
        store's next block is past every id it ever gave out.

        Others may drain a refill before this waiter runs again, so it waits for as many
        refills as that takes. Only the store failing ends the wait, with its error.
        """
        self._waiters += 1
        try:
            while self._drop_through(above) == 0:
                self._start_refill()
                assert self._refill is not None
                await asyncio.shield(self._refill)
        finally:
            self._waiters -= 1

    def _drop_through(self, last: int) -> int:
        """Drop the ids up to `last` (never to be used); how many ids are left."""
        while self._ranges and self._ranges[0].start <= last:
            r = self._ranges.popleft()
            if r.stop - 1 > last:
                self._ranges.appendleft(range(last + 1, r.stop))
                break
        return self.available()

    def take(self) -> int:
        """The next id; PersistenceError when the pool ran dry (a refill is then under way)."""
        if not self._ranges:
            self._start_refill()
            raise PersistenceError("no ledger id available yet")
        r = self._ranges[0]
        if len(r) == 1:
            self._ranges.popleft()
        else:
            self._ranges[0] = r[1:]
        if self.available() <= self._block // 2:
            self._start_refill()
        return r[0]

    def _start_refill(self) -> None:
        if self._refill is None or self._refill.done():
            self._refill = asyncio.get_running_loop().create_task(self._do_refill())
            self._refill.add_done_callback(_log_failure)

    async def _do_refill(self) -> None:
        count = max(self._block, self._waiters + self._block // 2)
        first = await self._store.allocate_ledger_ids(count)
        self._ranges.append(range(first, first + count))


def _log_failure(task: asyncio.Task[None]) -> None:
    """A background refill (from take()) has no awaiter: its failure is logged here."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("cannot allocate ledger ids: %s", exc)
