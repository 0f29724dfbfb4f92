"""Dead-letter topics keep the schema: the broker registers the schema a dead-lettered message
was written with on the dead-letter topic (under that topic's namespace rules, as Pulsar's
client does with AUTO_PRODUCE_BYTES of the message's writer schema) and the copy carries the
dead-letter topic's version of it; a dead-letter topic that refuses the schema sends the
message back for redelivery."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pulsar_grpc.client import Client, Consumer, DeadLetterPolicy, Producer
from pulsar_grpc.schema import AutoConsumeSchema, AvroSchema, Schema
from tests.e2e.messaging import RECEIVE_MS, assert_nothing_more
from tests.e2e.test_ack_correctness import service_stats
from tests.e2e.test_authorization import http
from tests.e2e.test_schema_sdk import IncompatibleUser, User, UserV2, a_user
from tests.support import BrokerThread
from tests.waiting import eventually

SCHEMA = "/admin/v2/schemas/public/default/{}/schema"


async def poisoned(client: Client, topic: str, schema: Schema | None) -> tuple[Consumer, Producer]:
    """A Shared consumer of subscription ``sub`` whose messages go to ``<topic>-sub-DLQ``
    after one redelivery, and a producer of ``topic`` with ``schema``."""
    consumer = await client.subscribe(
        topic,
        "sub",
        "Shared",
        schema=schema,
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=50,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    producer = await client.create_producer(topic, schema=schema, batching_max_messages=1)
    return consumer, producer


async def nack_until_dead(consumer: Consumer) -> None:
    for _ in range(2):
        await consumer.negative_acknowledge(await consumer.receive(RECEIVE_MS))


async def registered(broker: BrokerThread, path: str) -> dict[str, Any]:
    """The schema at ``path`` (admin REST); fails while there is none."""
    status, answer = await asyncio.to_thread(http, broker, "GET", path, None)
    assert status == 200, answer
    return answer  # type: ignore[no-any-return]


async def test_a_dead_lettered_record_keeps_its_schema(broker: BrokerThread) -> None:
    topic = "dlq-typed"
    dlq_topic = f"persistent://public/default/{topic}-sub-DLQ"
    async with Client(broker.service_url) as client:
        # The source topic holds two versions; the message is written with the second.
        newer = await client.create_producer(topic, schema=AvroSchema(UserV2))
        consumer, producer = await poisoned(client, topic, AvroSchema(User))
        assert producer.schema_version() == (1).to_bytes(8, "big") != newer.schema_version()
        await newer.close()
        await producer.send(a_user("poison"))
        await nack_until_dead(consumer)

        # The dead-letter topic registered the writer's schema, as its first version.
        path = SCHEMA.format(f"{topic}-sub-DLQ")
        latest = await eventually(lambda: registered(broker, path))
        assert latest["version"] == 0 and latest["type"] == "AVRO"
        assert json.loads(latest["data"]) == json.loads(AvroSchema(User).schema_info().schema)

        typed = await client.subscribe(
            dlq_topic, "typed", schema=AvroSchema(User), initial_position="Earliest"
        )
        generic = await client.subscribe(
            dlq_topic, "generic", schema=AutoConsumeSchema(), initial_position="Earliest"
        )
        dead = await typed.receive(RECEIVE_MS)
        assert dead.schema_version() == "\x00" * 8  # the DLQ's version, not 1
        assert dead.value() == a_user("poison")
        assert dead.properties()["REAL_SUBSCRIPTION"] == "sub"
        assert (await generic.receive(RECEIVE_MS)).value()["name"] == "poison"
        await assert_nothing_more(consumer)


async def test_a_dead_lettered_message_without_schema_stays_without(
    broker: BrokerThread,
) -> None:
    topic = "dlq-bytes"
    async with Client(broker.service_url) as client:
        consumer, producer = await poisoned(client, topic, None)
        await producer.send(b"raw")
        await nack_until_dead(consumer)
        dlq = await client.subscribe(f"{topic}-sub-DLQ", "r", initial_position="Earliest")
        dead = await dlq.receive(RECEIVE_MS)
        assert (dead.data(), dead.schema_version()) == (b"raw", "")
    status, _ = http(broker, "GET", SCHEMA.format(f"{topic}-sub-DLQ"), None)
    assert status == 404


async def test_a_dead_letter_topic_refusing_the_schema_redelivers(
    broker: BrokerThread,
) -> None:
    """The dead-letter topic already holds a schema the message's is incompatible with
    (under the namespace's default, FULL): the message comes back, counted, not lost."""
    topic = "dlq-refused"
    async with Client(broker.service_url) as client:
        other = await client.create_producer(
            f"{topic}-sub-DLQ", schema=AvroSchema(IncompatibleUser)
        )
        await other.close()
        consumer, producer = await poisoned(client, topic, AvroSchema(User))
        msg_id = await producer.send(a_user("kept"))
        await nack_until_dead(consumer)
        back = await consumer.receive(RECEIVE_MS)
        assert back.message_id() == msg_id and back.value() == a_user("kept")
        assert service_stats(broker, topic)["deadLetterPublishFailures"] >= 1
        dlq = await client.subscribe(f"{topic}-sub-DLQ", "r", initial_position="Earliest")
        await assert_nothing_more(dlq)
        await consumer.acknowledge(back, wait=True)
