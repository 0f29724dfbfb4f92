"""LedgerIdPool: ledger ids available synchronously.

ManagedLedger.add_entry assigns positions synchronously, so a rollover must get a new ledger
id without awaiting. The pool reserves ids from the store in blocks and refills in the
background when half empty; ids left over at shutdown are simply never used.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from broker.errors import PersistenceError
from broker.ledger.store import LedgerStore

__all__ = ["LedgerIdPool"]

log = logging.getLogger(__name__)


class LedgerIdPool:
    def __init__(self, store: LedgerStore, block: int = 16) -> None:
        self._store = store
        self._block = block
        self._ranges: deque[range] = deque()
        self._refill: asyncio.Task[None] | None = None

    def available(self) -> int:
        return sum(len(r) for r in self._ranges)

    async def ensure(self) -> None:
        """Wait until ids are available (used by async paths such as opening a ledger)."""
        if self.available() == 0:
            self._start_refill()
            assert self._refill is not None
            await asyncio.shield(self._refill)
        if self.available() == 0:
            raise PersistenceError("cannot allocate ledger ids")

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

    async def _do_refill(self) -> None:
        try:
            first = await self._store.allocate_ledger_ids(self._block)
        except Exception:
            log.exception("cannot allocate ledger ids")
            return
        self._ranges.append(range(first, first + self._block))
