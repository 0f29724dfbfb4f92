"""Reconnection: the state of one stream handle, the backoff between attempts, and the loop
that reopens a broken stream (Pulsar's ConnectionHandler and Backoff).

A producer or consumer stream (one per partition) is READY while its gRPC stream is open. When
the stream ends with a retryable error (broker restart, dropped connection, topic unloaded: see
:func:`~client._errors.is_retryable`) the handle goes back to CONNECTING and a task reopens it:
each attempt looks the topic up afresh and opens a new stream, after a delay that doubles from
``initial_backoff_interval_ms`` up to ``max_backoff_interval_ms`` (100 ms and 60 s, Pulsar's
defaults), less up to 10 % of random jitter so that clients restarted together spread out. A
non-retryable error fails the handle for good, as before.

Credentials: the broker ends a stream whose credentials expired with AuthenticationError (it
checks every authenticationRefreshCheckSeconds). With a token supplier
(:attr:`CredentialRenewal.SUPPLIED`) the handle reconnects at once, the new stream carrying a
fresh token; if that one is refused too, the handle fails with the AuthenticationError (one
attempt, no loop). With fixed credentials the error is the application's at once.

Ownership: the handle (PartitionProducer, PartitionConsumer) owns its stream objects and says
what reopening means (:attr:`ConnectionHandler.reopen`); the handler owns the state and the
reconnect task, and nothing else changes the state.

Ownership events: the timer is the fallback. When the client's watch of topic ownership
(client/_ownership_watch.py) hears that the topic's bundle was taken by a broker or left unowned,
it calls :meth:`ConnectionHandler.ownership_changed`, and a reconnect waiting out its backoff
tries at once instead (an event during an attempt makes the next wait none), however long the
backoff has grown: the moment the topic can be served again is known, no need to guess it.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import TypeVar

from ._auth import CredentialRenewal
from ._errors import (
    AuthenticationError,
    ConnectError,
    PulsarException,
    is_retryable,
    is_retryable_at_creation,
)

T = TypeVar("T")

log = logging.getLogger("pulsar_grpc.client")

DEFAULT_INITIAL_BACKOFF_MS = 100
DEFAULT_MAX_BACKOFF_MS = 60_000


class Backoff:
    """Pulsar's Backoff: ``initial``, then doubling up to ``maximum``, each delay reduced by a
    random part of up to 10 % but never below ``initial``. ``rand`` returns a float in
    [0, 1); tests pass a fixed one.

    >>> b = Backoff(0.1, 1.0, rand=lambda: 0.0)
    >>> [b.next() for _ in range(6)]
    [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    >>> b.reset(); b.next()
    0.1
    """

    def __init__(
        self, initial_s: float, maximum_s: float, rand: Callable[[], float] = random.random
    ) -> None:
        if initial_s <= 0 or maximum_s < initial_s:
            raise ValueError("backoff needs 0 < initial_backoff_interval <= max_backoff_interval")
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self._rand = rand
        self._next_s = initial_s

    def next(self) -> float:
        """The delay before the next attempt, in seconds."""
        current = self._next_s
        self._next_s = min(current * 2, self.maximum_s)
        return max(self.initial_s, current - current * 0.1 * self._rand())

    def reset(self) -> None:
        """A connection succeeded: the next failure starts over from ``initial``."""
        self._next_s = self.initial_s


async def retry_creation(
    attempt: Callable[[], Awaitable[T]],
    backoff: Backoff,
    timeout_s: float,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``attempt`` until it succeeds, retrying what :func:`is_retryable_at_creation`
    allows with ``backoff`` between attempts, until ``timeout_s`` has passed (Pulsar's
    client retries creating a producer or consumer until its operation timeout). The last
    error is raised; what is not retryable (TLS, credentials, a bad topic) at once.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    followed = False  # the last retry went at once after a refusal naming the owner
    while True:
        try:
            return await attempt()
        except PulsarException as exc:
            # Sent on to the topic's owner: look up again at once (once in a row: two brokers
            # naming each other while ownership moves must not spin).
            followed = bool(exc.owner_url) and not followed
            delay = 0.0 if followed else backoff.next()
            if not is_retryable_at_creation(exc) or loop.time() + delay >= deadline:
                raise
            log.info("creation failed (%s); retrying in %.2f s", exc.message, delay)
        await sleep(delay)


class HandleState(Enum):
    """Where a producer's or consumer's stream stands."""

    CONNECTING = "connecting"  # no stream: the first open, or reconnecting after a failure
    READY = "ready"  # the stream is open; requests go out at once
    CLOSING = "closing"  # close() runs: no reconnect, no new work
    CLOSED = "closed"  # closed by the application or failed for good


class Pause(Enum):
    """How a reconnect's wait between attempts ended."""

    ELAPSED = "elapsed"  # the backoff ran out
    WOKEN = "woken"  # an ownership event cut it short


class _Wake(Enum):
    NONE = "none"
    PENDING = "pending"  # an ownership event came: the reconnect's wait ends


class _Phase(Enum):
    ATTEMPTING = "attempting"  # opening a stream (or between steps)
    PAUSING = "pausing"  # waiting out the backoff: an ownership event may cancel the wait


class ConnectionHandler:
    """The state of one handle and its reconnect loop.

    ``reopen`` opens a new stream (fresh lookup included) and makes it the handle's current
    one, raising a :class:`PulsarException` when it cannot; ``give_up`` fails the handle with a
    non-retryable error; ``drop`` ends the current stream as lost with the error given (the
    handle then reconnects). ``clock_sleep`` is ``asyncio.sleep`` unless a test drives time.
    """

    def __init__(
        self,
        name: str,
        backoff: Backoff,
        reopen: Callable[[], Awaitable[None]],
        give_up: Callable[[PulsarException], None],
        drop: Callable[[PulsarException], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        renewal: CredentialRenewal = CredentialRenewal.FIXED,
    ) -> None:
        self.name = name
        self.renewal = renewal
        self.backoff = backoff
        self.reopen = reopen
        self._give_up = give_up
        self._drop = drop
        self._sleep = sleep
        self._state = HandleState.CONNECTING
        self._ready = asyncio.Event()  # mirrors READY, so requests can wait for a reconnect
        self._task: asyncio.Task[None] | None = None
        self.reconnects = 0  # successful reconnections, for tests and stats
        # An ownership event while CONNECTING: the reconnect's current or next wait ends.
        self._wake = _Wake.NONE
        self._phase = _Phase.ATTEMPTING
        # Reconnections whose last wait an ownership event (or a switch of cluster) cut short,
        # for tests and stats.
        self.reconnects_on_event = 0
        # Called once when the handle closes or fails for good (the ownership watch lets go).
        self.on_end: list[Callable[[], None]] = []

    @property
    def state(self) -> HandleState:
        return self._state

    def _set(self, state: HandleState) -> None:
        self._state = state
        if state is HandleState.READY:
            self._ready.set()
            self._wake = _Wake.NONE
        else:
            self._ready.clear()
        if state in (HandleState.CLOSING, HandleState.CLOSED):
            ends, self.on_end = self.on_end, []
            for end in ends:
                end()

    def ownership_changed(self) -> bool:
        """The topic's bundle was just taken by a broker or left unowned (the next lookup
        places it): a reconnect waiting for its backoff goes now (True). While connected, the
        first wait of a reconnect that follows is none: the event and the end of the stream
        come over different connections, and the event may be first (an unload ends the
        streams, then releases the bundle). False when there is nothing to wake."""
        if self._state is HandleState.READY:
            self._wake = _Wake.PENDING
            return False
        if self._state is not HandleState.CONNECTING:
            return False
        if self._wake is _Wake.NONE:
            self._wake = _Wake.PENDING
            if self._phase is _Phase.PAUSING and self._task is not None:
                self._task.cancel()  # taken back by _pause: the wait just ends early
        return True

    def cluster_switched(self) -> None:
        """The client switched to another cluster (cluster failover): an open stream is
        dropped and, like a reconnect under way, reopens at once where the new cluster's
        lookup says; the producer resends what has no receipt, the consumer resubscribes."""
        if self._state is HandleState.READY:
            self._drop(ConnectError("the client switched to another cluster"))
        self.ownership_changed()

    async def _pause(self, delay_s: float) -> Pause:
        """Wait ``delay_s``, or less when an ownership event comes (then or meanwhile). The
        wait runs in the reconnect task itself, which the event cancels: no task per wait."""
        if self._wake is _Wake.NONE:
            self._phase = _Phase.PAUSING
            try:
                await self._sleep(delay_s)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                ours = self._wake is _Wake.PENDING and self._state is HandleState.CONNECTING
                if not ours or task is None or task.cancelling() != 1:
                    raise  # closing
                task.uncancel()
            finally:
                self._phase = _Phase.ATTEMPTING
        if self._wake is _Wake.PENDING:
            self._wake = _Wake.NONE
            return Pause.WOKEN
        return Pause.ELAPSED

    async def connect_first(self, timeout_s: float) -> None:
        """Open the first stream, retrying within ``timeout_s`` while the broker is only
        restarting or busy (:func:`retry_creation`); any other failure is the caller's at
        once (a TLS refusal, a bad topic, a name in use)."""
        await retry_creation(self.reopen, self.backoff, timeout_s, self._sleep)
        self.backoff.reset()
        self._set(HandleState.READY)

    def retries(self, error: PulsarException) -> bool:
        """Whether a stream that ended with ``error`` is reopened: the error is retryable, or
        the broker found the stream's credentials expired and fresh ones can be asked for."""
        return is_retryable(error) or self._renews(error)

    def _renews(self, error: PulsarException) -> bool:
        return isinstance(error, AuthenticationError) and (
            self.renewal is CredentialRenewal.SUPPLIED
        )

    def lost(self, error: PulsarException) -> None:
        """The current stream ended with ``error``: reconnect if :meth:`retries` says so; at
        once when the broker named the topic's owner or the credentials are to be renewed."""
        if self._state is not HandleState.READY:
            return
        if not self.retries(error):
            self._give_up(error)
            return
        log.warning("%s: connection lost (%s); reconnecting", self.name, error.message)
        self._set(HandleState.CONNECTING)
        self._task = asyncio.get_running_loop().create_task(
            self._reconnect(at_once=error.owner_url is not None or self._renews(error))
        )

    async def wait_ready(self, timeout_s: float) -> bool:
        """Wait until the handle is READY (False when it is not within ``timeout_s``)."""
        if self._state is HandleState.READY:
            return True
        if self._state is not HandleState.CONNECTING:
            return False
        try:
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
        except TimeoutError:
            return False
        return self._state is HandleState.READY

    def closing(self) -> None:
        """close() began: stop reconnecting."""
        self._set(HandleState.CLOSING)
        self._cancel_task()

    def closed(self) -> None:
        """The handle is closed or failed for good."""
        self._set(HandleState.CLOSED)
        self._cancel_task()

    def _cancel_task(self) -> None:
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
        self._task = None

    async def _reconnect(self, at_once: bool = False) -> None:
        """``at_once``: the stream ended naming the topic's new owner (a broker that does
        not own the topic refused it), so the first attempt looks up again without waiting."""
        while self._state is HandleState.CONNECTING:
            pause = await self._pause(0.0 if at_once else self.backoff.next())
            followed, at_once = at_once, False
            if self._state is not HandleState.CONNECTING:
                return
            try:
                await self.reopen()
            except PulsarException as exc:
                at_once = exc.owner_url is not None and not followed  # once in a row
                if not is_retryable(exc, reconnecting=True):
                    log.warning("%s: reconnect refused for good: %s", self.name, exc.message)
                    self._give_up(exc)
                    return
                log.info("%s: reconnect failed (%s); retrying", self.name, exc.message)
                continue
            self.backoff.reset()
            self.reconnects += 1
            self._set(HandleState.READY)
            if pause is Pause.WOKEN:
                self.reconnects_on_event += 1
                log.info("%s: reconnected at once (ownership event or cluster switch)", self.name)
            else:
                log.info("%s: reconnected", self.name)
