"""The Shared dispatcher's contract, through fake transports: entries go round robin to the
consumers that can take them (permits, a writable transport), a consumer of a lower priority
only when none of a higher one can, and a departing consumer's unacked entries go to the
others."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.topics.subscription import SubType
from tests.unit.dispatch_support import dispatch_env
from tests.waiting import eventually


async def test_round_robin_across_the_consumers_with_permits() -> None:
    async with dispatch_env() as env:
        subscribed = await env.subscribe_each(SubType.Shared, {"c1": 10, "c2": 10, "c3": 10})
        (_, t1), (_, t2), (_, t3) = subscribed
        await env.publish_numbered(6)
        await eventually(lambda: len(t1.sent) + len(t2.sent) + len(t3.sent) == 6)
        assert t1.payloads == [b"m0", b"m3"]
        assert t2.payloads == [b"m1", b"m4"]
        assert t3.payloads == [b"m2", b"m5"]


async def test_a_consumer_out_of_permits_is_passed_over() -> None:
    async with dispatch_env() as env:
        (c1, t1), (_, t2) = await env.subscribe_each(SubType.Shared, {"c1": 1, "c2": 10})
        await env.publish_numbered(4)
        await eventually(lambda: len(t1.sent) + len(t2.sent) == 4)
        assert len(t1.sent) == 1
        assert c1.permits == 0
        assert sorted(t1.payloads + t2.payloads) == [b"m0", b"m1", b"m2", b"m3"]


async def test_an_unwritable_consumer_is_passed_over_until_it_drains() -> None:
    async with dispatch_env() as env:
        (_, t1), (_, t2) = await env.subscribe_each(SubType.Shared, {"c1": 10, "c2": 2})
        t1.fill()
        await env.publish_numbered(4)
        await eventually(lambda: len(t2.sent) == 2)
        await env.settle()
        assert t1.sent == []
        t1.drain()
        await eventually(lambda: t1.payloads == [b"m2", b"m3"])


async def test_a_lower_priority_consumer_gets_only_what_the_higher_cannot_take() -> None:
    async with dispatch_env() as env:
        high, high_transport = await env.subscribe("high", SubType.Shared, priority_level=0)
        low, low_transport = await env.subscribe("low", SubType.Shared, priority_level=1)
        env.flow(high, 3)
        env.flow(low, 10)
        await env.publish_numbered(5)
        await eventually(lambda: len(high_transport.sent) + len(low_transport.sent) == 5)
        assert high_transport.payloads == [b"m0", b"m1", b"m2"]
        assert low_transport.payloads == [b"m3", b"m4"]


async def test_a_departing_consumer_hands_its_unacked_entries_to_the_others() -> None:
    async with dispatch_env() as env:
        (c1, t1), (c2, t2) = await env.subscribe_each(SubType.Shared, {"c1": 2, "c2": 0})
        await env.publish_numbered(2)
        await eventually(lambda: len(t1.sent) == 2)
        await env.ack(c1, (t1.positions[0], -1))
        await env.subscription.remove_consumer(c1)
        env.flow(c2, 10)
        await eventually(lambda: t2.payloads == [b"m1"])


@pytest.mark.parametrize("sub_type", [SubType.Shared, SubType.Key_Shared])
async def test_a_consumer_at_the_unacked_limit_gets_only_what_the_limit_leaves_room_for(
    sub_type: SubType,
) -> None:
    """maxUnackedMessagesPerConsumer bounds what one read sends too (Pulsar's
    getMaxEntriesInThisBatch), not only whether a consumer is served at all; Key_Shared
    applies the same limit."""
    async with dispatch_env(maxUnackedMessagesPerConsumer=2) as env:
        [(consumer, transport)] = await env.subscribe_each(sub_type, {"c": 10})
        await env.publish_numbered(4)
        await eventually(lambda: len(transport.sent) == 2)
        await env.settle()
        assert consumer.unacked_messages == 2
        await env.ack(consumer, (transport.positions[0], -1))
        await eventually(lambda: transport.payloads == [b"m0", b"m1", b"m2"])
        await env.settle()
        assert len(transport.sent) == 3
        assert consumer.unacked_messages == 2
