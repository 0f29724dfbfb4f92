"""Leader election over the in-memory store shared by three brokers: exactly one leads with
Pulsar's LeaderBroker JSON at /loadbalance/leader, the others follow it; a leader that closes
or loses its session is replaced, and it stops its leader-only tasks at once."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator

import pytest

from pulsar_grpc.broker.cluster.leader import (
    LEADER_PATH,
    LeaderBroker,
    LeaderElection,
    LeaderState,
)
from pulsar_grpc.broker.metadata import MemoryMetadataStore, SessionEvent
from tests.waiting import eventually

_TREES = itertools.count()


class Member:
    def __init__(self, tree: str, port: int) -> None:
        self.store = MemoryMetadataStore(tree)
        self.election = LeaderElection(
            self.store, LeaderBroker(f"127.0.0.1:{port}", f"http://127.0.0.1:{port}")
        )
        self.ticks = 0
        self.election.add_task("tick", 0.01, self.tick)

    async def tick(self) -> None:
        self.ticks += 1


@pytest.fixture
async def members() -> AsyncIterator[list[Member]]:
    tree = f"leader-{next(_TREES)}"
    members = [Member(tree, 8080 + i) for i in range(3)]
    await asyncio.gather(*(m.election.start() for m in members))
    yield members
    for member in members:
        await member.election.close()
        await member.store.close()


def leaders(members: list[Member]) -> list[Member]:
    return [m for m in members if m.election.state is LeaderState.LEADER]


async def agreed_leader(members: list[Member]) -> Member:
    """Wait until exactly one member leads and every other one follows it."""

    def check() -> None:
        found = leaders(members)
        assert len(found) == 1, [m.election.state for m in members]
        for member in members:
            assert member.election.leader == found[0].election.me

    await eventually(check, timeout=10)
    return leaders(members)[0]


async def test_exactly_one_leader_with_pulsars_leader_broker_json(members: list[Member]) -> None:
    leader = await agreed_leader(members)
    node = await members[0].store.get(LEADER_PATH)
    assert node is not None
    assert json.loads(node.value) == {
        "brokerId": leader.election.me.broker_id,
        "serviceUrl": leader.election.me.service_url,
    }
    followers = [m for m in members if m is not leader]
    assert all(m.election.state is LeaderState.FOLLOWER for m in followers)
    # Only the leader runs the leader-only task.
    await eventually(lambda: leader.ticks >= 3)
    assert [m.ticks for m in followers] == [0, 0]


async def test_a_closed_leader_is_replaced(members: list[Member]) -> None:
    first = await agreed_leader(members)
    await first.election.close()
    assert first.election.state is LeaderState.STOPPED
    rest = [m for m in members if m is not first]
    second = await agreed_leader(rest)
    assert second is not first
    ticks = first.ticks
    await eventually(lambda: second.ticks >= 3)
    assert first.ticks == ticks  # its tasks ended with its leadership


async def test_a_leader_losing_its_session_stops_at_once_and_another_leads(
    members: list[Member],
) -> None:
    first = await agreed_leader(members)
    # What the old leader is when its store tells of the lost session (the election's own
    # listener was registered first, so it has run by then).
    seen: list[tuple[SessionEvent, LeaderState]] = []
    first.store.register_session_listener(lambda e: seen.append((e, first.election.state)))
    first.store.expire_session()
    await eventually(lambda: len(seen) == 2)
    assert seen[0] == (SessionEvent.SESSION_LOST, LeaderState.NO_LEADER)
    # A leader is agreed again by all three: the old one takes part in its new session.
    leader = await agreed_leader(members)
    ticks = leader.ticks
    await eventually(lambda: leader.ticks >= ticks + 3)


async def test_a_leader_whose_connection_drops_stops_at_once_and_leads_again_when_back(
    members: list[Member],
) -> None:
    """ZooKeeper may expire the session a third of a session timeout after the broker notices
    the silence, and another broker lead then: a leader stops at ConnectionLost, not at
    SessionLost. Back within the session, its node is still there: it leads again."""
    first = await agreed_leader(members)
    seen: list[tuple[SessionEvent, LeaderState]] = []
    first.store.register_session_listener(lambda e: seen.append((e, first.election.state)))
    first.store.lose_connection()
    await eventually(lambda: len(seen) == 1)
    assert seen[0] == (SessionEvent.CONNECTION_LOST, LeaderState.NO_LEADER)
    ticks = first.ticks
    for _ in range(20):  # its leader-only task was cancelled: no tick comes any more
        await asyncio.sleep(0.01)
    assert first.ticks == ticks
    others = [m for m in members if m is not first]
    assert all(m.election.leader == first.election.me for m in others)  # its node lives
    first.store.reconnect()
    assert await agreed_leader(members) is first
    await eventually(lambda: first.ticks >= ticks + 3)


async def test_a_task_added_while_leading_starts_at_once(members: list[Member]) -> None:
    leader = await agreed_leader(members)
    ran = asyncio.Event()

    async def mark() -> None:
        ran.set()

    leader.election.add_task("late", 0.01, mark)
    await asyncio.wait_for(ran.wait(), 10)


async def test_close_waits_for_tasks_cancelled_when_the_session_was_lost(
    members: list[Member],
) -> None:
    """A leader-only task cancelled by a lost session may take a while to wind down (an HTTP
    call being torn down); closing the broker right after must still wait for it."""
    first = await agreed_leader(members)
    started = asyncio.Event()
    wound_down = asyncio.Event()

    async def slow_to_cancel() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05)
            wound_down.set()
            raise

    first.election.add_task("slow", 0.01, slow_to_cancel)
    await asyncio.wait_for(started.wait(), 10)
    lost = asyncio.Event()
    first.store.register_session_listener(
        lambda e: lost.set() if e is SessionEvent.SESSION_LOST else None
    )
    first.store.expire_session()
    await asyncio.wait_for(lost.wait(), 10)
    await first.election.close()
    assert wound_down.is_set()


class AnswersThroughCancellation(MemoryMetadataStore):
    """A store whose read of the leader node, once ``hold`` is set, waits for ``release`` and
    then answers even if the caller was cancelled meanwhile, as Python 3.11's
    asyncio.wait_for does when the answer and the cancellation arrive together."""

    def __init__(self, tree: str) -> None:
        super().__init__(tree)
        self.hold = False
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def get(self, path: str):  # type: ignore[no-untyped-def]
        found = await super().get(path)
        if path == LEADER_PATH and self.hold:
            self.held.set()
            try:
                await asyncio.shield(self.release.wait())
            except asyncio.CancelledError:
                await self.release.wait()
        return found


async def test_an_election_answered_after_close_does_not_make_the_closed_broker_lead() -> None:
    tree = f"leader-{next(_TREES)}"
    leader = Member(tree, 9001)
    follower = Member(tree, 9002)
    store = follower.store = AnswersThroughCancellation(tree)
    follower.election = LeaderElection(store, follower.election.me)
    follower.election.add_task("tick", 0.01, follower.tick)
    await leader.election.start()
    await follower.election.start()
    assert follower.election.state is LeaderState.FOLLOWER
    store.hold = True
    await leader.election.close()  # the follower's election reads the free node...
    await asyncio.wait_for(store.held.wait(), 10)
    closing = asyncio.get_running_loop().create_task(follower.election.close())
    await asyncio.sleep(0)  # ...and is cancelled by close while the read is under way
    store.release.set()
    await asyncio.wait_for(closing, 10)
    assert follower.election.state is LeaderState.STOPPED
    assert await store.get(LEADER_PATH) is None  # it did not take the node either
    assert follower.ticks == 0
    await leader.store.close()
    await store.close()
