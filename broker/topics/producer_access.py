"""Producer access modes (PIP-68) and the topic epoch, as Pulsar's AbstractTopic keeps them.

A topic is written by any number of ``Shared`` producers, or by one exclusive producer. Each
time a producer takes the topic exclusively the topic epoch moves on, and the new epoch is
stored in the managed ledger's properties (``pulsar.topic.epoch``, Pulsar's name) before the
producer hears it. The producer keeps the epoch and reconnects with it: after an unload, a
broker restart or a bundle move, the broker that loads the topic reads the epoch back from
the ledger node, so the producer that held the topic gets it again and one that another
exclusive producer replaced meanwhile (an older epoch) is fenced instead of writing again.

- ``Exclusive``: refused (ProducerFenced) while any other producer is connected or waiting.
- ``WaitForExclusive``: waits, unanswered, until the topic has no producer; waiting costs a
  future and a queue slot, nothing is read from its stream meanwhile.
- ``ExclusiveWithFencing``: ends every other producer and fails every waiting one with
  ProducerFenced, then takes the topic.
- ``Shared``: refused (ProducerBusy) while an exclusive producer holds or waits for the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections import deque
from collections.abc import Callable, Collection
from dataclasses import dataclass

from pulsar_grpc.broker.errors import ProducerBusyError, ProducerFencedError
from pulsar_grpc.broker.ledger import ManagedLedger

TOPIC_EPOCH_PROPERTY = "pulsar.topic.epoch"  # Pulsar's PersistentTopic.TOPIC_EPOCH_PROPERTY_NAME


class ProducerAccessMode(enum.Enum):
    """Pulsar's ProducerAccessMode; the values are the names on the wire."""

    SHARED = "Shared"
    EXCLUSIVE = "Exclusive"
    WAIT_FOR_EXCLUSIVE = "WaitForExclusive"
    EXCLUSIVE_WITH_FENCING = "ExclusiveWithFencing"


@dataclass(eq=False, slots=True)
class _Waiter:
    """A WaitForExclusive producer in line: resolved with its epoch once it holds the topic."""

    name: str
    requested_epoch: int | None
    granted: asyncio.Future[int]


class ExclusiveAccess:
    """Who may produce on one topic: the exclusive holder, the producers waiting for it, and
    the topic epoch. The topic calls :meth:`admit` before registering a producer and
    :meth:`released` when one leaves; ``producers`` gives the names registered now and
    ``fence`` ends one of them with an error."""

    def __init__(
        self,
        topic: str,
        ledger: ManagedLedger,
        producers: Callable[[], Collection[str]],
        fence: Callable[[str, ProducerFencedError], None],
    ) -> None:
        self._topic = topic
        self._ledger = ledger
        self._producers = producers
        self._fence = fence
        raw = ledger.properties.get(TOPIC_EPOCH_PROPERTY)
        self.epoch: int | None = int(raw) if raw is not None and raw.isdigit() else None
        self.holder: str | None = None  # the exclusive producer's name; None: none holds it
        self._waiting: deque[_Waiter] = deque()
        self._promoting: asyncio.Task[None] | None = None

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def admit(
        self, name: str, mode: ProducerAccessMode, requested_epoch: int | None
    ) -> int | None:
        """Admit producer ``name`` under ``mode``: its topic epoch (None for a Shared producer
        on a topic never held exclusively), or Pulsar's error. A WaitForExclusive producer
        returns once it holds the topic; cancelled meanwhile (the client left), it leaves the
        line."""
        if mode is ProducerAccessMode.SHARED:
            if self.holder is not None or self._waiting:
                raise ProducerBusyError(
                    f"topic {self._topic} has an existing exclusive producer: {self._holder_name()}"
                )
            return self.epoch
        if mode is ProducerAccessMode.EXCLUSIVE:
            if self.holder is not None or self._waiting:
                raise ProducerFencedError(
                    f"topic {self._topic} has an existing exclusive producer: {self._holder_name()}"
                )
            if self._producers():
                raise ProducerFencedError(f"topic {self._topic} has existing shared producers")
        elif mode is ProducerAccessMode.EXCLUSIVE_WITH_FENCING:
            self._fence_all(name)
        elif self.holder is not None or self._producers() or self._waiting:
            return await self._wait(name, requested_epoch)
        return await self._take(name, requested_epoch)

    def released(self, name: str) -> None:
        """Producer ``name`` left the topic: if it held the topic, or it was the last one,
        the next waiting producer gets the topic (Pulsar promotes only after an exclusive
        producer, so a waiter behind Shared producers would wait for ever)."""
        if self.holder == name:
            self.holder = None
        if self.holder is None and not self._producers():
            self._promote_next()

    def close(self, error: Exception) -> None:
        """The topic closes: waiting producers fail with ``error`` (retryable: they look the
        topic up again and wait on its next owner)."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.granted.done():
                waiter.granted.set_exception(error)
                waiter.granted.exception()  # heard by the waiting call, or by nobody

    def _holder_name(self) -> str:
        return self.holder or (self._waiting[0].name if self._waiting else "")

    def _check_epoch(self, requested_epoch: int | None) -> None:
        current = self.epoch if self.epoch is not None else -1
        if requested_epoch is not None and requested_epoch < current:
            raise ProducerFencedError(
                f"topic {self._topic}: topic epoch has already moved. Current epoch: "
                f"{self.epoch}, producer epoch: {requested_epoch}"
            )

    async def _take(self, name: str, requested_epoch: int | None) -> int:
        """Hold the topic under the producer's epoch (a reconnect) or the next one, once the
        ledger node holds it."""
        self._check_epoch(requested_epoch)
        self.holder = name
        epoch = requested_epoch if requested_epoch is not None else self._next_epoch()
        try:
            await self._store(epoch)
        except BaseException:
            if self.holder == name:
                self.holder = None
            raise
        return epoch

    def _next_epoch(self) -> int:
        return 0 if self.epoch is None else self.epoch + 1

    async def _store(self, epoch: int) -> None:
        if epoch != self.epoch:
            await self._ledger.set_property(TOPIC_EPOCH_PROPERTY, str(epoch))
            self.epoch = epoch

    async def _wait(self, name: str, requested_epoch: int | None) -> int:
        waiter = _Waiter(name, requested_epoch, asyncio.get_running_loop().create_future())
        self._waiting.append(waiter)
        try:
            return await waiter.granted
        except asyncio.CancelledError:
            with contextlib.suppress(ValueError):
                self._waiting.remove(waiter)
            if waiter.granted.done() and not waiter.granted.cancelled():
                if waiter.granted.exception() is None:  # granted as the client left
                    self.released(name)
            raise

    def _promote_next(self) -> None:
        while self._waiting:
            waiter = self._waiting.popleft()
            if waiter.granted.done():
                continue
            try:
                self._check_epoch(waiter.requested_epoch)
            except ProducerFencedError as exc:
                waiter.granted.set_exception(exc)
                continue
            self.holder = waiter.name
            self._promoting = asyncio.get_running_loop().create_task(self._grant(waiter))
            return

    async def _grant(self, waiter: _Waiter) -> None:
        epoch = waiter.requested_epoch if waiter.requested_epoch is not None else self._next_epoch()
        try:
            await self._store(epoch)
        except Exception as exc:
            if self.holder == waiter.name:
                self.holder = None
            if not waiter.granted.done():
                waiter.granted.set_exception(exc)
            self._promote_next()
            return
        if waiter.granted.done():  # the client left meanwhile
            self.released(waiter.name)
        else:
            waiter.granted.set_result(epoch)

    def _fence_all(self, name: str) -> None:
        """ExclusiveWithFencing: the waiting producers fail and the connected ones end, all
        with ProducerFenced, so that none of them writes again or takes the topic after."""
        fenced = ProducerFencedError(f"topic {self._topic}: fenced out by producer {name}")
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if not waiter.granted.done():
                waiter.granted.set_exception(fenced)
        self.holder = None
        for other in list(self._producers()):
            self._fence(other, fenced)
