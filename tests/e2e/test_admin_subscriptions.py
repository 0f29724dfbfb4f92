"""A topic's subscriptions at Pulsar's admin paths: created at a position, listed, deleted
(412 while consumers are connected unless forced), skipped, cleared, reset to a time or a
message id (a live consumer gets the messages again), peeked and examined with Pulsar's
X-Pulsar-* headers; the last message id, internal stats, unload and the broker's health."""

from __future__ import annotations

import aiohttp

from pulsar_grpc.client import Client, MessageId
from tests.e2e.admin_support import call, shared_broker, unique
from tests.support import BrokerThread

__all__ = ["shared_broker"]  # a fixture

BASE = "/admin/v2/persistent/public/default"
EARLIEST = {"ledgerId": -1, "entryId": -1}
RECEIVE_MS = 10_000


async def produce(broker: BrokerThread, name: str, n: int) -> list[MessageId]:
    """``n`` messages m0.. to the topic, one entry each, with a property."""
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            f"persistent://public/default/{name}", batching_enabled=False
        )
        return [await producer.send(f"m{i}".encode(), {"i": str(i)}) for i in range(n)]


def at(message_id: MessageId) -> dict[str, int]:
    return {"ledgerId": message_id.ledger_id(), "entryId": message_id.entry_id()}


async def backlog(broker: BrokerThread, name: str, sub: str) -> int:
    status, stats = await call(broker, "GET", f"{BASE}/{name}/stats")
    assert status == 200, stats
    return int(stats["subscriptions"][sub]["msgBacklog"])


async def test_subscriptions_are_created_at_a_position_listed_and_deleted(
    shared_broker: BrokerThread,
) -> None:
    b = shared_broker
    name = unique("subs")
    ids = await produce(b, name, 3)
    subs = f"{BASE}/{name}/subscription"
    assert await call(b, "PUT", f"{subs}/latest") == (204, None)
    assert await call(b, "PUT", f"{subs}/earliest", EARLIEST) == (204, None)
    assert await call(b, "PUT", f"{subs}/second", at(ids[1])) == (204, None)
    assert [await backlog(b, name, s) for s in ("latest", "earliest", "second")] == [0, 3, 2]
    assert await call(b, "GET", f"{BASE}/{name}/subscriptions") == (
        200,
        ["earliest", "latest", "second"],
    )
    status, answer = await call(b, "PUT", f"{subs}/latest")
    assert status == 409 and "already exists" in answer["reason"]
    assert (await call(b, "PUT", f"{BASE}/{unique('absent')}/subscription/s"))[0] == 404

    async with Client(b.service_url) as client:
        consumer = await client.subscribe(f"persistent://public/default/{name}", "second")
        assert await call(b, "DELETE", f"{subs}/second") == (
            412,
            {"reason": "Subscription has active connected consumers"},
        )
        assert await call(b, "DELETE", f"{subs}/second?force=true") == (204, None)
        await consumer.close()
    assert await call(b, "DELETE", f"{subs}/latest") == (204, None)
    assert await call(b, "GET", f"{BASE}/{name}/subscriptions") == (200, ["earliest"])
    assert (await call(b, "DELETE", f"{subs}/latest"))[0] == 404


async def test_skip_clear_peek_examine_and_internal_stats(shared_broker: BrokerThread) -> None:
    b = shared_broker
    name = unique("peek")
    ids = await produce(b, name, 5)
    sub = f"{BASE}/{name}/subscription/s"
    assert await call(b, "PUT", sub, EARLIEST) == (204, None)

    async with aiohttp_session() as http:
        async with http.get(f"{b.http_url}{sub}/position/1") as response:
            assert response.status == 200
            assert await response.read() == b"m0"
            assert response.headers["X-Pulsar-Message-ID"] == f"{ids[0].ledger_id()}:0"
            assert response.headers["X-Pulsar-PROPERTY-i"] == "0"
            assert "X-Pulsar-publish-time" in response.headers
        assert await call(b, "POST", f"{sub}/skip/2") == (204, None)
        assert await backlog(b, name, "s") == 3
        async with http.get(f"{b.http_url}{sub}/position/1") as response:
            assert await response.read() == b"m2"
        async with http.get(f"{b.http_url}{sub}/position/3") as response:
            assert await response.read() == b"m4"
        examine = f"{b.http_url}{BASE}/{name}/examinemessage"
        async with http.get(f"{examine}?initialPosition=earliest&messagePosition=2") as response:
            assert await response.read() == b"m1"
        async with http.get(f"{examine}?initialPosition=latest&messagePosition=1") as response:
            assert await response.read() == b"m4"
    assert (await call(b, "GET", f"{sub}/position/4"))[0] == 404
    await check_odd_properties(b)
    assert (await call(b, "GET", f"{sub}/position/0"))[0] == 400
    assert (await call(b, "POST", f"{sub}/skip/x"))[0] == 400

    status, last = await call(b, "GET", f"{BASE}/{name}/lastMessageId")
    assert status == 200
    assert last == {**at(ids[4]), "partitionIndex": -1}
    status, internal = await call(b, "GET", f"{BASE}/{name}/internalStats")
    assert status == 200
    assert internal["numberOfEntries"] == 5
    assert sum(ledger["entries"] for ledger in internal["ledgers"]) == 5
    cursor = internal["cursors"]["s"]
    assert cursor["markDeletePosition"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert cursor["individuallyDeletedMessages"] == "[]"

    assert await call(b, "POST", f"{sub}/skip_all") == (204, None)
    assert await backlog(b, name, "s") == 0
    assert (await call(b, "GET", f"{sub}/position/1"))[0] == 404
    _, internal = await call(b, "GET", f"{BASE}/{name}/internalStats")
    assert internal["cursors"]["s"]["markDeletePosition"] == f"{ids[4].ledger_id()}:4"
    assert (await call(b, "POST", f"{BASE}/{name}/subscription/absent/skip_all"))[0] == 404


async def test_peek_and_skip_count_past_individual_acks(shared_broker: BrokerThread) -> None:
    """Peek and skip count only unacknowledged messages, also past individually acknowledged
    ones; a number beyond the backlog answers at once (peek 404, skip clears the backlog)."""
    b = shared_broker
    name = unique("gaps")
    sub = f"{BASE}/{name}/subscription/s"
    async with Client(b.service_url) as client:
        consumer = await client.subscribe(f"persistent://public/default/{name}", "s")
        await produce(b, name, 6)
        received = [await consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(6)]
        for i in (1, 3):
            await consumer.acknowledge(received[i], wait=True)
        await consumer.close()

    async def peeked(n: int) -> bytes | int:
        async with aiohttp_session() as http, http.get(f"{b.http_url}{sub}/position/{n}") as r:
            return await r.read() if r.status == 200 else r.status

    assert [await peeked(n) for n in range(1, 6)] == [b"m0", b"m2", b"m4", b"m5", 404]
    assert await peeked(99_999_999_999) == 404
    assert await call(b, "POST", f"{sub}/skip/2") == (204, None)
    assert await backlog(b, name, "s") == 2
    assert [await peeked(n) for n in (1, 2, 3)] == [b"m4", b"m5", 404]
    assert await call(b, "POST", f"{sub}/skip/99999999999") == (204, None)
    assert await backlog(b, name, "s") == 0
    assert await peeked(1) == 404


async def test_a_reset_cursor_redelivers_to_a_live_consumer(shared_broker: BrokerThread) -> None:
    b = shared_broker
    name = unique("reset")
    topic = f"persistent://public/default/{name}"
    sub = f"{BASE}/{name}/subscription/s"
    async with Client(b.service_url) as client:
        consumer = await client.subscribe(topic, "s")
        ids = await produce(b, name, 4)
        for i in range(4):
            message = await consumer.receive(timeout_millis=RECEIVE_MS)
            assert message.data() == f"m{i}".encode()
            await consumer.acknowledge(message, wait=True)

        assert await call(b, "POST", f"{sub}/resetcursor/0") == (204, None)
        again = [(await consumer.receive(timeout_millis=RECEIVE_MS)) for _ in range(4)]
        assert [m.data() for m in again] == [b"m0", b"m1", b"m2", b"m3"]
        for message in again:
            await consumer.acknowledge(message, wait=True)

        assert await call(b, "POST", f"{sub}/resetcursor", at(ids[2])) == (204, None)
        assert (await consumer.receive(timeout_millis=RECEIVE_MS)).data() == b"m2"
        assert (await consumer.receive(timeout_millis=RECEIVE_MS)).data() == b"m3"
        excluded = {**at(ids[2]), "isExcluded": True}
        assert await call(b, "POST", f"{sub}/resetcursor", excluded) == (204, None)
        assert (await consumer.receive(timeout_millis=RECEIVE_MS)).data() == b"m3"
        await consumer.close()
    assert (await call(b, "POST", f"{sub}/resetcursor", raw="[1]"))[0] == 400


async def test_partitioned_subscriptions_unload_and_health(shared_broker: BrokerThread) -> None:
    b = shared_broker
    name = unique("parted")
    assert await call(b, "PUT", f"{BASE}/{name}/partitions", 2) == (204, None)
    assert await call(b, "PUT", f"{BASE}/{name}/subscription/s", EARLIEST) == (204, None)
    assert await call(b, "GET", f"{BASE}/{name}/subscriptions") == (200, ["s"])
    assert await call(b, "GET", f"{BASE}/{name}-partition-1/subscriptions") == (200, ["s"])
    status, answer = await call(b, "GET", f"{BASE}/{name}/subscription/s/position/1")
    assert status == 405 and "partitioned" in answer["reason"]
    assert await call(b, "POST", f"{BASE}/{name}/subscription/s/skip_all") == (204, None)
    assert await call(b, "DELETE", f"{BASE}/{name}/subscription/s") == (204, None)
    assert await call(b, "GET", f"{BASE}/{name}/subscriptions") == (200, [])

    plain = unique("plain")
    await produce(b, plain, 1)
    assert b.service is not None
    [before] = [t for t in b.service.topics.loaded_topics() if t.name.endswith(plain)]
    assert await call(b, "PUT", f"{BASE}/{plain}/unload") == (204, None)
    assert before not in b.service.topics.loaded_topics()
    assert (await call(b, "GET", f"{BASE}/{plain}/stats"))[1]["storageSize"] > 0
    assert (await call(b, "PUT", f"{BASE}/{unique('absent')}/unload"))[0] == 404
    assert await call(b, "GET", "/admin/v2/brokers/health") == (200, "ok")


async def test_a_refused_partitioned_delete_deletes_no_partition(
    shared_broker: BrokerThread,
) -> None:
    """A consumer on partition 1 only: the unforced delete is refused before partition 0's
    subscription goes, so nothing is half deleted."""
    b = shared_broker
    name = unique("halfdel")
    assert await call(b, "PUT", f"{BASE}/{name}/partitions", 2) == (204, None)
    assert await call(b, "PUT", f"{BASE}/{name}/subscription/s", EARLIEST) == (204, None)
    async with Client(b.service_url) as client:
        consumer = await client.subscribe(f"persistent://public/default/{name}-partition-1", "s")
        assert await call(b, "DELETE", f"{BASE}/{name}/subscription/s") == (
            412,
            {"reason": "Subscription has active connected consumers"},
        )
        for partition in (0, 1):
            path = f"{BASE}/{name}-partition-{partition}/subscriptions"
            assert await call(b, "GET", path) == (200, ["s"])
        assert await call(b, "DELETE", f"{BASE}/{name}/subscription/s?force=true") == (204, None)
        await consumer.close()
    assert await call(b, "GET", f"{BASE}/{name}/subscriptions") == (200, [])


def aiohttp_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))


async def check_odd_properties(broker: BrokerThread) -> None:
    """A property whose key or value cannot stand in an HTTP header as is (a client chose it)
    is percent-encoded in the peek's headers, not a failed answer."""
    name = unique("odd")
    sub = f"{BASE}/{name}/subscription/s"
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(f"persistent://public/default/{name}")
        assert await call(broker, "PUT", sub, EARLIEST) == (204, None)
        await producer.send(b"x", {"sp ace": "naïve\r\nX-Injected: 1", "k": "50%"})
    async with aiohttp_session() as http, http.get(f"{broker.http_url}{sub}/position/1") as r:
        assert r.status == 200
        assert r.headers["X-Pulsar-PROPERTY-sp%20ace"] == "na%C3%AFve%0D%0AX-Injected: 1"
        assert r.headers["X-Pulsar-PROPERTY-k"] == "50%25"
        assert "X-Injected" not in r.headers
