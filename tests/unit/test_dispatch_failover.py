"""The Failover dispatcher's contract, through fake transports: one active consumer (the
first by priority, then name), every consumer told when that changes, and what the previous
active consumer had not acked delivered again to the new one."""

from __future__ import annotations

from pulsar_grpc.broker.topics.subscription import SubType
from tests.unit.dispatch_support import TOPIC, dispatch_env
from tests.waiting import eventually


async def test_a_standby_is_told_so_and_gets_nothing() -> None:
    async with dispatch_env() as env:
        (_, a_transport), (_, b_transport) = await env.subscribe_each(
            SubType.Failover, {"a": 2, "b": 10}
        )
        assert a_transport.active_changes == [True]
        assert b_transport.active_changes == [False]
        await env.publish_numbered(3)
        await eventually(lambda: len(a_transport.sent) == 2)
        await env.settle()
        # Not even what the active consumer has no permits for.
        assert b_transport.sent == []


async def test_a_new_active_consumer_gets_what_the_old_one_had_not_acked() -> None:
    async with dispatch_env() as env:
        b, b_transport = await env.subscribe("b", SubType.Failover)
        env.flow(b, 10)
        first, *_ = await env.publish_numbered(4)
        await eventually(lambda: len(b_transport.sent) == 4)
        await env.ack(b, (first, -1))
        # "a" sorts first: it takes over, and both hear of the change.
        a, a_transport = await env.subscribe("a", SubType.Failover)
        assert b_transport.active_changes == [True, False]
        assert a_transport.active_changes == [True]
        assert b.pending == {}
        env.flow(a, 10)
        await eventually(lambda: a_transport.payloads == [b"m1", b"m2", b"m3"])
        await env.settle()
        assert len(b_transport.sent) == 4


async def test_when_the_active_consumer_leaves_the_standby_takes_over_its_unacked() -> None:
    async with dispatch_env() as env:
        (a, a_transport), (_, b_transport) = await env.subscribe_each(
            SubType.Failover, {"a": 2, "b": 10}
        )
        await env.publish_numbered(3)
        await eventually(lambda: len(a_transport.sent) == 2)
        await env.subscription.remove_consumer(a)
        assert b_transport.active_changes == [False, True]
        await eventually(lambda: b_transport.payloads == [b"m0", b"m1", b"m2"])


async def test_on_a_partition_the_active_consumer_is_chosen_by_its_index() -> None:
    """Consumers of a partitioned topic share its partitions: partition p goes to number
    p % n of the n consumers of the highest priority, by name."""
    async with dispatch_env(topic=f"{TOPIC}-partition-1") as env:
        (_, a_transport), (_, b_transport) = await env.subscribe_each(
            SubType.Failover, {"a": 10, "b": 10}
        )
        assert a_transport.active_changes == [True, False]
        assert b_transport.active_changes == [True]
        await env.publish(b"m0")
        await eventually(lambda: b_transport.payloads == [b"m0"])
        await env.settle()
        assert a_transport.sent == []


async def test_during_the_switch_delay_nothing_is_dispatched() -> None:
    """activeConsumerFailoverDelayTimeMillis: the new active consumer waits, so that acks the
    old one still sends land first; the old one gets nothing more meanwhile. (The delay here
    outlasts the test: what happens after it is the next test's business.)"""
    async with dispatch_env(activeConsumerFailoverDelayTimeMillis=3_600_000) as env:
        b, b_transport = await env.subscribe("b", SubType.Failover)
        env.flow(b, 10)
        await env.publish_numbered(2)
        await eventually(lambda: len(b_transport.sent) == 2)
        [(_, a_transport)] = await env.subscribe_each(SubType.Failover, {"a": 10})
        assert a_transport.active_changes == [True]
        assert b_transport.active_changes == [True, False]
        await env.publish_numbered(2)
        await env.settle()
        assert a_transport.sent == []
        assert len(b_transport.sent) == 2
