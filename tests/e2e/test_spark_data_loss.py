"""``failOnDataLoss`` of the pulsar-grpc Spark source against a broker that really trims.

The broker rolls a ledger over every 5 entries and keeps nothing that every durable cursor has
passed (retention 0; a topic without durable cursors counts as fully consumed), so after the
trim the first ledgers are gone and an offset pointing into them is older than the first
available message. Like Spark's Kafka source: ``failOnDataLoss=true`` fails the read with
``DataLossError``, ``false`` reads what is left, from the first available message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import MessageId, SyncClient, Timeout
from tests.e2e.sparkcheck import fresh_topic, oid
from tests.support import BrokerThread
from tests.waiting import eventually_sync

FMT = pulsar_grpc_spark.FORMAT
ENTRIES_PER_LEDGER = 5
LOSS = r"DataLossError: .* is older than the first available message .* trimmed"

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def trimming_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(managedLedgerMaxEntriesPerLedger=ENTRIES_PER_LEDGER)


def produce(broker: BrokerThread, topic: str, start: int, count: int) -> list[MessageId]:
    """Messages m<start>.. one per entry, so every 5 of them fill a ledger."""
    with SyncClient(broker.service_url) as client:
        producer = client.create_producer(topic, batching_max_messages=1)
        ids = [producer.send(f"m{i}".encode()) for i in range(start, start + count)]
        producer.close()
    return ids


def first_available(broker: BrokerThread, topic: str) -> MessageId | None:
    with SyncClient(broker.service_url) as client:
        reader = client.create_reader(topic, "earliest", receiver_queue_size=1)
        try:
            return reader.read_next(1000).message_id()
        except Timeout:
            return None


def wait_trimmed_to(broker: BrokerThread, topic: str, ledger_id: int) -> None:
    """Until the oldest message left is in ``ledger_id`` (trimming runs in the background)."""

    def trimmed() -> None:
        first = first_available(broker, topic)
        assert first is not None and first.ledger_id() == ledger_id, f"first={first}"

    eventually_sync(trimmed, timeout=15, interval=0.05)


def values(rows) -> list[bytes]:  # type: ignore[no-untyped-def]
    return sorted(r.value for r in rows)


def m(*indexes: int) -> list[bytes]:
    return sorted(f"m{i}".encode() for i in indexes)


def batch(session: SparkSession, broker: BrokerThread, topic: str, start: str, fail: str):  # type: ignore[no-untyped-def]
    return (
        session.read.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", json.dumps({topic: start}))
        .option("failOnDataLoss", fail)
        .option("pollTimeoutMs", "5000")
        .load()
    )


def test_batch_read_from_trimmed_offset(
    session: SparkSession, trimming_broker: BrokerThread
) -> None:
    broker, topic = trimming_broker, fresh_topic("loss-batch")
    # No durable cursor at all: every ledger the producer closes is consumed and trimmed.
    ids = produce(broker, topic, 0, 42)
    assert [i.ledger_id() for i in ids[:6]] == [ids[0].ledger_id()] * 5 + [ids[5].ledger_id()]
    last_ledger = ids[-1].ledger_id()
    assert ids[-2].ledger_id() == last_ledger != ids[-3].ledger_id()  # m40, m41 in the last one
    wait_trimmed_to(broker, topic, last_ledger)
    start = oid(ids[3])  # inside the first ledger, long gone

    with pytest.raises(Exception, match=LOSS):
        batch(session, broker, topic, start, "true").collect()

    rows = batch(session, broker, topic, start, "false").collect()
    assert values(rows) == m(40, 41)  # what still exists, nothing from before
    assert sorted(r.messageId for r in rows) == [oid(ids[40]), oid(ids[41])]

    # An offset in a ledger that still exists is no loss.
    assert values(batch(session, broker, topic, oid(ids[40]), "true").collect()) == m(41)

    # Documented caveat (docs/spark.md): m39 ended a trimmed ledger and m40 is available, so
    # nothing unread is gone, but the client cannot tell: a trimmed ledger's length is known
    # nowhere any more. Reported as loss (fail closed).
    with pytest.raises(Exception, match=LOSS):
        batch(session, broker, topic, oid(ids[39]), "true").collect()


def test_streaming_restart_from_trimmed_checkpoint(
    session: SparkSession, trimming_broker: BrokerThread, tmp_path: Path
) -> None:
    broker, topic = trimming_broker, fresh_topic("loss-stream")
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    with SyncClient(broker.service_url) as client:
        # A durable subscription holds every ledger until it acknowledges.
        hold = client.subscribe(topic, "hold")
        first = produce(broker, topic, 0, 12)  # ledgers 5 + 5 + 2

        def run(fail: str) -> BaseException | None:
            query = (
                session.readStream.format(FMT)
                .option("service.url", broker.service_url)
                .option("topic", topic)
                .option("startingOffsets", "earliest")
                .option("failOnDataLoss", fail)
                .option("pollTimeoutMs", "5000")
                .load()
                .select("value", "messageId")
                .writeStream.format("parquet")
                .option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
            try:
                query.awaitTermination(60)
            except Exception:  # the query's failure; exception() has it too
                pass
            assert not query.isActive
            return query.exception()

        assert run("true") is None
        assert values(session.read.parquet(str(out)).collect()) == m(*range(12))

        # The checkpoint now ends at m11 (third ledger). Trim past it: 30 more messages, then
        # the subscription acknowledges everything; only the last ledger (m40, m41) is left.
        rest = produce(broker, topic, 12, 30)
        assert rest[-1].ledger_id() > first[-1].ledger_id()
        for _ in range(42):
            message = hold.receive(5000)
        hold.acknowledge_cumulative(message, wait=True)
        wait_trimmed_to(broker, topic, rest[-1].ledger_id())
        assert first_available(broker, topic) == rest[-2]  # m40

    error = run("true")
    assert error is not None and re.search(LOSS, str(error)), error
    assert values(session.read.parquet(str(out)).collect()) == m(*range(12))  # nothing written

    assert run("false") is None  # same checkpoint: continues with what is left
    rows = session.read.parquet(str(out)).collect()
    assert values(rows) == m(*range(12), 40, 41)
    assert len({r.messageId for r in rows}) == 14
