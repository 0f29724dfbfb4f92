"""The broker side of WatchTopicOwnership over the in-memory metadata store: two brokers'
ownership caches move bundles while a third broker's watch service tells a watch what happens
to the bundles of its topics (initial state, taken, the unload's disabled -> deleted sequence,
an owner's session ending, a split), one pending change per bundle however slowly it is read,
and the limits on what a watch may name."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from pulsar_grpc.broker.cluster.ownership import OwnershipCache, bundle_path
from pulsar_grpc.broker.cluster.ownership_watch import (
    OwnershipEvent,
    OwnershipState,
    OwnershipWatchService,
    TopicOwnershipWatch,
)
from pulsar_grpc.broker.errors import InvalidArgumentError, ServiceNotReadyError
from pulsar_grpc.broker.metadata import MemoryMetadataStore
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, TopicName
from tests.unit.test_ownership import broker
from tests.waiting import eventually

_TREES = itertools.count()
POLICIES = "/admin/policies/public/default"
TWO_BUNDLES = ["0x00000000", "0x80000000", "0xffffffff"]
OWNED, UNLOADING, UNOWNED = OwnershipState


@dataclass
class World:
    """Brokers a and b own bundles; the watch service runs on a third broker's store."""

    a: OwnershipCache
    b: OwnershipCache
    service: OwnershipWatchService
    stores: list[MemoryMetadataStore]


async def _no_loss(bundles: list[NamespaceBundle]) -> None:
    return None


@pytest.fixture
async def world() -> AsyncIterator[World]:
    tree = f"ownership-watch-{next(_TREES)}"
    stores = [MemoryMetadataStore(tree) for _ in range(3)]
    await stores[0].put(POLICIES, json.dumps({"bundles": {"boundaries": TWO_BUNDLES}}).encode())
    a = OwnershipCache(stores[0], broker(6650), _no_loss)
    b = OwnershipCache(stores[1], broker(6660), _no_loss)
    service = OwnershipWatchService(stores[2], max_topics=4)
    yield World(a, b, service, stores)
    await service.close()
    await a.close()
    await b.close()
    for store in stores:
        await store.close()


async def next_event(watch: TopicOwnershipWatch) -> OwnershipEvent:
    async with asyncio.timeout(10):
        return await watch.next()


def two_topics() -> tuple[TopicName, TopicName]:
    """One topic in each of the two bundles."""
    bundles = NamespaceBundles.parse(TopicName.get("x").namespace, TWO_BUNDLES)
    found: dict[NamespaceBundle, TopicName] = {}
    for i in itertools.count():
        topic = TopicName.get(f"t{i}")
        found.setdefault(bundles.bundle_for(topic), topic)
        if len(found) == 2:
            return found[bundles.bundles[0]], found[bundles.bundles[1]]
    raise AssertionError("unreachable")


async def test_the_first_events_are_each_bundles_state_then_its_changes(world: World) -> None:
    low, high = two_topics()
    bundle = await world.a.bundle_of(low)
    await world.a.acquire(bundle)
    watch = await world.service.watch([low.full_name, "t-other-spelling", high.full_name])
    initial = [await next_event(watch), await next_event(watch)]
    by_bundle = {str(e.bundle): e for e in initial}
    assert all(e.initial for e in initial) and len(by_bundle) == 2
    owned = by_bundle[str(bundle)]
    assert owned.ownership.state is OWNED and owned.ownership.owner == world.a.me
    assert low.full_name in owned.topics
    other = next(e for e in initial if e is not owned)
    assert other.ownership.state is UNOWNED and high.full_name in other.topics

    # b takes the other bundle: a change, not initial, naming b.
    await world.b.acquire(other.bundle)
    taken = await next_event(watch)
    assert (taken.bundle, taken.ownership.state, taken.initial) == (other.bundle, OWNED, False)
    assert taken.ownership.owner == world.b.me
    watch.close()


async def test_an_unload_is_disabled_then_unowned_then_owned_by_the_next_lookup(
    world: World,
) -> None:
    topic, _ = two_topics()
    bundle = await world.a.bundle_of(topic)
    await world.a.acquire(bundle)
    watch = await world.service.watch([topic.full_name])
    assert (await next_event(watch)).ownership.state is OWNED
    await world.a.disable(bundle)
    assert (await next_event(watch)).ownership.state is UNLOADING
    await world.a.release(bundle)
    assert (await next_event(watch)).ownership.state is UNOWNED
    await world.b.acquire(bundle)
    event = await next_event(watch)
    assert event.ownership.state is OWNED and event.ownership.owner == world.b.me
    watch.close()


async def test_an_owners_session_ending_leaves_the_bundle_unowned(world: World) -> None:
    topic, _ = two_topics()
    bundle = await world.a.bundle_of(topic)
    await world.a.acquire(bundle)
    watch = await world.service.watch([topic.full_name])
    await next_event(watch)
    world.stores[0].expire_session()  # what ZooKeeper does once a killed owner's session ends
    event = await next_event(watch)
    assert event.ownership.state is UNOWNED and event.topics == (topic.full_name,)
    watch.close()


async def test_re_owned_by_the_same_broker_is_still_told(world: World) -> None:
    """Deleted then created again by the same owner: the owner changed hands (its topics were
    closed), though the node reads the same as before."""
    topic, _ = two_topics()
    bundle = await world.a.bundle_of(topic)
    await world.a.acquire(bundle)
    watch = await world.service.watch([topic.full_name])
    await next_event(watch)
    await world.a.release(bundle)
    await world.a.acquire(bundle)
    states = [(await next_event(watch)).ownership.state]
    while states[-1] is not OWNED:
        states.append((await next_event(watch)).ownership.state)
    assert states in ([OWNED], [UNOWNED, OWNED])
    watch.close()


async def test_a_split_moves_the_topics_onto_the_new_bundles(world: World) -> None:
    topic, _ = two_topics()
    parent = await world.a.bundle_of(topic)
    await world.a.acquire(parent)
    watch = await world.service.watch([topic.full_name])
    await next_event(watch)
    # As broker/bundles.py splits: own the parts, write the policies, give the parent up.
    new = (await world.a.bundles(parent.namespace)).split_at(
        parent, [(parent.lower + parent.upper) // 2]
    )
    parts = [b for b in new if parent.lower <= b.lower and b.upper <= parent.upper]
    for part in parts:
        await world.a.own_new(part)
    boundaries = {"bundles": {"boundaries": new.boundary_strings}}
    await world.stores[0].put(POLICIES, json.dumps(boundaries).encode())
    await world.a.release(parent)
    child = new.bundle_for(topic)
    event = await next_event(watch)
    while event.bundle != child:  # the parent's deletion may be read before the policies
        assert event.bundle == parent and event.ownership.state is UNOWNED
        event = await next_event(watch)
    assert event.ownership.state is OWNED and event.ownership.owner == world.a.me
    assert event.topics == (topic.full_name,)
    assert list(watch.by_path) == [bundle_path(child)]
    watch.close()


async def test_a_slow_reader_holds_one_pending_change_per_bundle(world: World) -> None:
    topic, _ = two_topics()
    bundle = await world.a.bundle_of(topic)
    watch = await world.service.watch([topic.full_name])
    assert (await next_event(watch)).ownership.state is UNOWNED
    for _ in range(20):  # taken and released, never read meanwhile
        await world.a.acquire(bundle)
        await world.a.release(bundle)
    await world.b.acquire(bundle)

    await eventually(lambda: world.service._states[bundle_path(bundle)].owner == world.b.me)
    assert len(watch._pending) == 1
    event = await next_event(watch)
    assert event.ownership.state is OWNED and event.ownership.owner == world.b.me
    watch.close()
    assert not world.service._watchers and not world.service._states


@pytest.mark.parametrize(
    ("topics", "message"),
    [
        ([], "at least one topic"),
        (["t1", "t2", "t3", "t4", "t5"], "at most 4 topics, not 5"),
        (["t1", "t1"], "named twice"),
        (["persistent://no-namespace"], "invalid topic name"),
    ],
)
async def test_a_bad_watch_is_refused_with_what_is_wrong(
    world: World, topics: list[str], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        await world.service.watch(topics)
    assert not world.service._watchers


async def test_the_watchers_own_session_loss_ends_its_watches(world: World) -> None:
    watch = await world.service.watch(["t"])
    await next_event(watch)
    world.stores[2].expire_session()
    with pytest.raises(ServiceNotReadyError, match="lost its metadata session"):
        while True:
            await next_event(watch)
    watch.close()
