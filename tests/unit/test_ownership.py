"""Bundle ownership over the in-memory metadata store shared by two brokers' caches: the broker
that acquires a bundle owns it, the other reads the owner, both agree when they race, a topic
load never takes an unowned bundle, a lost session lets the bundles go at once (and they are
not taken back), and the owner data is Pulsar's JSON; a bundle being unloaded is refused
everywhere, and a split parent is not taken again."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from pulsar_grpc.broker.cluster.ownership import (
    NamespaceEphemeralData,
    NotOwnerError,
    OwnershipCache,
    bundle_path,
)
from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.listeners import Endpoint, Listener
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata import (
    MemoryMetadataStore,
    SessionEvent,
    ZooKeeperMetadataStore,
)
from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundle, TopicName
from tests.faultproxy import FaultProxy
from tests.waiting import eventually
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

_TREES = itertools.count()


def broker(port: int) -> NamespaceEphemeralData:
    listeners = {
        "internal": Listener(
            "internal", {"grpc": Endpoint("127.0.0.1", port), "http": Endpoint("127.0.0.1", 8000)}
        ),
        "external": Listener("external", {"grpc+ssl": Endpoint("gw.example.com", port + 1)}),
    }
    return NamespaceEphemeralData.of(BrokerData(listeners, {"grpc": "{}"}), "internal")


class Member:
    def __init__(self, tree: str, port: int) -> None:
        self.store = MemoryMetadataStore(tree)
        self.lost: list[NamespaceBundle] = []
        self.cache = OwnershipCache(self.store, broker(port), self.on_lost)

    async def on_lost(self, bundles: list[NamespaceBundle]) -> None:
        self.lost.extend(bundles)


@pytest.fixture
async def members() -> tuple[Member, Member]:
    tree = f"ownership-{next(_TREES)}"
    a, b = Member(tree, 6650), Member(tree, 6660)
    policies = {"bundles": {"boundaries": ["0x00000000", "0x80000000", "0xffffffff"]}}
    await a.store.put("/admin/policies/public/default", json.dumps(policies).encode())
    yield a, b
    await a.cache.close()
    await b.cache.close()
    await a.store.close()
    await b.store.close()


async def test_a_topic_load_never_takes_an_unowned_bundle(members: tuple[Member, Member]) -> None:
    a, _ = members
    topic = TopicName.get("t")
    bundle = await a.cache.bundle_of(topic)
    with pytest.raises(ServiceNotReadyError, match="not owned by any broker: look the topic up"):
        await a.cache.check_owner(topic)
    assert not a.cache.owns(bundle)
    assert await a.cache.current_owner(bundle) is None
    assert not await a.store.exists(bundle_path(bundle))


async def test_the_acquirer_owns_and_the_other_is_refused_naming_it(
    members: tuple[Member, Member],
) -> None:
    a, b = members
    topic = TopicName.get("t")
    bundle = await a.cache.bundle_of(topic)
    assert bundle.range_str in ("0x00000000_0x80000000", "0x80000000_0xffffffff")  # policies'
    assert await a.cache.acquire(bundle) is a.cache.me
    assert a.cache.owns(bundle) and a.cache.owned() == [bundle]
    assert await b.cache.acquire(bundle) == a.cache.me
    with pytest.raises(NotOwnerError) as refused:
        await b.cache.check_owner(topic)
    assert refused.value.owner == a.cache.me
    assert await a.cache.check_owner(topic) == bundle


async def test_racing_brokers_agree_on_one_owner(members: tuple[Member, Member]) -> None:
    a, b = members
    bundle = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x80000000)
    seen_by_a, seen_by_b = await asyncio.gather(a.cache.acquire(bundle), b.cache.acquire(bundle))
    assert seen_by_a == seen_by_b
    assert a.cache.owns(bundle) != b.cache.owns(bundle)


async def test_a_lost_session_lets_go_at_once_and_another_broker_takes_over(
    members: tuple[Member, Member],
) -> None:
    a, b = members
    first = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x80000000)
    second = NamespaceBundle(DEFAULT_NAMESPACE, 0x80000000, 0xFFFFFFFF)
    await a.cache.acquire(first)
    await a.cache.acquire(second)
    assert await b.cache.acquire(first) == a.cache.me  # cached by b from now on
    a.store.expire_session()
    await eventually(lambda: sorted(a.lost, key=str) == [first, second])
    assert a.cache.owned() == []
    # b heard the node go (the store tells of deletions before the session events): its
    # next lookup takes the bundle rather than naming a.
    assert await b.cache.acquire(first) is b.cache.me
    for _ in range(10):  # let a's re-own pass (after SessionReestablished) read both nodes
        await asyncio.sleep(0)
    assert not a.cache.owns(first) and await a.cache.acquire(first) == b.cache.me
    assert not a.cache.owns(second)  # nobody asked: not re-taken behind the clients' back


async def test_closing_lets_go_of_every_bundle(members: tuple[Member, Member]) -> None:
    a, b = members
    bundle = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x80000000)
    await a.cache.acquire(bundle)
    await a.cache.close()  # the broker closed its topics; its session still lives
    assert not await a.store.exists(bundle_path(bundle))
    assert await b.cache.acquire(bundle) is b.cache.me


async def test_closing_while_the_store_is_unreachable_does_not_wait_on_it(
    members: tuple[Member, Member],
) -> None:
    """A broker stopping without its store gives nothing back (it could not): its nodes go
    with its session, and the close returns at once instead of holding the shutdown."""
    a, _ = members
    bundle = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x80000000)
    await a.cache.acquire(bundle)
    a.store.lose_connection()
    await a.cache.close()
    assert a.cache.owned() == []
    a.store.reconnect()
    assert await a.store.exists(bundle_path(bundle))  # left to the session's end


async def test_an_owner_read_before_a_reconnection_is_read_again(
    zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    """The reported bundle left without an owner: b cached a as the owner, b's connection to
    ZooKeeper dropped and came back within its session (the watch went with it), and a's
    node went meanwhile. b must not answer a (which would refuse the client): once
    reconnected it reads again, finds no owner, and a lookup places the bundle."""
    port = int(zookeeper.hosts.rsplit(":", 1)[1])
    async with FaultProxy(port) as link:
        a_store = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
        b_store = await ZooKeeperMetadataStore.connect(
            link.address, zk_chroot, session_timeout_s=20
        )
        a = OwnershipCache(a_store, broker(6650), _ignore)
        b = OwnershipCache(b_store, broker(6660), _ignore)
        try:
            bundle = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x40000000)
            await a.acquire(bundle)
            assert await b.current_owner(bundle) == a.me
            reconnected = asyncio.Event()
            b_store.register_session_listener(
                lambda e: reconnected.set() if e is SessionEvent.RECONNECTED else None
            )
            link.refusing = True
            link.cut()
            await a.release(bundle)  # while b cannot hear of it
            link.refusing = False
            await asyncio.wait_for(reconnected.wait(), 30)
            assert await b.current_owner(bundle) is None
            assert await b.acquire(bundle) is b.me
        finally:
            await a.close()
            await b.close()
            await a_store.close()
            await b_store.close()


async def _ignore(bundles: list[NamespaceBundle]) -> None:
    pass


async def test_owner_data_is_pulsars_namespace_ephemeral_data(
    members: tuple[Member, Member],
) -> None:
    a, _ = members
    bundle = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x80000000)
    await a.cache.acquire(bundle)
    node = await a.store.get(bundle_path(bundle))
    assert node is not None
    assert bundle_path(bundle) == "/namespace/public/default/0x00000000_0x80000000"
    assert json.loads(node.value) == {
        "nativeUrl": "grpc://127.0.0.1:6650",
        "nativeUrlTls": None,
        "httpUrl": "http://127.0.0.1:8000",
        "httpUrlTls": None,
        "disabled": False,
        "advertisedListeners": {
            "internal": {
                "brokerServiceUrl": "grpc://127.0.0.1:6650",
                "brokerHttpUrl": "http://127.0.0.1:8000",
            },
            "external": {"brokerServiceUrlTls": "grpc+ssl://gw.example.com:6651"},
        },
        "protocols": {"grpc": "{}"},
    }
    back = NamespaceEphemeralData.from_json(node.value)
    assert back == a.cache.me
    assert back.broker_data().listeners["external"].url("grpc+ssl") == (
        "grpc+ssl://gw.example.com:6651"
    )


async def test_a_split_bundle_is_not_taken_again_by_a_broker_that_has_not_heard_of_it(
    members: tuple[Member, Member],
) -> None:
    a, b = members
    parent = NamespaceBundle.parse(DEFAULT_NAMESPACE, "0x00000000_0x80000000")
    assert await b.cache.bundles(DEFAULT_NAMESPACE)  # b caches the two bundles
    assert await a.cache.acquire(parent) is a.cache.me
    # a splits: owns the halves, writes the policies, lets the parent go.
    halves = ["0x00000000_0x40000000", "0x40000000_0x80000000"]
    for half in halves:
        await a.cache.own_new(NamespaceBundle.parse(DEFAULT_NAMESPACE, half))
    policies = {"bundles": {"boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xffffffff"]}}
    await a.store.put("/admin/policies/public/default", json.dumps(policies).encode())
    await a.cache.release(parent)
    assert a.lost == []  # given up, not lost: its topics now belong to the halves
    # b still asks for the parent (a stale bundle cache): refused, not taken.
    with pytest.raises(ServiceNotReadyError, match="has just been split"):
        await b.cache.acquire(parent)
    assert await b.store.get(bundle_path(parent)) is None
    half = NamespaceBundle.parse(DEFAULT_NAMESPACE, halves[0])
    assert await b.cache.acquire(half) == a.cache.me


async def test_a_bundle_being_unloaded_is_refused_everywhere_then_placed_again(
    members: tuple[Member, Member],
) -> None:
    a, b = members
    topic = TopicName.get("t-unloaded")
    bundle = await a.cache.bundle_of(topic)
    assert await a.cache.acquire(bundle) is a.cache.me
    await a.cache.disable(bundle)
    assert not a.cache.is_active(bundle)
    for member in (a, b):
        with pytest.raises(ServiceNotReadyError, match="being unloaded"):
            await member.cache.acquire(bundle)
    with pytest.raises(ServiceNotReadyError, match="being unloaded"):
        await a.cache.check_owner(topic)
    node = await a.store.get(bundle_path(bundle))
    assert node is not None and json.loads(node.value)["disabled"] is True
    await a.cache.release(bundle)
    assert a.lost == [] and a.cache.owned() == []
    assert await eventually(lambda: b.cache.acquire(bundle)) is b.cache.me


async def test_after_a_fence_a_bundle_recorded_as_anothers_is_let_go(
    members: tuple[Member, Member],
) -> None:
    """A broker whose ledger was fenced checks its bundle in the store: still its own, it keeps
    it; recorded as another broker's (its session expired unnoticed, the other took over), it
    lets it go at once instead of loading the topic again and fencing the new owner back."""
    a, b = members
    topic = TopicName.get("t-fenced")
    bundle = await a.cache.bundle_of(topic)
    assert await a.cache.acquire(bundle) is a.cache.me
    await a.cache.recheck(topic)
    assert a.cache.owns(bundle) and a.lost == []
    # The node now says b (as after a's session expired and b took the bundle over), and a
    # has not heard of it: a change, not a deletion, so no notification makes a let go.
    node = await b.store.get(bundle_path(bundle))
    assert node is not None
    await b.store.put(bundle_path(bundle), b.cache.me.to_json(), node.version)
    assert a.cache.owns(bundle)
    await a.cache.recheck(topic)
    assert not a.cache.owns(bundle)
    await eventually(lambda: a.lost == [bundle])  # the loss callback runs as a task
