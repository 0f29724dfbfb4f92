"""Orders: a small shop back end written for pulsar-client 3.x, blocking and asyncio.

Run it against a Pulsar cluster where ``<base>-orders`` is a partitioned topic:

    python orders_app.py pulsar://localhost:6650 persistent://public/default/shop \
        rsa_public.pem rsa_private.pem

It prints a JSON report of what it saw. Orders go out Avro-encoded, encrypted and batched,
keyed by customer, to a Key_Shared subscription; payments go out as JSON to a Shared
subscription that dead-letters the ones it cannot settle; an audit trail is read back with a
reader and seeks; notifications go through ``pulsar.asyncio``.
"""

import asyncio
import json
import sys
import time

import pulsar.asyncio  # binds pulsar (with pulsar.schema) and pulsar.asyncio

CUSTOMERS = ["ada", "bob", "cyd", "dee", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lea"]
EVENT_EPOCH_MS = 1_700_000_000_000
RECEIVE_MS = 200
PATIENCE_S = 60


class Order(pulsar.schema.Record):
    order_id = pulsar.schema.Integer()
    customer = pulsar.schema.String()
    amount = pulsar.schema.Double()


class Payment(pulsar.schema.Record):
    order_id = pulsar.schema.Integer()
    amount = pulsar.schema.Double()


def publish_orders(client, topic, keys, count):
    """Batched, encrypted, Avro orders keyed by customer; returns (acked sends, partitions)."""
    producer = client.create_producer(
        topic,
        schema=pulsar.schema.AvroSchema(Order),
        batching_enabled=True,
        batching_max_messages=10,
        batching_max_publish_delay_ms=50,
        batching_type=pulsar.BatchingType.KeyBased,  # a batch per key, as Key_Shared needs
        encryption_key="orders-key",
        crypto_key_reader=keys,
    )
    receipts = []
    for i in range(count):
        customer = CUSTOMERS[i % len(CUSTOMERS)]
        producer.send_async(
            Order(order_id=i, customer=customer, amount=10.0 + i),
            lambda result, msg_id: receipts.append((result, msg_id)),
            properties={"origin": "web", "seq": str(i)},
            partition_key=customer,
            event_timestamp=EVENT_EPOCH_MS + i,
        )
    producer.flush()
    producer.close()
    ok = [msg_id for result, msg_id in receipts if result == pulsar.Result.Ok]
    return len(ok), len({msg_id.partition() for msg_id in ok})


def bill_orders(consumers, count):
    """Key_Shared billing: which consumer saw each customer, and in what order."""
    seen = {}
    deadline = time.monotonic() + PATIENCE_S
    received = 0
    while received < count and time.monotonic() < deadline:
        for n, consumer in enumerate(consumers):
            try:
                msg = consumer.receive(timeout_millis=RECEIVE_MS)
            except pulsar.Timeout:
                continue
            order = msg.value()
            assert msg.partition_key() == order.customer
            assert msg.properties()["seq"] == str(order.order_id)
            assert msg.event_timestamp() == EVENT_EPOCH_MS + order.order_id
            seen.setdefault(order.customer, []).append((n, order.order_id))
            consumer.acknowledge(msg)
            received += 1
    return {
        "orders_billed": received,
        "customers_on_one_consumer": sorted(
            c for c, s in seen.items() if len({n for n, _ in s}) == 1
        ),
        "customers_in_order": sorted(
            c for c, s in seen.items() if [i for _, i in s] == sorted(i for _, i in s)
        ),
        "consumers_used": len({n for s in seen.values() for n, _ in s}),
    }


def settle_payments(client, topic, bad):
    """Shared settlement that nacks payments it cannot settle until they are dead-lettered."""
    dlq = topic + "-DLQ"
    consumer = client.subscribe(
        topic,
        "settlement",
        consumer_type=pulsar.ConsumerType.Shared,
        schema=pulsar.schema.JsonSchema(Payment),
        initial_position=pulsar.InitialPosition.Earliest,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
            max_redeliver_count=2, dead_letter_topic=dlq, initial_subscription_name="audit"
        ),
    )
    producer = client.create_producer(
        topic, schema=pulsar.schema.JsonSchema(Payment), batching_enabled=False
    )
    for i in range(6):
        producer.send(Payment(order_id=i, amount=-5.0 if i in bad else 20.0))
    settled, attempts = [], {}
    deadline = time.monotonic() + PATIENCE_S
    while time.monotonic() < deadline and (
        len(settled) < 6 - len(bad) or any(attempts.get(i, 0) < 3 for i in bad)
    ):
        try:
            msg = consumer.receive(timeout_millis=RECEIVE_MS)
        except pulsar.Timeout:
            continue
        payment = msg.value()
        if payment.amount < 0:
            attempts[payment.order_id] = msg.redelivery_count() + 1
            consumer.negative_acknowledge(msg)
        else:
            settled.append(payment.order_id)
            consumer.acknowledge(msg)
    # "audit" was made on the dead letter topic with its producer, so nothing is missed
    # although it is subscribed to only now, from the latest position.
    audit = client.subscribe(dlq, "audit", schema=pulsar.schema.JsonSchema(Payment))
    dead = []
    for _ in bad:
        msg = audit.receive(timeout_millis=PATIENCE_S * 1000)
        dead.append(
            {"order_id": msg.value().order_id, "real_topic": msg.properties().get("REAL_TOPIC")}
        )
        audit.acknowledge(msg)
    for closable in (audit, producer, consumer):
        closable.close()
    return {"settled": sorted(settled), "attempts": attempts, "dead_lettered": dead}


def read_audit_trail(client, topic):
    """Readers and seeks over the audit trail: by message id, then by publish time."""
    producer = client.create_producer(topic, schema=pulsar.schema.StringSchema())
    ids = [producer.send(f"audit-{i}", properties={"n": str(i)}) for i in range(8)]
    reader = client.create_reader(
        topic, pulsar.MessageId.earliest, schema=pulsar.schema.StringSchema()
    )

    def drain():
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(timeout_millis=PATIENCE_S * 1000))
        return out

    trail = drain()
    reader.seek(ids[4])
    after_id = [m.value() for m in drain()]
    stamp = trail[2].publish_timestamp()
    reader.seek(stamp)
    after_time = [m.value() for m in drain()]
    reader.close()
    producer.close()
    return {
        "trail": [m.value() for m in trail],
        "after_id_seek": after_id,
        "after_time_seek": after_time,
        "expected_after_time_seek": [m.value() for m in trail if m.publish_timestamp() >= stamp],
    }


async def notify(service_url, topic):
    """The asyncio client: notifications sent concurrently, received, acked and replayed."""
    client = pulsar.asyncio.Client(service_url)
    consumer = await client.subscribe(
        topic,
        "mailer",
        schema=pulsar.schema.StringSchema(),
        initial_position=pulsar.InitialPosition.Earliest,
    )
    producer = await client.create_producer(
        topic, schema=pulsar.schema.StringSchema(), batching_max_publish_delay_ms=5
    )
    ids = await asyncio.gather(
        *(
            producer.send(
                f"note-{i}",
                properties={"order": str(i)},
                partition_key=CUSTOMERS[i % len(CUSTOMERS)],
                event_timestamp=EVENT_EPOCH_MS + i,
            )
            for i in range(10)
        )
    )
    received = []
    for _ in ids:
        msg = await consumer.receive()
        received.append(msg)
        await consumer.acknowledge(msg)
    await consumer.seek(ids[6])
    after_id = (await consumer.receive()).value()
    await consumer.seek(received[0].publish_timestamp())
    after_time = (await consumer.receive()).value()
    reader = await client.create_reader(
        topic, pulsar.MessageId.earliest, schema=pulsar.schema.StringSchema()
    )
    first = await reader.read_next()
    await reader.close()
    await producer.close()
    await consumer.close()
    await client.close()
    return {
        "notes": [m.value() for m in received],
        "event_times_kept": all(
            m.event_timestamp() == EVENT_EPOCH_MS + int(m.properties()["order"]) for m in received
        ),
        "after_id_seek": after_id,
        "after_time_seek": after_time,
        "reader_first": first.value(),
    }


def main(service_url, base, public_key, private_key, orders=60):
    keys = pulsar.CryptoKeyReader(public_key, private_key)
    client = pulsar.Client(service_url, operation_timeout_seconds=30)
    billing = [
        client.subscribe(
            base + "-orders",
            "billing",
            consumer_type=pulsar.ConsumerType.KeyShared,
            schema=pulsar.schema.AvroSchema(Order),
            initial_position=pulsar.InitialPosition.Earliest,
            crypto_key_reader=keys,
            consumer_name=f"billing-{n}",
        )
        for n in range(2)
    ]
    report = {"partitions": len(client.get_topic_partitions(base + "-orders"))}
    report["orders_sent"], report["partitions_written"] = publish_orders(
        client, base + "-orders", keys, orders
    )
    report.update(bill_orders(billing, orders))
    for consumer in billing:
        consumer.close()
    report["payments"] = settle_payments(client, base + "-payments", bad={1, 4})
    report["audit"] = read_audit_trail(client, base + "-audit")
    client.close()
    report["notifications"] = asyncio.run(notify(service_url, base + "-notes"))
    return report


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:5]), indent=2))
