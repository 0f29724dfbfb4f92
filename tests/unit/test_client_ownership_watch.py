"""The SDK's side of ownership events: a reconnect waiting out a long backoff goes at once when
its topic's bundle is taken or left unowned (and only then), an event during an attempt makes
the next wait none, closing while woken still closes; the client's watch wakes the handles of
the topics an event names, lets go of a topic when its last handle closes, and remembers the
owners it hears of as brokers to watch through."""

from __future__ import annotations

import asyncio

import pytest

from pulsar_grpc import client
from pulsar_grpc.client import HandleState
from pulsar_grpc.client._connection import Backoff, ConnectionHandler
from pulsar_grpc.client._ownership_watch import OwnershipWatcher
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.waiting import eventually

LONG_BACKOFF_S = 3600.0  # a timer that would never fire within a test


class Opener:
    """A reopen that fails while ``refusing``, counting attempts."""

    def __init__(self) -> None:
        self.refusing = True
        self.attempts = 0
        self.given_up: list[client.PulsarException] = []
        self.dropped: list[client.PulsarException] = []

    async def reopen(self) -> None:
        self.attempts += 1
        if self.refusing:
            raise client.ConnectError("connection refused")


async def reconnecting(opener: Opener, name: str = "h") -> ConnectionHandler:
    """A handle that lost its stream and waits out an hour-long backoff before retrying."""
    h = ConnectionHandler(
        name,
        Backoff(LONG_BACKOFF_S, LONG_BACKOFF_S, rand=lambda: 0.0),
        opener.reopen,
        opener.given_up.append,
        opener.dropped.append,
    )
    opener.refusing = False
    await h.connect_first(5)
    opener.refusing = True
    h.lost(client.ConnectError("broker gone"))
    assert h.state is HandleState.CONNECTING
    return h


async def test_an_event_ends_the_backoff_wait_and_the_reconnect_counts_as_woken() -> None:
    opener = Opener()
    h = await reconnecting(opener)
    await asyncio.sleep(0)  # the reconnect task is in its hour-long wait
    assert opener.attempts == 1
    opener.refusing = False
    assert h.ownership_changed()
    assert await h.wait_ready(5)
    assert (h.reconnects, h.reconnects_on_event, opener.attempts) == (1, 1, 2)
    assert not h.ownership_changed()  # connected: nothing to wake
    await_closed(h)


async def test_an_event_during_an_attempt_makes_the_next_wait_none() -> None:
    opener = Opener()
    entered, release = asyncio.Event(), asyncio.Event()

    async def slow_reopen() -> None:
        opener.attempts += 1
        if opener.attempts == 2:  # the first retry: the event comes while it runs
            entered.set()
            await release.wait()
            raise client.ConnectError("still refused")

    opener.refusing = False
    h = ConnectionHandler(
        "h",
        Backoff(0.001, LONG_BACKOFF_S, rand=lambda: 0.0),
        slow_reopen,
        opener.given_up.append,
        opener.dropped.append,
    )
    await h.connect_first(5)
    h.lost(client.ConnectError("broker gone"))
    await entered.wait()
    assert h.ownership_changed()
    assert h.ownership_changed()  # a second event before the first was used: one wake
    release.set()
    assert await h.wait_ready(5)  # the next backoff (2 ms, then an hour) was skipped
    assert (opener.attempts, h.reconnects_on_event) == (3, 1)
    await_closed(h)


async def test_closing_a_woken_reconnect_still_closes() -> None:
    opener = Opener()
    h = await reconnecting(opener)
    await asyncio.sleep(0)
    h.ownership_changed()
    h.closing()
    await asyncio.sleep(0)
    assert h.state is HandleState.CLOSING and opener.attempts == 1


def await_closed(h: ConnectionHandler) -> None:
    h.closed()
    assert h.state is HandleState.CLOSED


def event(state: int, *topics: str, url: str = "") -> pb.WatchTopicOwnershipResponse:
    return pb.WatchTopicOwnershipResponse(
        state=state, bundle="public/default/0x00000000_0x40000000", topics=topics, grpc_url=url
    )


@pytest.fixture
async def watcher() -> OwnershipWatcher:
    c = client.Client("grpc://127.0.0.1:1")  # never dialled: events are handed in directly
    yield c.ownership_watch
    await c.close()


async def test_the_watch_wakes_the_reconnecting_handles_of_the_topics_named(
    watcher: OwnershipWatcher,
) -> None:
    opener_a, opener_b = Opener(), Opener()
    a, b = await reconnecting(opener_a, "a"), await reconnecting(opener_b, "b")
    watcher.add("persistent://public/default/a", a)
    watcher.add("persistent://public/default/b", b)
    await asyncio.sleep(0)
    watcher._dispatch(event(pb.OWNERSHIP_STATE_UNLOADING, "persistent://public/default/a"))
    await asyncio.sleep(0)
    assert opener_a.attempts == 1  # being unloaded: a lookup would be refused, no wake
    opener_a.refusing = False
    watcher._dispatch(event(pb.OWNERSHIP_STATE_UNOWNED, "persistent://public/default/a"))
    assert await a.wait_ready(5) and a.reconnects_on_event == 1
    assert b.state is HandleState.CONNECTING and opener_b.attempts == 1
    opener_b.refusing = False
    watcher._dispatch(
        event(pb.OWNERSHIP_STATE_OWNED, "persistent://public/default/b", url="grpc://h2:6651")
    )
    assert await b.wait_ready(5) and b.reconnects_on_event == 1
    assert (watcher.events, watcher.woken) == (3, 2)
    assert ("h2:6651", False) in watcher._fallbacks  # a broker to watch through
    assert watcher._next_target(watcher._service) == ("h2:6651", False)
    assert watcher._next_target(("h2:6651", False)) == watcher._service
    a.closed()
    b.closed()


async def test_a_topic_is_watched_until_its_last_handle_closes(watcher: OwnershipWatcher) -> None:
    first, second = await reconnecting(Opener()), await reconnecting(Opener())
    closed = await reconnecting(Opener())
    closed.closed()
    watcher.add("t", first)
    watcher.add("t", second)
    watcher.add("gone", closed)  # closed before it was added: never watched
    assert watcher.topics == ["t"]
    first.closed()
    assert watcher.topics == ["t"]
    second.closing()
    assert watcher.topics == []
    await eventually(lambda: watcher._task is None and watcher._restart is None)
