"""Group commit: many appends share one transaction and one sync.

While a commit is in flight, new writes accumulate; when it finishes they all go in the next
commit. Under load the batch size adapts to the sync latency by itself, with no timer.
Independent of the storage engine, so the PostgreSQL store can reuse it.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.store import CursorKey, EntryWrite, LedgerStore

__all__ = ["CommitFn", "GroupCommittedStore", "GroupCommitter"]

log = logging.getLogger(__name__)

CommitFn = Callable[[list[EntryWrite], dict[CursorKey, bytes | None]], Awaitable[None]]


class GroupCommitter:
    """Serializes commits and batches the writes that arrive during each one."""

    def __init__(self, commit: CommitFn) -> None:
        self._commit = commit
        self._entries: list[EntryWrite] = []
        self._cursors: dict[CursorKey, bytes | None] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(
        self, entries: Sequence[EntryWrite], cursor_states: Mapping[CursorKey, bytes | None]
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._entries.extend(entries)
        self._cursors.update(cursor_states)
        self._waiters.append(fut)
        if self._task is None:
            # A task (not an immediate commit) so that every write of this loop iteration
            # joins the first batch.
            self._task = loop.create_task(self._run())
        return fut

    async def drain(self) -> None:
        """Wait until everything submitted so far is committed (or failed)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    async def _run(self) -> None:
        try:
            while self._waiters:
                entries, self._entries = self._entries, []
                cursors, self._cursors = self._cursors, {}
                waiters, self._waiters = self._waiters, []
                error: BaseException | None = None
                try:
                    await self._commit(entries, cursors)
                except Exception as e:
                    log.exception("ledger store commit of %d entries failed", len(entries))
                    error = e
                for fut in waiters:
                    if fut.done():
                        continue
                    if error is None:
                        fut.set_result(None)
                    else:
                        fut.set_exception(PersistenceError(f"commit failed: {error}"))
        finally:
            self._task = None


class GroupCommittedStore(LedgerStore):
    """A LedgerStore whose appends go through a :class:`GroupCommitter` (every store today):
    the append path, refused once the store is closed, is written once here."""

    _committer: GroupCommitter

    @property
    @abstractmethod
    def closed(self) -> bool:
        """Whether close() has run: appends and reads are refused."""

    def append(
        self,
        entries: Sequence[EntryWrite],
        cursor_states: Mapping[CursorKey, bytes | None] | None = None,
    ) -> asyncio.Future[None]:
        if self.closed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(PersistenceError("ledger store is closed"))
            return fut
        return self._committer.submit(entries, cursor_states or {})
