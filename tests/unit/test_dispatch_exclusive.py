"""The Exclusive dispatcher's contract, through a fake transport: permits bound what is sent
(an entry is sent whole, so a batch may overshoot them), a transport that is not writable gets
nothing until it drains, and a partly acked batch comes back with its acked indexes."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.errors import ConsumerBusyError, ServerError
from pulsar_grpc.broker.topics.subscription import SubType
from tests.unit.dispatch_support import dispatch_env
from tests.waiting import eventually


async def test_nothing_is_sent_without_permits_and_no_more_than_they_ask() -> None:
    async with dispatch_env() as env:
        await env.publish_numbered(5)
        consumer, transport = await env.subscribe("c", SubType.Exclusive)
        await env.settle()
        assert transport.sent == []
        env.flow(consumer, 3)
        await eventually(lambda: len(transport.sent) == 3)
        await env.settle()
        assert transport.payloads == [b"m0", b"m1", b"m2"]
        assert consumer.permits == 0
        env.flow(consumer, 10)
        await eventually(lambda: len(transport.sent) == 5)
        assert transport.payloads[3:] == [b"m3", b"m4"]
        assert consumer.permits == 8


async def test_a_batch_is_sent_whole_and_overshoots_the_permits() -> None:
    async with dispatch_env() as env:
        await env.publish(b"m0")
        await env.publish(b"big", batch=5)
        await env.publish(b"m2")
        consumer, transport = await env.subscribe("c", SubType.Exclusive)
        env.flow(consumer, 1)
        await eventually(lambda: transport.payloads == [b"m0"])
        # Two permits: the read (of two entries, at one message an entry so far) brings the
        # batch, sent whole, and the entry after it, which waits.
        env.flow(consumer, 2)
        await eventually(lambda: len(transport.sent) == 2)
        await env.settle()
        assert [(d.num_messages, d.batch_size) for d in transport.sent] == [(1, 1), (5, 5)]
        assert consumer.permits == -3
        # The overshoot is paid back before anything more is sent.
        env.flow(consumer, 3)
        await env.settle()
        assert len(transport.sent) == 2
        env.flow(consumer, 1)
        await eventually(lambda: transport.payloads == [b"m0", b"big", b"m2"])


async def test_an_unwritable_transport_gets_nothing_until_it_drains() -> None:
    async with dispatch_env() as env:
        consumer, transport = await env.subscribe("c", SubType.Exclusive)
        transport.fill()
        env.flow(consumer, 10)
        await env.publish_numbered(3)
        await env.settle()
        assert transport.sent == []
        transport.drain()
        await eventually(lambda: transport.payloads == [b"m0", b"m1", b"m2"])


async def test_a_partly_acked_batch_is_redelivered_with_its_acked_indexes() -> None:
    async with dispatch_env() as env:
        position = await env.publish(b"batch", batch=4)
        consumer, transport = await env.subscribe("c", SubType.Exclusive)
        env.flow(consumer, 10)
        await eventually(lambda: len(transport.sent) == 1)
        assert transport.sent[0].acked_indexes == 0
        await env.ack(consumer, (position, 0), (position, 2))
        assert consumer.unacked_messages == 2
        env.subscription.redeliver(consumer)
        await eventually(lambda: len(transport.sent) == 2)
        again = transport.sent[1]
        assert again.position == position
        assert again.acked_indexes == 0b0101
        assert (again.num_messages, again.batch_size) == (2, 4)
        assert again.redelivery_count == 1
        assert consumer.unacked_messages == 2


async def test_a_second_consumer_is_refused_and_the_first_keeps_its_messages() -> None:
    async with dispatch_env() as env:
        consumer, transport = await env.subscribe("c", SubType.Exclusive)
        with pytest.raises(ConsumerBusyError) as refused:
            await env.subscribe("other", SubType.Exclusive)
        assert refused.value.code is ServerError.ConsumerBusy
        env.flow(consumer, 10)
        await env.publish(b"m0")
        await eventually(lambda: transport.payloads == [b"m0"])
        assert [c.name for c in env.subscription.consumers] == ["c"]
