"""Key_Shared policies end to end: ``subscribe(key_shared_policy=ConsumerKeySharedPolicy(...))``.

A real broker on loopback, real gRPC, the Python SDK. Apache Pulsar is the reference: Sticky
mode is its HashRangeExclusiveStickyKeyConsumerSelector (declared ranges, conflicts refused
with ConsumerAssignError, keys outside every range wait), a subscription's mode and
out-of-order setting are fixed by its connected consumers (ConsumerBusy otherwise, with its
messages), and allow_out_of_order_delivery skips the recently-joined-consumer rule.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import grpc
import pytest

from pulsar_grpc.broker.topics.key_shared import sticky_key_hash
from pulsar_grpc.client import (
    Client,
    Consumer,
    ConsumerAssignError,
    ConsumerBusy,
    ConsumerKeySharedPolicy,
    ConsumerType,
    KeySharedMode,
    Producer,
    SyncClient,
)
from tests.e2e.messaging import assert_nothing_more, receive_n
from tests.e2e.wire import stub
from tests.support import BrokerThread

LOWER = [(0, 32767)]
UPPER = [(32768, 65535)]


@pytest.fixture
async def client(broker: BrokerThread) -> AsyncIterator[Client]:
    async with Client(broker.service_url) as c:
        yield c


def sticky(ranges: list[tuple[int, int]]) -> ConsumerKeySharedPolicy:
    return ConsumerKeySharedPolicy(KeySharedMode.Sticky, sticky_ranges=ranges)


def keys_in(ranges: list[tuple[int, int]], n: int) -> list[str]:
    """``n`` keys whose hash (Pulsar's) lies in ``ranges``."""
    found = (f"key-{i}" for i in range(10**6))
    inside = (k for k in found if any(s <= sticky_key_hash(k.encode()) <= e for s, e in ranges))
    return [next(inside) for _ in range(n)]


async def send_keyed(producer: Producer, keys: Iterable[str], tag: str = "") -> None:
    for key in keys:
        await producer.send(f"{key}|{tag}".encode(), partition_key=key)


async def expect_keys(consumer: Consumer, keys: list[str]) -> None:
    """``consumer`` gets one message of each of ``keys``, and only those."""
    got = await receive_n(consumer, len(keys))
    assert {m.partition_key() for m in got} == set(keys)


async def test_sticky_consumers_get_only_the_keys_hashing_into_their_ranges(
    client: Client, broker: BrokerThread
) -> None:
    topic = "ks-sticky"
    low = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky(LOWER))
    high = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky(UPPER))
    producer = await client.create_producer(topic, batching_enabled=False)
    low_keys, high_keys = keys_in(LOWER, 10), keys_in(UPPER, 10)
    await send_keyed(producer, low_keys + high_keys)
    await expect_keys(low, low_keys)
    await expect_keys(high, high_keys)
    await assert_nothing_more(low)
    await assert_nothing_more(high)
    assert broker.service is not None
    stats = (await broker.call(broker.service.get_topic(topic))).stats()["subscriptions"]["s"]
    assert (stats["keySharedMode"], stats["allowOutOfOrderDelivery"]) == ("STICKY", False)


async def test_a_key_in_no_declared_range_waits_for_a_consumer_that_declares_it(
    client: Client,
) -> None:
    topic = "ks-sticky-gap"
    low = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky(LOWER))
    producer = await client.create_producer(topic, batching_enabled=False)
    low_keys, high_keys = keys_in(LOWER, 5), keys_in(UPPER, 5)
    await send_keyed(producer, high_keys + low_keys)
    await expect_keys(low, low_keys)
    await assert_nothing_more(low)
    high = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky(UPPER))
    await expect_keys(high, high_keys)


async def test_overlapping_sticky_ranges_are_refused_with_consumer_assign_error(
    client: Client,
) -> None:
    topic = "ks-sticky-conflict"
    first = await client.subscribe(
        topic, "s", "Key_Shared", consumer_name="first", key_shared_policy=sticky([(0, 100)])
    )
    with pytest.raises(ConsumerAssignError, match=r"Range conflict with consumer .*first"):
        await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky([(100, 200)]))
    # pulsar-client lets a range whose start exceeds its end through; the broker refuses it.
    with pytest.raises(ConsumerAssignError, match=r"Fixed hash range start > end"):
        await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky([(300, 200)]))
    # The ranges nobody holds are still free.
    second = await client.subscribe(
        topic, "s", "Key_Shared", key_shared_policy=sticky([(101, 200)])
    )
    assert first.consumer_name() != second.consumer_name()


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (None, sticky(LOWER), "key_shared mode of 'AUTO_SPLIT' is different than the "),
        (sticky(LOWER), None, "key_shared mode of 'STICKY' is different than the "),
        (
            None,
            ConsumerKeySharedPolicy(allow_out_of_order_delivery=True),
            "Active subscription does not allow out of order delivery",
        ),
    ],
)
async def test_a_consumer_of_another_key_shared_policy_is_consumer_busy(
    client: Client,
    first: ConsumerKeySharedPolicy | None,
    second: ConsumerKeySharedPolicy | None,
    message: str,
) -> None:
    topic = "ks-mode-mismatch"
    connected = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=first)
    with pytest.raises(ConsumerBusy, match=message):
        await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=second)
    assert connected.is_connected()


async def test_the_mode_is_chosen_again_once_every_consumer_left(client: Client) -> None:
    topic = "ks-mode-again"
    auto = await client.subscribe(topic, "s", "Key_Shared")
    await auto.close()
    pinned = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=sticky(LOWER))
    producer = await client.create_producer(topic, batching_enabled=False)
    await send_keyed(producer, keys_in(UPPER, 3))
    await assert_nothing_more(pinned)  # Sticky: it declared the lower half only


async def test_auto_split_policy_is_the_default_key_shared(client: Client) -> None:
    """An explicit AutoSplit policy joins consumers that gave none, and the two split the
    keys between them as before."""
    topic = "ks-auto"
    plain = await client.subscribe(topic, "s", "Key_Shared", consumer_name="plain")
    explicit = await client.subscribe(
        topic,
        "s",
        "Key_Shared",
        consumer_name="explicit",
        key_shared_policy=ConsumerKeySharedPolicy(KeySharedMode.AutoSplit),
    )
    producer = await client.create_producer(topic, batching_enabled=False)
    # AutoSplit: the second consumer took the upper half of the hashes.
    await send_keyed(producer, keys_in(LOWER, 4) + keys_in(UPPER, 4))
    await expect_keys(plain, keys_in(LOWER, 4))
    await expect_keys(explicit, keys_in(UPPER, 4))


async def test_a_key_shared_policy_on_another_subscription_type_is_ignored(
    client: Client,
) -> None:
    """As in pulsar-client, which sends the policy for Key_Shared subscriptions only."""
    topic = "ks-ignored"
    consumer = await client.subscribe(topic, "s", "Shared", key_shared_policy=sticky(LOWER))
    producer = await client.create_producer(topic, batching_enabled=False)
    await send_keyed(producer, keys_in(UPPER, 2))
    assert len(await receive_n(consumer, 2)) == 2


async def test_out_of_order_delivery_lets_a_newcomer_take_its_keys_at_once(
    client: Client,
) -> None:
    """The counterpart of test_key_shared_newcomer_never_overtakes_unacked_messages_of_its_keys:
    with allow_out_of_order_delivery the new consumer gets later messages of the keys it
    took while the first still holds earlier ones unacked (Pulsar skips recentlyJoinedConsumers)."""
    topic = "ks-out-of-order"
    policy = ConsumerKeySharedPolicy(allow_out_of_order_delivery=True)
    c1 = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=policy)
    producer = await client.create_producer(topic, batching_enabled=False)
    moved = keys_in(UPPER, 5)
    await send_keyed(producer, moved, "0")
    await receive_n(c1, 5)  # held, not acked
    c2 = await client.subscribe(topic, "s", "Key_Shared", key_shared_policy=policy)
    await send_keyed(producer, moved, "1")
    later = await receive_n(c2, 5)
    assert {m.data().decode() for m in later} == {f"{k}|1" for k in moved}


def test_the_blocking_client_takes_a_key_shared_policy(broker: BrokerThread) -> None:
    client = SyncClient(broker.service_url)
    try:
        consumer = client.subscribe(
            "ks-sync", "s", ConsumerType.KeyShared, key_shared_policy=sticky(UPPER)
        )
        with pytest.raises(ConsumerAssignError):
            client.subscribe(
                "ks-sync", "s", ConsumerType.KeyShared, key_shared_policy=sticky(UPPER)
            )
        producer = client.create_producer("ks-sync", batching_enabled=False)
        keys = keys_in(LOWER, 2) + keys_in(UPPER, 2)
        for key in keys:
            producer.send(key.encode(), partition_key=key)
        got = {consumer.receive(timeout_millis=5000).partition_key() for _ in range(2)}
        assert got == set(keys_in(UPPER, 2))
    finally:
        client.close()


KEY_SHARED = ("x-pulsar-subscription-type", "Key_Shared")


@pytest.mark.parametrize(
    ("headers", "needle"),
    [
        ((KEY_SHARED, ("x-pulsar-key-shared-mode", "Exclusive")), "x-pulsar-key-shared-mode"),
        (
            (
                KEY_SHARED,
                ("x-pulsar-key-shared-mode", "Sticky"),
                ("x-pulsar-key-shared-ranges", "0-65536"),
            ),
            "x-pulsar-key-shared-ranges",
        ),
        (
            (
                KEY_SHARED,
                ("x-pulsar-key-shared-mode", "Sticky"),
                ("x-pulsar-key-shared-ranges", "5"),
            ),
            "x-pulsar-key-shared-ranges",
        ),
        (
            (KEY_SHARED, ("x-pulsar-key-shared-ranges", "0-5")),
            "only with x-pulsar-key-shared-mode=Sticky",
        ),
        ((KEY_SHARED, ("x-pulsar-key-shared-allow-out-of-order", "yes")), "allow-out-of-order"),
        # On another subscription type the policy would mean nothing: refused, not ignored.
        ((("x-pulsar-key-shared-mode", "Sticky"),), "only for Key_Shared"),
    ],
)
async def test_malformed_key_shared_parameters_are_invalid_argument(
    channel: grpc.aio.Channel, headers: tuple[tuple[str, str], ...], needle: str
) -> None:
    metadata = (("x-pulsar-topic", "ks-wire"), ("x-pulsar-subscription", "s"), *headers)
    call = stub(channel).Consume(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call.read()
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert needle in (err.value.details() or "")
