"""Null values (issue 26) against a real broker, written as a pulsar-client user writes them:
``producer.send(None)`` publishes a compaction tombstone, which consumers see as
``has_null_value()`` True with ``data()`` empty (pulsar-client's) and ``value()`` None (Java's
``getValue()``: never given to the schema); an empty payload ``b""`` is a value, not a null one.
"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import pulsar_grpc as pulsar
from pulsar_grpc.cli.main import main
from pulsar_grpc.schema import AvroSchema, Integer, Record, StringSchema
from tests.e2e.test_encryption import RSA
from tests.support import BrokerThread

RECEIVE_MS = 10_000

# Producer options: one message an entry, a batch, a batch compressed as one block, and one
# encrypted end to end (the null marker travels encrypted with its message, as a batched
# message's SingleMessageMetadata.null_value does in Pulsar's encrypted batches).
PRODUCERS: dict[str, dict[str, Any]] = {
    "not batched": {"batching_enabled": False},
    "batched": {"batching_enabled": True, "batching_max_publish_delay_ms": 60_000},
    "compressed batch": {
        "batching_enabled": True,
        "batching_max_publish_delay_ms": 60_000,
        "compression_type": pulsar.CompressionType.LZ4,
    },
    "encrypted batch": {
        "batching_enabled": True,
        "batching_max_publish_delay_ms": 60_000,
        "encryption_key": "k",
        "crypto_key_reader": RSA,
    },
}


class Reading(Record):
    celsius = Integer()


def _publish(producer: Any, values: list[Any], **options: Any) -> None:
    """Send ``values`` with send_async and flush, so a batching producer batches them all."""
    results: list[pulsar.Result] = []
    for value in values:
        producer.send_async(value, lambda result, _id: results.append(result), **options)
    producer.flush()
    assert results == [pulsar.Result.Ok] * len(values)


def _receive(consumer: Any, count: int) -> list[Any]:
    messages = [consumer.receive(timeout_millis=RECEIVE_MS) for _ in range(count)]
    for message in messages:
        consumer.acknowledge(message)
    return messages


@pytest.mark.parametrize("options", PRODUCERS.values(), ids=PRODUCERS.keys())
def test_send_none_is_received_as_a_null_value(
    broker: BrokerThread, options: dict[str, Any]
) -> None:
    with pulsar.SyncClient(broker.service_url) as client:
        consumer = client.subscribe("tombstones", "sub", crypto_key_reader=RSA)
        producer = client.create_producer("tombstones", **options)
        _publish(producer, [None, b"", b"v"], partition_key="user-1")
        _publish(producer, [None], properties={"reason": "deleted"})
        messages = _receive(consumer, 4)
        assert [m.has_null_value() for m in messages] == [True, False, False, True]
        assert [m.data() for m in messages] == [b"", b"", b"v", b""]
        assert [m.value() for m in messages] == [None, b"", b"v", None]
        assert messages[0].partition_key() == "user-1"
        assert messages[3].properties() == {"reason": "deleted"}
        if options["batching_enabled"]:  # the null value travelled inside a batch
            assert messages[0].message_id().batch_index() == 0
            assert messages[1].message_id().entry_id() == messages[0].message_id().entry_id()


def test_a_null_value_is_never_given_to_the_schema(broker: BrokerThread) -> None:
    with pulsar.SyncClient(broker.service_url) as client:
        for topic, schema, value in [
            ("text", StringSchema(), ""),
            ("readings", AvroSchema(Reading), Reading(celsius=21)),
        ]:
            consumer = client.subscribe(topic, "sub", schema=schema)
            producer = client.create_producer(topic, schema=schema)
            producer.send(None, partition_key="k")
            producer.send(value)
            null, real = _receive(consumer, 2)
            assert (null.has_null_value(), null.value(), null.data()) == (True, None, b"")
            assert (real.has_null_value(), real.value()) == (False, value)


def test_null_values_are_stored(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    """A null value is part of the stored entry: a restarted broker still delivers it."""
    data_dir = tmp_path / "data"
    broker = broker_factory(data_dir=data_dir)
    with pulsar.SyncClient(broker.service_url) as client:
        client.subscribe("kept", "sub").close()
        producer = client.create_producer("kept", batching_enabled=False)
        producer.send(None, partition_key="gone")
        producer.send(b"")
    assert broker.service is not None
    broker.run(broker.service.close())  # the data directory is free again
    restarted = broker_factory(data_dir=data_dir)
    with pulsar.SyncClient(restarted.service_url) as client:
        messages = _receive(client.subscribe("kept", "sub"), 2)
        assert [(m.has_null_value(), m.partition_key()) for m in messages] == [
            (True, "gone"),
            (False, ""),
        ]


def _peek_header(broker: BrokerThread, topic: str, n: int) -> str | None:
    """The X-Pulsar-null-value header of Pulsar's peek of the n-th unacked entry."""
    topic_url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}"
    url = f"{topic_url}/subscription/sub/position/{n}"
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.headers.get("X-Pulsar-null-value")


def test_the_tools_show_a_null_value_apart_from_an_empty_payload(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pulsar's peek answers X-Pulsar-null-value: true (only for one); pulsar-admin's
    peek-messages shows it in the metadata, of a batched message too; consume prints it as
    content that no payload prints as."""
    with pulsar.SyncClient(broker.service_url) as client:
        client.subscribe("shown", "sub").close()
        single = client.create_producer("shown", batching_enabled=False)
        single.send(None, partition_key="gone")
        single.send(b"")
        _publish(client.create_producer("shown", batching_max_publish_delay_ms=60_000), [None, b""])
    assert [_peek_header(broker, "shown", n) for n in (1, 2)] == ["true", None]

    admin = ["admin", "--admin-url", broker.http_url, "topics", "peek-messages", "shown"]
    assert main([*admin, "-s", "sub", "-n", "4"]) == 0
    peeked = [
        json.loads(line.removeprefix("Metadata: "))
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("Metadata: ")
    ]
    assert [m.get("null-value") for m in peeked] == ["true", None, "true", None]

    consume = ["consume", "shown", "-s", "sub", "-n", "4", "--service-url", broker.service_url]
    assert main(consume) == 0
    contents = re.findall(r"content:(.*)", capsys.readouterr().out)
    assert contents == ["<null value>", "", "<null value>", ""]
