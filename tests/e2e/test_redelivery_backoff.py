"""Negative-ack and ack-timeout redelivery backoff (Java's MultiplierRedeliveryBackoff),
applied by the broker: each redelivery of a message waits ``min * multiplier ** count``, at
most ``max``, where ``count`` is the message's redelivery count.

Real broker, real gRPC. Delays are asserted as lower bounds only (the time from the client's
nack to the message's return can only be longer than the broker's delay). The cap is shown by
arrival: the uncapped delay of those cases is minutes, the capped one a fraction of a second,
so a message that arrives at all within the usual wait was capped.
"""

from __future__ import annotations

import time

import grpc
import pytest

from pulsar_grpc.client import MultiplierRedeliveryBackoff, SyncClient
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import RECEIVE_MS
from tests.e2e.test_ack_correctness import OpenConsumer, RawConsumer, consumer_on, produce
from tests.e2e.wire import error_code, stub
from tests.support import BrokerThread

__all__ = ["consumer_on"]  # the fixture, imported for this module's tests

ACK_TIMEOUT_MS = 1000  # Pulsar's minimum


def _whole(entry: pb.DeliveredEntry) -> pb.MessageId:
    return pb.MessageId(ledger_id=entry.ledger_id, entry_id=entry.entry_id, batch_index=-1)


async def _nack_rounds(consumer: RawConsumer, rounds: int) -> list[tuple[int, float]]:
    """Nack the one entry delivered, ``rounds`` times: each return's redelivery count and the
    seconds from the nack to it."""
    [entry] = await consumer.entries(1)
    seen = []
    for _ in range(rounds):
        nacked = time.monotonic()
        await consumer.send(negative_ack=pb.NegativeAck(ids=[_whole(entry)]))
        [entry] = await consumer.entries(1)
        seen.append((entry.redelivery_count, time.monotonic() - nacked))
    await consumer.ack([_whole(entry)])
    return seen


@pytest.mark.parametrize(
    ("case", "backoff", "at_least"),
    [
        # 200, 400, 800 ms for redelivery counts 0, 1, 2, not the default one-minute delay.
        ("grows", ("200", "60000", "2"), (0.2, 0.4, 0.8)),
        # Multiplier 100: uncapped, the second and third waits would be 10 s and 1000 s;
        # capped at 300 ms, each comes back within the usual wait, and not before the cap.
        ("capped", ("100", "300", "100"), (0.1, 0.3, 0.3)),
    ],
)
async def test_nack_backoff_through_headers(
    channel: grpc.aio.Channel,
    consumer_on: OpenConsumer,
    case: str,
    backoff: tuple[str, str, str],
    at_least: tuple[float, ...],
) -> None:
    """A raw gRPC consumer (no SDK) names the backoff in its Consume call; each return of the
    nacked message carries its redelivery count and waited at least the backoff's delay."""
    topic = f"backoff-nack-{case}"
    await produce(channel, topic, [b"poison"])
    consumer = await consumer_on(
        topic,
        "Shared",
        negative_ack_backoff_min_delay_ms=backoff[0],
        negative_ack_backoff_max_delay_ms=backoff[1],
        negative_ack_backoff_multiplier=backoff[2],
    )
    await consumer.flow(10)
    seen = await _nack_rounds(consumer, len(at_least))
    assert [count for count, _ in seen] == [1, 2, 3]
    for (_, waited), bound in zip(seen, at_least, strict=True):
        assert waited >= bound


async def test_ack_timeout_backoff_adds_to_the_timeout_and_is_capped(
    channel: grpc.aio.Channel, consumer_on: OpenConsumer
) -> None:
    """Java's UnAckedMessageRedeliveryTracker: a timed-out message is redelivered the
    backoff after its ack timeout: 1 s + 600 ms, then 1 s + 1200 ms (capped: 600 s uncapped).
    Times count from before the first delivery (a lower bound: the broker's clock starts
    later), so the second is asserted as the sum of both."""
    await produce(channel, "backoff-ack-timeout", [b"slow"])
    consumer = await consumer_on(
        "backoff-ack-timeout",
        "Shared",
        ack_timeout_ms=str(ACK_TIMEOUT_MS),
        ack_timeout_backoff_min_delay_ms="600",
        ack_timeout_backoff_max_delay_ms="1200",
        ack_timeout_backoff_multiplier="1000",
    )
    started = time.monotonic()
    await consumer.flow(10)
    await consumer.entries(1)
    [first] = await consumer.entries(1)
    first_at = time.monotonic() - started
    [second] = await consumer.entries(1)
    second_at = time.monotonic() - started
    await consumer.ack([_whole(second)])
    assert (first.redelivery_count, second.redelivery_count) == (1, 2)
    assert first_at >= 1.6  # the ack timeout alone would redeliver it within about 1.25 s
    assert second_at >= 1.6 + 2.2


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"negative-ack-backoff-multiplier": "1"}, "multiplier must be > 1"),
        ({"negative-ack-backoff-multiplier": "inf"}, "is not a decimal number"),
        (
            {"ack-timeout-backoff-min-delay-ms": "500", "ack-timeout-backoff-max-delay-ms": "400"},
            "maxDelayMs must be >= minDelayMs",
        ),
        ({"negative-ack-backoff-min-delay-ms": "-1"}, "is not between 0 and"),
        ({"ack-timeout-backoff-max-delay-ms": str(2**63)}, "is not between 0 and"),
        *(
            ({"ack-timeout-backoff-multiplier": value}, "is not a decimal number")
            for value in ("nan", "1e3", "-2", "2.", "9" * 5000)
        ),
        ({"negative-ack-backoff-multiplier": "9999999999"}, "multiplier must be > 1"),
    ],
)
async def test_a_backoff_the_java_builder_refuses_is_refused(
    channel: grpc.aio.Channel, headers: dict[str, str], message: str
) -> None:
    metadata = (
        ("x-pulsar-topic", "backoff-refused"),
        ("x-pulsar-subscription", "sub"),
        *((f"x-pulsar-{k}", v) for k, v in headers.items()),
    )
    call = stub(channel).Consume(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call.read()
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in (refused.value.details() or "")
    assert error_code(refused.value) == pb.UnknownError


def test_blocking_client_nack_backoff(broker: BrokerThread) -> None:
    """The SDK's ``negative_ack_redelivery_backoff`` on the blocking client: the waits grow
    (300 ms, then 600 ms) and each redelivery carries its count."""
    topic = "backoff-sync"
    with SyncClient(broker.service_url) as client:
        consumer = client.subscribe(
            topic,
            "sub",
            "Shared",
            initial_position="Earliest",
            negative_ack_redelivery_backoff=MultiplierRedeliveryBackoff(
                min_delay_ms=300, max_delay_ms=10_000, multiplier=2
            ),
        )
        client.create_producer(topic).send(b"poison")
        msg = consumer.receive(RECEIVE_MS)
        for count, at_least in ((1, 0.3), (2, 0.6)):
            nacked = time.monotonic()
            consumer.negative_acknowledge(msg)
            msg = consumer.receive(RECEIVE_MS)
            assert time.monotonic() - nacked >= at_least
            assert msg.redelivery_count() == count
        consumer.acknowledge(msg)


def test_the_sdk_refuses_what_the_java_builder_refuses() -> None:
    with pytest.raises(ValueError, match="multiplier must be > 1"):
        MultiplierRedeliveryBackoff(multiplier=1)
    with pytest.raises(ValueError, match="maxDelayMs must be >= minDelayMs"):
        MultiplierRedeliveryBackoff(min_delay_ms=2, max_delay_ms=1)
