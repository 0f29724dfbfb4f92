"""`pulsar-grpc inspect` and pulsar_grpc.inspector read a real broker's storage without it: a
standalone data directory while the broker runs (and keeps serving), after it stopped, and after
a kill -9 (every message with a receipt is listed); a cluster's ZooKeeper and PostgreSQL
without taking anything over (no znode added, the broker keeps serving, PostgreSQL refuses the
session's writes). What is listed matches the broker's own internalStats and what was acked;
errors are one line and exit code 1."""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from kazoo.client import KazooClient

from pulsar_grpc.broker.ledger.position import Position
from pulsar_grpc.client import Client, MessageId
from pulsar_grpc.inspector import (
    CursorRecord,
    EntryRecord,
    Inspector,
    LedgerState,
    StateSource,
    StorageUnavailableError,
    open_config,
    open_storage,
)
from pulsar_grpc.inspector.sources import PostgresLedgerSource
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import receive_n
from tests.e2e.wire import stub
from tests.faultproxy import free_port
from tests.postgres import postgres_server, postgres_url  # noqa: F401
from tests.support import BrokerThread, StandaloneProcess
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

TOPIC = "persistent://public/default/inspected"
WAIT_S = 30


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_grpc.cli.main", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def cli_json(*args: str) -> Any:
    done = cli(*args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def internal_stats(http_url: str, topic: str = TOPIC) -> dict[str, Any]:
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.get(f"{http_url}{path}/internalStats") as response,
    ):
        assert response.status == 200, await response.text()
        stats: dict[str, Any] = await response.json()
        return stats


def ledger_rows(inspector: Inspector, topic: str = TOPIC) -> list[tuple[int, int, int, int]]:
    return [(r.ledger_id, r.entries, r.size, r.timestamp) for r in inspector.ledgers(topic)]


def stats_rows(stats: dict[str, Any]) -> list[tuple[int, int, int, int]]:
    return [(i["ledgerId"], i["entries"], i["size"], i["timestamp"]) for i in stats["ledgers"]]


async def produce_and_ack(service_url: str) -> int:
    """Six entries in one ledger; returns its id. Entries 0 and 1: batches of five b0..b9
    (keys k0/k1, property i); 2-4: single messages s0..s2 (ordering key, event time); 5: a
    ZLIB-compressed batch of four. Acked: entry 0 whole, indexes 1 and 3 of entry 1, entry 3."""
    async with Client(service_url) as client:
        consumer = await client.subscribe(TOPIC, "sub", initial_position="Earliest")
        batcher = await client.create_producer(
            TOPIC,
            producer_name="batcher",
            batching_max_messages=5,
            batching_max_publish_delay_ms=60_000,
        )
        for first in (0, 5):
            await asyncio.gather(
                *(
                    batcher.send(f"b{i}".encode(), {"i": str(i)}, partition_key=f"k{i % 2}")
                    for i in range(first, first + 5)
                )
            )
        single = await client.create_producer(TOPIC, producer_name="single", batching_enabled=False)
        for i in range(3):
            await single.send(f"s{i}".encode(), ordering_key=b"ok", event_timestamp=1000 + i)
        zipper = await client.create_producer(
            TOPIC,
            producer_name="zipper",
            compression_type="ZLIB",
            batching_max_messages=4,
            batching_max_publish_delay_ms=60_000,
        )
        await asyncio.gather(*(zipper.send(b"z" * 100 + str(i).encode()) for i in range(4)))
        received = await receive_n(consumer, 17)
        ids = [m.message_id() for m in received]
        assert [(i.entry_id(), i.batch_index()) for i in ids[:12]] == [
            *((0, b) for b in range(5)),
            *((1, b) for b in range(5)),
            (2, 0),
            (3, 0),
        ]
        acked: list[MessageId] = [*ids[0:5], ids[6], ids[8], ids[11]]
        await consumer.acknowledge(acked, wait=True)
        await consumer.close()
        return ids[0].ledger_id()


def check_cursor(cursors: list[CursorRecord], ledger: int) -> None:
    (cursor,) = cursors
    assert cursor.name == "sub"
    assert cursor.source is StateSource.LEDGER_STORE
    assert cursor.mark_delete == Position(ledger, 0)
    assert cursor.individually_deleted == ((Position(ledger, 3), Position(ledger, 3)),)
    assert cursor.ranges_text() == f"[({ledger}:2..{ledger}:3]]"
    (batch,) = cursor.batch_deletions
    assert (batch.position, batch.unacked_indexes) == (Position(ledger, 1), (0, 2, 4))
    assert cursor.last_active is not None and cursor.last_active > 0


def check_entries(entries: list[EntryRecord], ledger: int) -> None:
    assert [(e.ledger_id, e.entry_id) for e in entries] == [(ledger, i) for i in range(6)]
    assert [e.num_messages for e in entries] == [5, 5, 1, 1, 1, 4]
    assert [e.producer_name for e in entries] == ["batcher"] * 2 + ["single"] * 3 + ["zipper"]
    first = entries[0]
    assert [m.payload for m in first.messages] == [f"b{i}".encode() for i in range(5)]
    assert [m.key for m in first.messages] == ["k0", "k1", "k0", "k1", "k0"]
    assert [m.properties for m in first.messages] == [{"i": str(i)} for i in range(5)]
    assert first.publish_time > 0 and first.compression == "NONE"
    single = entries[3].messages[0]
    assert (single.payload, single.ordering_key, single.event_time) == (b"s1", b"ok", 1001)
    zipped = entries[5]
    assert zipped.compression == "ZLIB"
    assert [m.payload for m in zipped.messages] == [b"z" * 100 + str(i).encode() for i in range(4)]
    assert zipped.size < 400 < sum(len(m.payload) for m in zipped.messages)


async def test_inspect_a_standalone_running_stopped_and_killed(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    broker = standalone_factory(data)
    ledger = await produce_and_ack(broker.service_url)

    # (a) while the broker runs, and it keeps serving while the inspector reads
    with open_storage(data) as inspector:
        assert inspector.topics() == [TOPIC]
        assert inspector.topics("public/default") == [TOPIC]
        stats = await internal_stats(broker.http_url)
        assert ledger_rows(inspector) == stats_rows(stats)
        assert inspector.ledgers(TOPIC)[-1].state is LedgerState.OPEN
        check_cursor(inspector.cursors(TOPIC), ledger)
        reading = inspector.entries("inspected")  # the short name, as everywhere
        assert next(reading).position == Position(ledger, 0)  # a read in progress
        async with Client(broker.service_url) as client:
            producer = await client.create_producer(TOPIC, batching_enabled=False)
            async with asyncio.timeout(WAIT_S):
                late = await producer.send(b"while inspecting")
        assert [e.entry_id for e in reading] == [1, 2, 3, 4, 5]  # what was there at the call
        (newest,) = inspector.entries(TOPIC, start=6)
        assert newest.messages[0].payload == b"while inspecting"
        check_entries(list(inspector.entries(TOPIC, end=5)), ledger)
        stats = await internal_stats(broker.http_url)
        assert ledger_rows(inspector) == stats_rows(stats)
        # Ranges: an entry id within the ledger, or positions across ledgers.
        picked = inspector.entries(TOPIC, ledger=ledger, start=2, end=Position(ledger, 3))
        assert [e.entry_id for e in picked] == [2, 3]
        assert [e.entry_id for e in inspector.entries(TOPIC, start=5, limit=10)] == [5, 6]
    assert cli_json("ledgers", TOPIC, "--data-dir", str(data))["ledgers"][-1]["state"] == "open"
    lines = cli("entries", "inspected", "--data-dir", str(data), "--json", "--payload", "hex")
    docs = [json.loads(line) for line in lines.stdout.splitlines()]
    assert len(docs) == 7 and docs[6]["messages"][0]["payload"] == b"while inspecting".hex()

    # (b) after a graceful stop: the ledger closed, the same counts, the same cursor; and
    # the stopped broker's directory is left exactly as it was (no SQLite -wal/-shm made)
    assert broker.stop() == 0
    files_before = sorted(p.name for p in data.rglob("*"))
    with open_storage(data) as inspector:
        rows = ledger_rows(inspector)
        assert [r[:3] for r in rows] == [r[:3] for r in stats_rows(stats)]
        assert rows[-1][3] > 0 and inspector.ledgers(TOPIC)[-1].state is LedgerState.CLOSED
        check_cursor(inspector.cursors(TOPIC), ledger)
        check_entries(list(inspector.entries(TOPIC, end=5)), ledger)
    cursors = cli_json("cursors", TOPIC, "--data-dir", str(data))["cursors"]
    assert cursors[0]["markDeletePosition"] == f"{ledger}:0"
    assert cursors[0]["batchDeletedIndexes"] == [
        {"position": f"{ledger}:1", "unackedIndexes": [0, 2, 4]}
    ]
    text = cli("entries", TOPIC, "--data-dir", str(data), "--limit", "1")
    assert text.returncode == 0 and f"ledgerId={ledger}, entryId=0, size=" in text.stdout
    assert "key='k1'" in text.stdout and "payload='b1'" in text.stdout
    payloads = tmp_path / "payloads"
    raw = cli("entries", TOPIC, "--data-dir", str(data), "--from", "5", "--to", "5",
              "--payload", "none", "--payload-dir", str(payloads))  # fmt: skip
    assert raw.returncode == 0 and "payload=" not in raw.stdout, raw.stderr
    assert sorted(p.name for p in payloads.iterdir()) == [f"{ledger}-5-{i}.bin" for i in range(4)]
    assert (payloads / f"{ledger}-5-3.bin").read_bytes() == b"z" * 100 + b"3"
    assert sorted(p.name for p in data.rglob("*")) == files_before

    # (c) after a kill -9: every message that had a receipt is there
    broker = standalone_factory(data)
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(TOPIC, batching_enabled=False)
        receipted = [await producer.send(f"k{i}".encode()) for i in range(5)]
    broker.kill9()
    with open_storage(data) as inspector:
        ledgers = inspector.ledgers(TOPIC)
        assert ledgers[-1].state is LedgerState.OPEN
        assert ledgers[-1].ledger_id == receipted[0].ledger_id() != late.ledger_id()
        assert ledgers[-1].entries == 5
        after = list(inspector.entries(TOPIC, start=Position(receipted[0].ledger_id(), 0)))
        assert [e.messages[0].payload for e in after] == [f"k{i}".encode() for i in range(5)]
        assert [e.entry_id for e in after] == [r.entry_id() for r in receipted]
        check_cursor(inspector.cursors(TOPIC), ledger)


async def test_an_encrypted_batch_is_shown_encrypted_never_decoded(
    broker: BrokerThread, tmp_path: Path
) -> None:
    """The batch's envelope and ciphertext as stored; no attempt to decompress or parse it."""
    topic = "persistent://public/default/sealed"
    context = pb.EncryptionContext(
        keys=[pb.EncryptionKey(key="ops", value=b"\x01" * 48, metadata={"v": "1"})],
        algorithm="AES-256-GCM",
        param=b"\x07" * 12,
    )
    ciphertext = b"\x99" * 40
    sealed = pb.CompressedBatch(
        compression=pb.LZ4,
        uncompressed_size=123,
        num_messages=3,
        key=b"routing",
        messages=ciphertext,
        encryption=context,
    )
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        producer = stub(channel).Produce(metadata=(("x-pulsar-topic", topic),))
        await producer.read()
        await producer.write(pb.ProduceRequest(sequence_id=0, compressed=sealed))
        assert (await producer.read()).HasField("receipt")
        producer.cancel()
    data = broker.config.dataDirectory
    conf = tmp_path / "broker.conf"  # the broker's own properties, read by its loader
    conf.write_text(f"dataDirectory={data}\n")
    with open_config(conf) as inspector:
        (entry,) = inspector.entries(topic)
    assert entry.messages == () and entry.num_messages == 3 and entry.compression == "LZ4"
    assert entry.encrypted is not None
    assert (entry.encrypted.algorithm, entry.encrypted.param) == ("AES-256-GCM", b"\x07" * 12)
    assert [(k.name, k.metadata) for k in entry.encrypted.keys] == [("ops", {"v": "1"})]
    assert entry.encrypted.ciphertext == ciphertext
    out = tmp_path / "out"
    done = cli("entries", topic, "--config", str(conf), "--json", "--payload-dir", str(out))
    (doc,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert doc["messages"] == [] and doc["encrypted"]["ciphertext"] == ciphertext.hex()
    assert doc["encrypted"]["keys"][0]["wrappedDataKey"] == (b"\x01" * 48).hex()
    assert doc["encrypted"]["ciphertextFile"] == str(out / f"{entry.ledger_id}-0.encrypted")
    assert (out / f"{entry.ledger_id}-0.encrypted").read_bytes() == ciphertext
    text = cli("entries", topic, "--config", str(conf)).stdout
    assert 'encrypted: algorithm=AES-256-GCM, keys=[ops{"v": "1"}]' in text


async def test_errors_are_one_line_and_exit_code_1(broker: BrokerThread, tmp_path: Path) -> None:
    data = Path(broker.config.dataDirectory)
    async with Client(broker.service_url) as client:
        producer = await client.create_producer("plain", batching_enabled=False)
        await producer.send(b"x")
    async with (
        aiohttp.ClientSession() as http,
        http.put(
            f"{broker.http_url}/admin/v2/persistent/public/default/parted/partitions", json=2
        ) as response,
    ):
        assert response.status == 204, await response.text()

    def fails(*args: str, says: str) -> None:
        started = time.monotonic()
        done = cli(*args)
        assert done.returncode == 1, done
        assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        assert time.monotonic() - started < 30

    fails("ledgers", "plain", "--data-dir", str(tmp_path / "none"), says="does not exist")
    fails("ledgers", "absent", "--data-dir", str(data), says="topic persistent://public/")
    fails("cursors", "parted", "--data-dir", str(data), says="partitioned topic with 2 part")
    fails("entries", "plain", "--data-dir", str(data), "--ledger", "999", says="not a ledger")
    fails("ledgers", "plain", says="--data-dir")
    unreachable = f"127.0.0.1:{free_port()}"
    fails(
        "ledgers",
        "plain",
        "--metadata-store",
        f"zk:{unreachable}",
        "--ledger-storage",
        f"postgresql://u@{unreachable}/db",
        "--timeout",
        "1",
        says="cannot connect to ZooKeeper",
    )
    fails(
        "ledgers",
        "plain",
        "--data-dir",
        str(data),
        "--ledger-storage",
        f"postgresql://u@{unreachable}/db",
        "--timeout",
        "1",
        says=f"PostgreSQL at {unreachable}/db",
    )
    # Corrupt copies (the broker's own files are only read).
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("metadata.db", "ledgers.db"):
        with (
            sqlite3.connect((data / name).resolve().as_uri() + "?mode=ro", uri=True) as source,
            sqlite3.connect(copy / name) as target,
        ):
            source.backup(target)
    with sqlite3.connect(copy / "ledgers.db") as db:
        db.execute("UPDATE entries SET data = x'ff'")
    fails("entries", "plain", "--data-dir", str(copy), says="is not a stored entry")
    with sqlite3.connect(copy / "metadata.db") as db:
        db.execute(
            "UPDATE nodes SET value = x'ff' WHERE path = ?",
            ("/managed-ledgers/public/default/persistent/plain",),
        )
    fails("ledgers", "plain", "--data-dir", str(copy), says="does not decode")
    shutil.rmtree(copy)


def znodes(client: KazooClient, path: str = "/") -> set[str]:
    found = {path}
    for child in client.get_children(path):
        found |= znodes(client, f"{path.rstrip('/')}/{child}")
    return found


async def test_inspect_a_cluster_without_taking_anything_over(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    postgres_url: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> None:
    metadata_url = f"zk:{zookeeper.hosts}{zk_chroot}"
    broker = broker_factory(
        metadataStoreUrl=metadata_url, ledgerStorageUrl=postgres_url, data_dir=tmp_path / "b"
    )
    ledger = await produce_and_ack(broker.service_url)
    watcher = KazooClient(hosts=zookeeper.hosts + zk_chroot)
    await asyncio.to_thread(watcher.start, 30)
    try:
        before = await asyncio.to_thread(znodes, watcher)
        with open_storage(None, metadata_url, postgres_url) as inspector:
            assert inspector.topics() == [TOPIC]
            stats = await internal_stats(broker.http_url)
            assert ledger_rows(inspector) == stats_rows(stats)
            check_cursor(inspector.cursors(TOPIC), ledger)
            check_entries(list(inspector.entries(TOPIC)), ledger)
        assert await asyncio.to_thread(znodes, watcher) == before  # no node added or removed
    finally:
        await asyncio.to_thread(watcher.stop)
        watcher.close()
    entries = cli(
        "entries", TOPIC, "--metadata-store", metadata_url, "--ledger-storage", postgres_url
    )
    assert entries.returncode == 0 and entries.stdout.count("ledgerId=") == 6, entries.stderr
    # The broker still owns and serves the topic.
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(TOPIC, batching_enabled=False)
        async with asyncio.timeout(WAIT_S):
            await producer.send(b"after")
    # The inspector's PostgreSQL session cannot write, whatever it is asked.
    source = PostgresLedgerSource(postgres_url, "test", 10)
    try:
        with pytest.raises(StorageUnavailableError, match="read-only transaction"):
            source._run(source._conn.execute("DELETE FROM ledger_cursors"))
    finally:
        source.close()
