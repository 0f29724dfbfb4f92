"""End-to-end encryption from Node.js (tests/node/e2ee.js, an implementation independent of the
Python SDK's, from the documented spec): Node encrypts, the broker carries the batches without
being able to read them, and Node decrypts them with the private key, for RSA and EC keys made
by openssl as the Pulsar notes make them; a consumer with another key cannot. Across languages:
what Node encrypts the Python SDK decrypts, and what the SDK encrypts Node decrypts; and Node
reproduces docs/protocol.md's test vector byte for byte."""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from pathlib import Path

import grpc
import pytest

from pulsar_grpc.client import Client, CryptoKeyReader
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_node_client import NODE_DIR, run_node
from tests.e2e.wire import stub
from tests.support import BrokerThread
from tests.unit.test_e2ee_vector import KEYS, vector

KEY_KINDS = ["rsa", "secp521r1", "prime256v1"]
SUMMARY = {"produced": 1000, "consumed": 1000, "redelivered": 0}


def key_pair(directory: Path, kind: str) -> tuple[Path, Path]:
    """(public PEM, private PEM) made with the openssl commands of Pulsar's documentation."""
    private, public = directory / f"{kind}.pem", directory / f"{kind}.pub.pem"
    if kind == "rsa":
        make = ["openssl", "genrsa", "-out", str(private), "2048"]
        derive = ["openssl", "rsa", "-in", str(private), "-pubout", "-out", str(public)]
    else:
        make = ["openssl", "ecparam", "-name", kind, "-genkey", "-out", str(private)]
        derive = ["openssl", "ec", "-in", str(private), "-pubout", "-out", str(public)]
    for command in (make, derive):
        subprocess.run(command, check=True, capture_output=True, timeout=60)
    return public, private


def topic_name() -> str:
    return f"persistent://public/default/node-e2ee-{uuid.uuid4().hex}"


async def stored_entries(
    channel: grpc.aio.Channel, topic: str, count: int
) -> list[pb.DeliveredEntry]:
    """The topic's first ``count`` entries as the broker serves them (a raw consumer)."""
    consumer = stub(channel).Consume(
        metadata=(
            ("x-pulsar-topic", topic),
            ("x-pulsar-subscription", "raw"),
            ("x-pulsar-initial-position", "Earliest"),
        )
    )
    await consumer.read()
    await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=100_000)))
    entries: list[pb.DeliveredEntry] = []
    while len(entries) < count:
        response = await consumer.read()
        if response.WhichOneof("response") == "messages":
            entries.extend(response.messages.entries)
    consumer.cancel()
    return entries


@pytest.mark.parametrize("kind", KEY_KINDS)
def test_node_encrypts_and_node_decrypts(broker: BrokerThread, tmp_path: Path, kind: str) -> None:
    public, private = key_pair(tmp_path, kind)
    args = ("--encrypt-with", str(public), "--decrypt-with", str(private))
    code, output, last = run_node(broker.grpc_address, None, *args)
    assert code == 0, output
    assert json.loads(last) == {**SUMMARY, "decrypted_entries": 10}, output


async def test_the_broker_stores_only_ciphertext(broker: BrokerThread, tmp_path: Path) -> None:
    public, _ = key_pair(tmp_path, "rsa")
    topic = topic_name()
    args = ("--encrypt-with", str(public), "--key-name", "audit", "--produce-only")
    code, output, last = run_node(broker.grpc_address, None, *args, topic=topic)
    assert code == 0, output
    assert json.loads(last)["produced"] == 1000, output
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        entries = await stored_entries(channel, topic, 10)
    for entry in entries:
        assert not entry.messages, entry
        batch = entry.compressed
        assert [k.key for k in batch.encryption.keys] == ["audit"]
        assert batch.encryption.algorithm == "AES-256-GCM" and len(batch.encryption.param) == 12
        assert batch.num_messages == 100
        assert b"msg-" not in batch.messages and b"msg-" not in entry.SerializeToString()


def test_a_node_consumer_with_another_key_cannot_read(broker: BrokerThread, tmp_path: Path) -> None:
    public, _ = key_pair(tmp_path, "secp521r1")
    _, other_private = key_pair(tmp_path, "prime256v1")
    topic = topic_name()
    code, output, _ = run_node(
        broker.grpc_address, None, "--encrypt-with", str(public), "--produce-only", topic=topic
    )
    assert code == 0, output
    args = ("--decrypt-with", str(other_private), "--consume-only")
    code, output, last = run_node(broker.grpc_address, None, *args, topic=topic)
    assert code == 1, output
    assert "no key unwraps the batch's data key" in json.loads(last)["error"], output


CROSS_KINDS = ["rsa", "secp521r1"]


@pytest.mark.parametrize("kind", CROSS_KINDS)
async def test_node_encrypts_and_the_python_sdk_decrypts(
    broker: BrokerThread, tmp_path: Path, kind: str
) -> None:
    public, private = key_pair(tmp_path, kind)
    topic = topic_name()
    args = ("--encrypt-with", str(public), "--key-name", f"node-{kind}", "--produce-only")
    code, output, _ = await asyncio.to_thread(
        run_node, broker.grpc_address, None, *args, topic=topic
    )
    assert code == 0, output
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic,
            "python",
            initial_position="Earliest",
            crypto_key_reader=CryptoKeyReader(None, str(private)),
        )
        got = [await consumer.receive(10_000) for _ in range(1000)]
        for message in got:
            await consumer.acknowledge(message)
        await consumer.close()
    assert [m.data() for m in got] == [f"msg-{n}".encode() for n in range(1000)]
    assert all(m.encryption_context() is None for m in got)  # decrypted, not handed over raw


@pytest.mark.parametrize("kind", CROSS_KINDS)
async def test_the_python_sdk_encrypts_and_node_decrypts(
    broker: BrokerThread, tmp_path: Path, kind: str
) -> None:
    public, private = key_pair(tmp_path, kind)
    topic = topic_name()
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            topic,
            encryption_key=f"python-{kind}",
            crypto_key_reader=CryptoKeyReader(str(public), None),
            batching_max_messages=100,
            batching_max_publish_delay_ms=1000,
            block_if_queue_full=True,
        )
        futures = [await producer.enqueue(f"msg-{n}".encode()) for n in range(1000)]
        await producer.flush()
        await asyncio.gather(*futures)
        await producer.close()
    args = ("--decrypt-with", str(private), "--consume-only")
    code, output, last = await asyncio.to_thread(
        run_node, broker.grpc_address, None, *args, topic=topic
    )
    assert code == 0, output
    summary = json.loads(last)
    assert summary["consumed"] == 1000 and summary["decrypted_entries"] >= 10, output


def test_node_reproduces_the_protocol_test_vector() -> None:
    """tests/node/e2ee_vector.js: the AES-GCM ciphertext, the ECIES wrapping (fixed ephemeral
    key), both unwrappings, the decryption and the encoding of the documented ProduceRequest."""
    given = {name: value.hex() for name, value in vector().items()}
    proc = subprocess.run(
        ["node", str(NODE_DIR / "e2ee_vector.js")],
        input=json.dumps({**given, "keys": str(KEYS)}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=NODE_DIR,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(results) == 6 and all(r is True for r in results.values()), results
