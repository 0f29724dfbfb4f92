"""Group commit: many appends share one transaction and one sync.

While a commit is in flight, new writes accumulate; when it finishes they all go in the next
commit. Under load the batch size adapts to the sync latency by itself, with no timer.
Independent of the storage engine, so the PostgreSQL store can reuse it.

A group holds the writes of many owners (managed ledgers); the store's commit leaves out the
owners fenced since they opened (see store.py) and names them, and only their callers' futures
fail, with ManagedLedgerFencedError.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pulsar_grpc.broker.errors import ManagedLedgerFencedError, PersistenceError
from pulsar_grpc.broker.ledger.store import EntryWrite, LedgerOwner, LedgerStore

__all__ = ["CommitBatch", "CommitFn", "GroupCommittedStore", "GroupCommitter", "OwnerWrites"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class OwnerWrites:
    """What one owner queued for a commit: entries in call order, the last state per cursor."""

    entries: list[EntryWrite] = field(default_factory=list)
    cursors: dict[str, bytes | None] = field(default_factory=dict)


CommitBatch = dict[LedgerOwner, OwnerWrites]

CommitFn = Callable[[CommitBatch], Awaitable[set[LedgerOwner]]]
"""Commits the writes of the current owners of a batch in one transaction, after checking in
it that each owner's epoch is current; returns the owners that were not (nothing of theirs
was written)."""


class GroupCommitter:
    """Serializes commits and batches the writes that arrive during each one."""

    def __init__(self, commit: CommitFn) -> None:
        self._commit = commit
        self._batch: CommitBatch = {}
        self._waiters: list[tuple[LedgerOwner, asyncio.Future[None]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(
        self,
        owner: LedgerOwner,
        entries: Sequence[EntryWrite],
        cursor_states: Mapping[str, bytes | None],
    ) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        writes = self._batch.get(owner)
        if writes is None:
            writes = self._batch[owner] = OwnerWrites()
        writes.entries.extend(entries)
        writes.cursors.update(cursor_states)
        self._waiters.append((owner, fut))
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
                batch, self._batch = self._batch, {}
                waiters, self._waiters = self._waiters, []
                error: BaseException | None = None
                fenced: set[LedgerOwner] = set()
                try:
                    fenced = await self._commit(batch)
                except PersistenceError as e:  # the store's own account: no traceback
                    log.warning(
                        "ledger store commit of %d owners' writes failed: %s", len(batch), e
                    )
                    error = e
                except Exception as e:
                    log.exception("ledger store commit of %d owners' writes failed", len(batch))
                    error = e
                for owner in fenced:
                    log.warning(
                        "%s: fenced (epoch %d is no longer current), %d entries refused",
                        owner.name,
                        owner.epoch,
                        len(batch[owner].entries),
                    )
                for owner, fut in waiters:
                    if fut.done():
                        continue
                    if error is not None:
                        fut.set_exception(PersistenceError(f"commit failed: {error}"))
                    elif owner in fenced:
                        fut.set_exception(_fenced(owner))
                    else:
                        fut.set_result(None)
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
        owner: LedgerOwner,
        entries: Sequence[EntryWrite],
        cursor_states: Mapping[str, bytes | None] | None = None,
    ) -> asyncio.Future[None]:
        if self.closed:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            fut.set_exception(PersistenceError("ledger store is closed"))
            return fut
        return self._committer.submit(owner, entries, cursor_states or {})


def _fenced(owner: LedgerOwner) -> ManagedLedgerFencedError:
    return ManagedLedgerFencedError(
        f"managed ledger {owner.name} was opened by another owner since epoch {owner.epoch}:"
        " its writes are refused"
    )
