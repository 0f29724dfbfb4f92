"""End-to-end encryption through the Spark source and sink: a write with ``encryptionKeys`` and
``publicKeyFile`` stores only ciphertext; a read with ``privateKeyFile`` gets the rows back; a
read without the key fails with the SDK's error naming the entry, or, with
``cryptoFailureAction``, skips the entries (``discard``) or yields them encrypted
(``consume``); the options' mistakes are refused when the query is planned."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.client import ConsumerCryptoFailureAction, SyncClient, Timeout
from tests.e2e.sparkcheck import fresh_topic, last_line
from tests.support import BrokerThread

FMT = pulsar_grpc_spark.FORMAT
KEYS = Path(__file__).resolve().parents[1] / "data" / "e2ee"
ROWS = 50
QUIET_MS = 2000  # after a write is acknowledged, every entry is there: a read waits this long

pytestmark = pytest.mark.timeout(300)


def load(session: SparkSession, broker: BrokerThread, topic: str, **options: str) -> Any:
    reader = session.read.format(FMT).option("service.url", broker.service_url)
    for name, value in {"topic": topic, "valueFormat": "binary", **options}.items():
        reader = reader.option(name, value)
    return reader.load()


def write_encrypted(session: SparkSession, broker: BrokerThread, topic: str, kind: str) -> None:
    df = session.range(0, ROWS).select(
        F.concat(F.lit("secret-"), F.col("id").cast("string")).alias("value")
    )
    (
        df.write.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("encryptionKeys", "spark-key")
        .option("publicKeyFile", str(KEYS / f"{kind}_public.pem"))
        .option("batchingMaxMessages", "10")
        .mode("append")
        .save()
    )


def stored_entries(broker: BrokerThread, topic: str) -> list[bytes]:
    """What the broker serves, read without a key (the SDK's CONSUME: each entry as stored)."""
    out = []
    with SyncClient(broker.service_url) as client:
        reader = client.create_reader(
            topic, "earliest", crypto_failure_action=ConsumerCryptoFailureAction.CONSUME
        )
        # Not has_message_available(): an entry handed over whole has batch index -1, which
        # stays before the last message's id, so it would never say no.
        with contextlib.suppress(Timeout):
            while True:
                message = reader.read_next(QUIET_MS)
                assert message.encryption_context() is not None
                out.append(message.data())
        reader.close()
    return out


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_an_encrypted_write_reads_back_with_the_private_key(
    session: SparkSession, broker: BrokerThread, kind: str
) -> None:
    topic = fresh_topic(f"spark-e2ee-{kind}")
    write_encrypted(session, broker, topic, kind)
    entries = stored_entries(broker, topic)
    assert entries and not any(b"secret-" in e for e in entries)
    rows = load(session, broker, topic, privateKeyFile=str(KEYS / f"{kind}_private.pem"))
    values = sorted(bytes(r.value).decode() for r in rows.collect())
    assert values == sorted(f"secret-{i}" for i in range(ROWS))


def test_a_read_without_the_key(session: SparkSession, broker: BrokerThread) -> None:
    topic = fresh_topic("spark-e2ee-nokey")
    write_encrypted(session, broker, topic, "ec")
    entries = len(stored_entries(broker, topic))
    with pytest.raises(Exception) as failure:
        load(session, broker, topic).collect()
    line = last_line(failure.value)
    assert "CryptoError" in line and "is encrypted" in line, line
    assert load(session, broker, topic, cryptoFailureAction="discard").count() == 0
    raw = load(session, broker, topic, cryptoFailureAction="consume").collect()
    assert sorted(bytes(r.value) for r in raw) == sorted(stored_entries(broker, topic))
    assert len(raw) == entries


def test_encryption_options_are_checked_when_planned(
    session: SparkSession, broker: BrokerThread
) -> None:
    df = session.range(0, 1).select(F.col("id").cast("string").alias("value"))
    writer = (
        df.write.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", fresh_topic("spark-e2ee-bad"))
        .option("encryptionKeys", "spark-key")
        .mode("append")
    )
    with pytest.raises(Exception) as failure:
        writer.save()
    assert "encryptionKeys: expected both encryptionKeys and publicKeyFile, or neither" in (
        last_line(failure.value)
    )
    with pytest.raises(Exception) as failure:
        load(session, broker, "t", cryptoFailureAction="ignore").collect()
    assert "cryptoFailureAction: expected fail or discard or consume, got 'ignore'" in (
        last_line(failure.value)
    )


def test_streaming_decrypts_and_reencrypts(
    session: SparkSession, broker: BrokerThread, tmp_path: Path
) -> None:
    """An encrypted topic copied by a stream into another encrypted topic (micro-batches of 7
    messages); a stream without the key under ``discard`` moves its offsets past every entry
    and writes nothing."""
    topic, copy = fresh_topic("spark-e2ee-stream"), fresh_topic("spark-e2ee-copy")
    write_encrypted(session, broker, topic, "rsa")
    query = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", "7")
        .option("privateKeyFile", str(KEYS / "rsa_private.pem"))
        .load()
        .select("value")
        .writeStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", copy)
        .option("encryptionKeys", "copy-key")
        .option("publicKeyFile", str(KEYS / "ec_public.pem"))
        .option("checkpointLocation", str(tmp_path / "copy"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow did not reach the end"
    assert query.exception() is None
    assert not any(b"secret-" in e for e in stored_entries(broker, copy))
    rows = load(session, broker, copy, privateKeyFile=str(KEYS / "ec_private.pem")).collect()
    assert sorted(bytes(r.value).decode() for r in rows) == sorted(
        f"secret-{i}" for i in range(ROWS)
    )

    out = tmp_path / "discarded"
    query = (
        session.readStream.format(FMT)
        .option("service.url", broker.service_url)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("cryptoFailureAction", "discard")
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "discard"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(120), "availableNow did not reach the end"
    assert query.exception() is None
    assert session.read.parquet(str(out)).count() == 0
