"""The client's watch of topic ownership (the WatchTopicOwnership RPC, docs/protocol.md).

Why: a producer or consumer whose broker went away reconnects on a backoff timer that doubles up
to ``max_backoff_interval_ms`` (Pulsar's). After a kill -9 its topic cannot be served until the
dead owner's metadata session expires (30 s by Pulsar's default), and by then the timer has grown
so that the reconnect comes many seconds later still. The broker knows the moment the bundle is
free or taken again; this watch asks to be told, and wakes every reconnecting handle of a topic
whose bundle got an event (:meth:`ConnectionHandler.ownership_changed`). The timer stays as the
fallback: against an older broker, a standalone one or a proxy (UNIMPLEMENTED) the watch stops
and nothing else changes.

One watch per client, of the topics of its open producers and consumers (partitions by their
own names, at most :data:`MAX_WATCHED_TOPICS`: the broker's limit). When that set changes the
watch is opened again with the new set (changes within :data:`RESTART_DELAY_S` together), and the
old stream is cancelled only once the new one answered, so no event falls in between.

Which broker: the watch must live on a broker that survives the failure it reports, so not on a
topic's owner. It goes to the service URL (the broker lookups start at); when that call fails
it is opened again (backoff from 100 ms to :data:`WATCH_MAX_BACKOFF_S`), trying the service URL
and the brokers the watch has seen own bundles in turn, so it outlives the service URL's broker
too. A re-opened watch starts with every bundle's state, which wakes the handles that missed an
event meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
from collections import deque

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._calls import BrokerCalls
from ._channels import parse_service_url
from ._connection import Backoff, ConnectionHandler, HandleState
from ._errors import AlreadyClosed

__all__ = ["MAX_WATCHED_TOPICS", "OwnershipWatcher", "WatchState"]

log = logging.getLogger("pulsar_grpc.client")

MAX_WATCHED_TOPICS = 10_000
RESTART_DELAY_S = 0.1
WATCH_INITIAL_BACKOFF_S = 0.1
WATCH_MAX_BACKOFF_S = 2.0
# Brokers remembered (besides the service URL) to watch through when the service URL's fails.
MAX_FALLBACK_BROKERS = 8
# Events that wake a reconnect: the bundle is served, or the next lookup places it.
_WAKING = (pb.OWNERSHIP_STATE_OWNED, pb.OWNERSHIP_STATE_UNOWNED)


class WatchState(enum.Enum):
    IDLE = "idle"  # nothing to watch
    WATCHING = "watching"  # a stream is open or being opened
    UNSUPPORTED = "unsupported"  # the broker has no such RPC: the backoff timer alone
    # Refused (credentials, permission): the timer alone until the watched topics change.
    REFUSED = "refused"
    CLOSED = "closed"


_RESTARTABLE = (WatchState.IDLE, WatchState.WATCHING, WatchState.REFUSED)
# Answers a retry would get again: the watch waits for its topics to change.
_REFUSALS = (
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.INVALID_ARGUMENT,
)


class OwnershipWatcher:
    """One client's watch (see the module docstring)."""

    def __init__(
        self, calls: BrokerCalls, service: tuple[str, bool] | None, listener: str | None
    ) -> None:
        """``service``: the gRPC service URL's address; None for a web service URL, whose
        client has no broker to watch through: its reconnects follow the timer alone."""
        self._calls = calls
        self._service = service or ("", False)
        self._tls = self._service[1]
        self._listener = listener or ""
        self._handlers: dict[str, set[ConnectionHandler]] = {}
        self._state = WatchState.IDLE if service else WatchState.UNSUPPORTED
        self._task: asyncio.Task[None] | None = None
        self._restart: asyncio.TimerHandle | None = None
        self._fallbacks: deque[tuple[str, bool]] = deque(maxlen=MAX_FALLBACK_BROKERS)
        self._target = self._service  # the broker the last stream was open on
        self.events = 0  # responses received, for tests and stats
        self.woken = 0  # reconnects woken by them

    @property
    def state(self) -> WatchState:
        return self._state

    @property
    def topics(self) -> list[str]:
        return sorted(self._handlers)

    def use(self, service: tuple[str, bool] | None) -> None:
        """Watch through another cluster's service URL from now on (cluster failover): the
        brokers seen so far are the old cluster's, and the watch is opened there again (also
        when the old cluster refused it: the new one takes other credentials). None: the new
        cluster is reached by a web service URL, with no broker to watch through."""
        self._fallbacks.clear()
        if self._state is WatchState.CLOSED:
            return
        if service is None:
            self._stop(WatchState.UNSUPPORTED)
            return
        self._service = self._target = service
        self._tls = service[1]
        if self._state is WatchState.UNSUPPORTED:
            self._state = WatchState.IDLE
        if self._state in (WatchState.WATCHING, WatchState.REFUSED) or self._handlers:
            self._schedule()

    def add(self, topic: str, handler: ConnectionHandler) -> None:
        """Watch ``topic`` for ``handler`` until the handle closes."""
        if self._state in (WatchState.UNSUPPORTED, WatchState.CLOSED):
            return
        if handler.state in (HandleState.CLOSING, HandleState.CLOSED):
            return  # closed already: on_end has run
        handlers = self._handlers.setdefault(topic, set())
        handlers.add(handler)
        handler.on_end.append(lambda: self._remove(topic, handler))
        if len(handlers) == 1:
            self._schedule()

    def _remove(self, topic: str, handler: ConnectionHandler) -> None:
        handlers = self._handlers.get(topic)
        if handlers is None:
            return
        handlers.discard(handler)
        if not handlers:
            del self._handlers[topic]
            self._schedule()

    def _schedule(self) -> None:
        if self._restart is None and self._state in _RESTARTABLE:
            loop = asyncio.get_running_loop()
            self._restart = loop.call_later(RESTART_DELAY_S, self._open)

    def _open(self) -> None:
        """Watch the current topics with a new stream (the old one ends once it answered)."""
        self._restart = None
        if self._state not in _RESTARTABLE:
            return
        previous, self._task = self._task, None
        topics = self.topics[:MAX_WATCHED_TOPICS]
        if not topics:
            self._state = WatchState.IDLE
            if previous is not None:
                previous.cancel()
            return
        self._state = WatchState.WATCHING
        self._task = asyncio.get_running_loop().create_task(self._run(topics, previous))

    async def _run(self, topics: list[str], previous: asyncio.Task[None] | None) -> None:
        """Keep one stream of ``topics`` open, on whichever broker answers."""
        request = pb.WatchTopicOwnershipRequest(topics=topics, listener_name=self._listener)
        backoff = Backoff(WATCH_INITIAL_BACKOFF_S, WATCH_MAX_BACKOFF_S)
        target = self._target
        try:
            while True:
                try:
                    stub = self._calls.stub(*target)
                    call = stub.WatchTopicOwnership(
                        request, metadata=self._calls.metadata(None, {})
                    )
                    # read(), not `async for`: grpc's iterator is an async generator, which
                    # the loop's shutdown would have to close while it waits (an error on
                    # stderr when a client is dropped without close()).
                    try:
                        while (response := await call.read()) is not grpc.aio.EOF:
                            if previous is not None:  # the new stream answered: the old goes
                                previous.cancel()
                                previous = None
                            self._target = target
                            backoff.reset()
                            self._dispatch(response)
                    finally:
                        call.cancel()
                    log.info("ownership watch at %s ended; watching again", target[0])
                except grpc.aio.AioRpcError as exc:
                    if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                        log.info("no ownership watch at %s: reconnects follow the timer", target[0])
                        self._state = WatchState.UNSUPPORTED
                        return
                    if exc.code() in _REFUSALS:
                        log.warning("ownership watch refused at %s: %s", target[0], exc.details())
                        self._state = WatchState.REFUSED
                        return
                    log.info("ownership watch at %s failed: %s", target[0], exc.details())
                except AlreadyClosed:
                    return
                target = self._next_target(target)
                await asyncio.sleep(backoff.next())
        finally:
            if previous is not None:
                previous.cancel()

    def _next_target(self, failed: tuple[str, bool]) -> tuple[str, bool]:
        """The broker to try after ``failed``: the service URL and the owners seen, in turn."""
        targets = [self._service, *(t for t in self._fallbacks if t != self._service)]
        if failed not in targets:
            return targets[0]
        return targets[(targets.index(failed) + 1) % len(targets)]

    def _dispatch(self, response: pb.WatchTopicOwnershipResponse) -> None:
        self.events += 1
        if response.state == pb.OWNERSHIP_STATE_OWNED:
            url = (response.grpc_url_tls or response.grpc_url) if self._tls else response.grpc_url
            with contextlib.suppress(ValueError):  # no usable address: nothing to remember
                owner = parse_service_url(url or response.grpc_url or response.grpc_url_tls)
                if owner not in self._fallbacks:
                    self._fallbacks.append(owner)
        if response.state not in _WAKING:
            return
        for topic in response.topics:
            for handler in list(self._handlers.get(topic, ())):
                if response.initial and handler.state is not HandleState.CONNECTING:
                    continue  # a state, not a change: nothing for a connected handle
                if handler.ownership_changed():
                    self.woken += 1
                    log.info(
                        "%s: bundle %s is %s; reconnecting now",
                        handler.name,
                        response.bundle,
                        pb.OwnershipState.Name(response.state).removeprefix("OWNERSHIP_STATE_"),
                    )

    async def close(self) -> None:
        """Stop watching (the client closes)."""
        task = self._stop(WatchState.CLOSED)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _stop(self, state: WatchState) -> asyncio.Task[None] | None:
        """End the watch in ``state``: no restart pending, the stream's task cancelled (and
        returned, for a caller that waits for it to end)."""
        self._state = state
        if self._restart is not None:
            self._restart.cancel()
            self._restart = None
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return task
