"""A broker whose entries live in PostgreSQL (ledgerStorageUrl): messages and acks survive a
restart and a kill -9, one under load with 50 batches in flight; a bad or unreachable URL stops
start-up with a clear message."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import asyncpg
import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.test_durability import consume_metadata, drain
from tests.e2e.wire import batch, stub
from tests.faultproxy import free_port
from tests.postgres import postgres_server, postgres_url  # noqa: F401
from tests.support import StandaloneProcess

TOPIC = "persistent://public/default/on-postgres"


async def produce(address: str, first_batch: int, batches: int) -> list[pb.SendReceipt]:
    """`batches` batches of 10 messages m<i>-<j>, each awaited to its receipt."""
    async with grpc.aio.insecure_channel(address) as ch:
        producer = stub(ch).Produce(metadata=(("x-pulsar-topic", TOPIC),))
        await producer.read()
        for i in range(first_batch, first_batch + batches):
            await producer.write(batch(i * 10, [f"m{i}-{j}".encode() for j in range(10)]))
        receipts = [(await producer.read()).receipt for _ in range(batches)]
        producer.cancel()
    return receipts


async def subscribe(address: str, sub: str) -> None:
    """Create subscription `sub` at the earliest message."""
    async with grpc.aio.insecure_channel(address) as ch:
        consumer = stub(ch).Consume(metadata=consume_metadata(TOPIC, sub))
        await consumer.read()
        consumer.cancel()


async def subscribe_and_ack(address: str, receipts: list[pb.SendReceipt]) -> None:
    """Create subscription `sub` at the earliest message and ack `receipts`, durably."""
    async with grpc.aio.insecure_channel(address) as ch:
        consumer = stub(ch).Consume(metadata=consume_metadata(TOPIC, "sub"))
        await consumer.read()
        ids = [
            pb.MessageId(ledger_id=r.ledger_id, entry_id=r.entry_id, batch_index=-1)
            for r in receipts
        ]
        await consumer.write(pb.ConsumeRequest(ack=pb.Ack(ids=ids, request_id=7)))
        while not (response := await consumer.read()).HasField("ack_receipt"):
            pass
        assert response.ack_receipt.request_id == 7
        consumer.cancel()


def payloads(batches: range) -> list[bytes]:
    return [f"m{i}-{j}".encode() for i in batches for j in range(10)]


async def test_messages_and_acks_in_postgres_survive_restart_and_kill_9(
    standalone_factory: Callable[..., StandaloneProcess],
    postgres_url: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "broker"
    on_postgres = ("--set", f"ledgerStorageUrl={postgres_url}")
    broker = standalone_factory(data_dir, *on_postgres)
    receipts = await produce(broker.grpc_address, 0, 30)
    await subscribe_and_ack(broker.grpc_address, receipts[:10])
    assert broker.stop() == 0

    broker = standalone_factory(data_dir, *on_postgres)
    assert await drain(broker.grpc_address, TOPIC, "sub", 200) == payloads(range(10, 30))
    await produce(broker.grpc_address, 30, 10)
    broker.kill9()

    broker = standalone_factory(data_dir, *on_postgres)
    assert await drain(broker.grpc_address, TOPIC, "sub", 300) == payloads(range(10, 40))
    assert await drain(broker.grpc_address, TOPIC, "fresh", 400) == payloads(range(40))
    # The entries are in PostgreSQL, not in an embedded store next to the metadata.
    assert not (data_dir / "ledgers.db").exists()
    conn = await asyncpg.connect(postgres_url, timeout=30)
    try:
        assert await conn.fetchval("SELECT count(*) FROM ledger_entries") >= 30
    finally:
        await conn.close()


async def test_every_receipted_message_survives_kill_9_under_load(
    standalone_factory: Callable[..., StandaloneProcess],
    postgres_url: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "broker"
    on_postgres = ("--set", f"ledgerStorageUrl={postgres_url}")
    broker = standalone_factory(data_dir, *on_postgres)
    await subscribe(broker.grpc_address, "sub")  # keeps what is produced (no retention)
    receipted = 0  # receipts come in send order: batches 0..receipted-1 are durable
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        producer = stub(ch).Produce(metadata=(("x-pulsar-topic", TOPIC),))
        await producer.read()
        sent = 0
        with contextlib.suppress(grpc.aio.AioRpcError):
            while True:
                while sent - receipted < 50:  # 50 batches in flight while the broker dies
                    await producer.write(batch(sent * 10, payloads(range(sent, sent + 1))))
                    sent += 1
                response = await producer.read()
                assert response.HasField("receipt"), response
                receipted += 1
                if receipted == 300:
                    broker.kill9()
    assert receipted >= 300

    broker = standalone_factory(data_dir, *on_postgres)
    consumed = await drain(broker.grpc_address, TOPIC, "sub", receipted * 10)
    assert consumed[: receipted * 10] == payloads(range(receipted))


def start_standalone(tmp_path: Path, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone",
            "--data", str(tmp_path / "d"), "--set", f"ledgerStorageUrl={url}",
            "--set", "grpcServicePort=0", "--set", "webServicePort=0",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_a_bad_ledger_storage_url_is_a_configuration_error(tmp_path: Path) -> None:
    done = start_standalone(tmp_path, "mysql://u:secret@db/x")
    assert done.returncode == 2
    assert "ledgerStorageUrl" in done.stderr and "postgresql://" in done.stderr
    assert "secret" not in done.stderr


def test_an_unreachable_database_stops_start_up_naming_it(tmp_path: Path) -> None:
    done = start_standalone(tmp_path, f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere")
    assert done.returncode == 1
    assert "cannot start: ledger store (PostgreSQL at 127.0.0.1:" in done.stderr
    assert "/nowhere" in done.stderr
