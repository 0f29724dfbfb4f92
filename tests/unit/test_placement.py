"""Bundle placement (Pulsar's LeastLongTermMessageRate): overloaded brokers are left out, the
least message rate wins, bundles chosen recently count until the broker's report shows them,
ties go to the fewest bundles; over real load-report JSON in the in-memory store."""

from __future__ import annotations

import itertools
import json
from collections import Counter

from pulsar_grpc.broker.cluster.placement import BrokerLoad, BundlePlacement, select_broker
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata import MemoryMetadataStore

_TREES = itertools.count()


def load(broker: str, cpu: float = 0.0, rate: float = 0.0, bundles: int = 0) -> BrokerLoad:
    return BrokerLoad(
        broker, cpu / 100, rate, frozenset(f"b{i}" for i in range(bundles)), BrokerData({})
    )


def test_least_message_rate_wins_and_overloaded_brokers_are_left_out() -> None:
    loads = [load("a", rate=10), load("b", rate=5), load("c", cpu=90, rate=0)]
    assert select_broker(loads, {}, 85) == "b"
    assert select_broker(loads, {}, 95) == "c"  # not overloaded under a higher threshold


def test_all_overloaded_still_places_on_one_of_them() -> None:
    loads = [load("a", cpu=90, bundles=3), load("b", cpu=95, bundles=1)]
    assert select_broker(loads, {}, 85) == "b"


def test_ties_go_to_fewest_bundles_then_the_smallest_id() -> None:
    assert select_broker([load("a", bundles=2), load("b", bundles=1)], {}, 85) == "b"
    assert select_broker([load("b"), load("a")], {}, 85) == "a"
    # A bundle without rate data counts the default rate (50 in + 50 out), reported or
    # preallocated (assigned, not in the report yet); a busier broker counts its real rate.
    assert select_broker([load("a"), load("b", rate=99)], {"a": {"x"}}, 85) == "b"
    assert select_broker([load("a"), load("b", rate=101)], {"a": {"x"}}, 85) == "a"
    assert select_broker([load("a", bundles=1), load("b", rate=99)], {}, 85) == "b"
    assert select_broker([load("a", bundles=1, rate=300), load("b", bundles=2)], {}, 85) == "b"


def test_no_broker_no_choice() -> None:
    assert select_broker([], {}, 85) is None


def report(cpu: float, bundles: list[str]) -> bytes:
    return json.dumps(
        {
            "cpu": {"usage": cpu, "limit": 200.0},
            "memory": {"usage": 10.0, "limit": 1000.0},
            "bandwidthIn": {"usage": 0.0, "limit": 0.0},
            "msgRateIn": 0.0,
            "msgRateOut": 0.0,
            "bundles": bundles,
            "advertisedListeners": {
                "internal": {"brokerServiceUrl": "grpc://127.0.0.1:6650"},
            },
            "protocols": {"grpc": "{}"},
        }
    ).encode()


async def test_eight_bundles_on_three_idle_brokers_spread_three_three_two() -> None:
    store = MemoryMetadataStore(f"placement-{next(_TREES)}")
    try:
        for broker in ("h:1", "h:2", "h:3"):
            await store.put(f"/loadbalance/brokers/{broker}", report(10.0, []))
        placement = BundlePlacement(store, 85)
        chosen = [await placement.select(f"public/default/{i}") for i in range(8)]
        counts = Counter(c.broker_id for c in chosen if c is not None)
        assert sorted(counts.values()) == [2, 3, 3]
        # Asked again while pending, a bundle goes where it was sent before.
        again = await placement.select("public/default/0")
        assert again is not None and chosen[0] is not None
        assert again.broker_id == chosen[0].broker_id
        assert again.data.listeners["internal"].url("grpc") == "grpc://127.0.0.1:6650"
        # Once a report shows its bundles, they count as that broker's own.
        mine = sorted(f"public/default/{i}" for i, c in enumerate(chosen) if c == chosen[0])
        await store.put(f"/loadbalance/brokers/{chosen[0].broker_id}", report(10.0, mine))
        following = await placement.select("public/default/8")
        assert following is not None and following.broker_id != chosen[0].broker_id
        # An overloaded broker (cpu 180 of 200: 90%) gets nothing while others do not.
        await store.put(f"/loadbalance/brokers/{following.broker_id}", report(180.0, []))
        nxt = await placement.select("public/default/9")
        assert nxt is not None and nxt.broker_id != following.broker_id
        # A broker that left is no candidate.
        await store.delete(f"/loadbalance/brokers/{nxt.broker_id}")
        for i in range(10, 14):
            chosen_now = await placement.select(f"public/default/{i}")
            assert chosen_now is not None and chosen_now.broker_id != nxt.broker_id
    finally:
        await store.close()


async def test_a_broker_whose_report_cannot_be_read_is_not_chosen() -> None:
    """A damaged (or another version's) load report leaves that broker out; the lookup that
    asked is still answered (before, the parse error reached the client as INTERNAL)."""
    store = MemoryMetadataStore(f"placement-{next(_TREES)}")
    try:
        await store.put("/loadbalance/brokers/h:1", report(10.0, []))
        await store.put("/loadbalance/brokers/h:2", b"{not json")
        await store.put("/loadbalance/brokers/h:3", json.dumps({"msgRateIn": "fast"}).encode())
        placement = BundlePlacement(store, 85)
        assert set(await placement.loads()) == {"h:1"}
        for i in range(3):
            chosen = await placement.select(f"public/default/{i}")
            assert chosen is not None and chosen.broker_id == "h:1"
    finally:
        await store.close()
