"""The leader's load balancing under steady SDK produce/consume load (deduplication on: every
receipted message is consumed, none stored twice):

- automatic split: a bundle with more topics than loadBalancerNamespaceBundleMaxTopics is split
  by the leader (and its halves unloaded), up to loadBalancerNamespaceMaximumBundles; three
  brokers in one process on a shared memory: store and one PostgreSQL ledger store;
- shedding: three broker PROCESSES (tests/cluster.py, real ZooKeeper and PostgreSQL), the one
  owning two bundles carries all the traffic, so the CPU its load report shows (its own
  process's) is well above the others'; the leader unloads one of its bundles, which goes to
  another broker and stays there, and the clients carry on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.client import Client, ServiceUnitNotReady
from tests.cluster import Cluster, Member, cluster_factory, one_topic_per_bundle, place
from tests.e2e.steady_load import SteadyLoad
from tests.e2e.test_cluster_bundles import service, topics_in
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

BUNDLES = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
# The leader checks every 1.2 s; reports are checked for a rewrite every 200 ms.
FAST_BALANCING = {
    "loadBalancerSheddingIntervalMinutes": "0.02",
    "loadBalancerReportUpdateMinIntervalMillis": "200",
}


async def test_the_load_report_carries_each_bundles_stats(
    broker_factory: Callable[..., BrokerThread], postgres_url: str
) -> None:
    store = f"memory:balance-{uuid.uuid4().hex[:8]}"
    broker = broker_factory(
        metadataStoreUrl=store,
        ledgerStorageUrl=postgres_url,
        loadBalancerAutoBundleSplitEnabled=False,
        loadBalancerReportUpdateMinIntervalMillis=200,
    )
    first = BUNDLES.bundles[0]
    names = topics_in(first, 3)
    reporter = service(broker).load_reporter
    assert reporter is not None
    async with Client(broker.service_url) as client:
        load = await SteadyLoad(client, names).start()

        async def reported() -> dict[str, float]:
            found = await reporter.store.get(reporter.path)
            assert found is not None
            stats = json.loads(found.value)["lastStats"].get(str(first))
            assert stats is not None and stats["msgRateIn"] > 0 and stats["msgThroughputOut"] > 0
            return dict(stats)

        stats = await eventually(reported, timeout=30)
        await load.finish()
    assert set(stats) == {
        "msgRateIn",
        "msgRateOut",
        "msgThroughputIn",
        "msgThroughputOut",
        "consumerCount",
        "producerCount",
        "topics",
        "cacheSize",
    }
    assert (stats["topics"], stats["producerCount"], stats["consumerCount"]) == (3, 3, 3)


async def test_the_leader_splits_a_bundle_with_too_many_topics_clients_carry_on(
    broker_factory: Callable[..., BrokerThread], postgres_url: str
) -> None:
    store = f"memory:balance-{uuid.uuid4().hex[:8]}"
    cluster = [
        broker_factory(
            metadataStoreUrl=store,
            ledgerStorageUrl=postgres_url,
            brokerDeduplicationEnabled=True,
            loadBalancerNamespaceBundleMaxTopics=2,
            loadBalancerNamespaceMaximumBundles=5,  # 4 + one split
            **FAST_BALANCING,
        )
        for _ in range(3)
    ]
    first = BUNDLES.bundles[0]
    names = topics_in(first, 3)
    async with Client(cluster[0].service_url) as client:
        load = await SteadyLoad(client, names).start()
        await load.receipts(100)

        async def split() -> NamespaceBundles | bool:
            bundles, _ = await service(cluster[1]).resources.get_bundles(DEFAULT_NAMESPACE)
            return bundles if len(bundles) == 5 else False

        bundles = await eventually(split, timeout=60, what="the leader splits the bundle")
        assert first not in bundles.bundles
        halves = [b for b in bundles if first.lower <= b.lower and b.upper <= first.upper]
        assert len(halves) == 2
        # The halves were unloaded: their topics load again where lookups place them.
        await load.receipts(200)
        await load.finish()
        bundles, _ = await service(cluster[2]).resources.get_bundles(DEFAULT_NAMESPACE)
        assert len(bundles) == 5  # the maximum: no further split, however many topics


async def test_the_leader_sheds_a_bundle_from_the_overloaded_broker_clients_carry_on(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(
        brokerDeduplicationEnabled="true",
        # Margin over Pulsar's 10 on a busy test machine (the hot broker's cpu is ~15-25%).
        loadBalancerBrokerThresholdShedderPercentage="5",
        loadBalancerBundleUnloadMinThroughputThreshold="0.001",  # 1 KB/s: traffic needed
        # Bundle throughputs come from the stats task: at Pulsar's 60 s the shedder saw no
        # traffic for the first minute.
        statsUpdateFrequencyInSecs="1",
        **FAST_BALANCING,
    )
    members = cluster.members
    url = members[0].service_url()
    topics = one_topic_per_bundle("shed")
    owners = [await place(members, url, t) for t in topics]  # 4 bundles on 3 idle brokers
    (hot,) = [m for m in members if owners.count(m) == 2]
    hot_bundles = [BUNDLES.bundle_for(t) for t, o in zip(topics, owners, strict=True) if o is hot]
    names = [n for b in hot_bundles for n in topics_in(b, 3)]

    async def moved() -> list[tuple[TopicName, Member]]:
        try:
            now = [(TopicName.get(n), await place(members, url, TopicName.get(n))) for n in names]
        except ServiceUnitNotReady as exc:  # being unloaded: ask again
            raise AssertionError(exc) from None
        return [(t, owner) for t, owner in now if owner is not hot]

    async with Client(url) as client:
        load = await SteadyLoad(client, names).start()
        await load.receipts(100)
        shed = await eventually(
            moved, timeout=180, interval=1, what="a bundle leaves the hot broker"
        )
        new_owners = {owner.name for _, owner in shed}
        shed_bundles = {BUNDLES.bundle_for(t) for t, _ in shed}
        assert len(shed_bundles) == 1  # never the last bundle: the other stays
        logs = "".join(m.process.log.read_text(errors="replace") for m in members)
        (bundle,) = shed_bundles
        assert f"unloading bundle {bundle} from broker {hot.broker_id}" in logs
        await load.receipts(200)
        await load.finish()
        # Within the grace period it is not shed again (nor back): still on the broker it went to.
        assert {owner.name for _, owner in await moved()} == new_owners
