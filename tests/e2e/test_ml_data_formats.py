"""What a real broker leaves in /managed-ledgers is Pulsar's MLDataFormats encoding: decoded here
by protoc (a parser independent of the broker's Python classes) after producing, acking out of
order and acking batch indexes, with the embedded metadata store and with ZooKeeper; and read by
a Java program written against Pulsar's classes (tests/java/ReadManagedLedgerMetadata.java),
compiled with Debian's protoc and protobuf-java."""

from __future__ import annotations

import asyncio
import re
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from pulsar_grpc.broker.metadata import (
    EmbeddedMetadataStore,
    MetadataStore,
    ZooKeeperMetadataStore,
)
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import RECEIVE_MS
from tests.e2e.wire import batch, stub
from tests.support import BrokerThread
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "protos/pulsargrpc/internal/v1/ml_data_formats.proto"
TOPIC = "ml-formats"
NODE = f"/managed-ledgers/public/default/persistent/{TOPIC}"
JAVA_READER = ROOT / "tests/java/ReadManagedLedgerMetadata.java"
PROTOBUF_JAR = Path("/usr/share/java/protobuf.jar")  # Debian's libprotobuf-java
BATCHES = 6
BATCH_SIZE = 3


def protoc_decode(message: str, data: bytes) -> str:
    """protoc's text rendering of ``data`` as the MLDataFormats message ``message``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--decode=pulsargrpc.internal.v1.{message}",
            f"-I{ROOT / 'protos'}",
            str(PROTO),
        ],
        input=data,
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def produce_and_ack(address: str) -> list[pb.SendReceipt]:
    """Six batches of three; acked: entries 0, 1 and 3 whole, indexes 0 and 2 of entry 4."""
    topic = f"persistent://public/default/{TOPIC}"
    async with asyncio.timeout(RECEIVE_MS / 1000), grpc.aio.insecure_channel(address) as ch:
        s = stub(ch)
        # In a cluster only a lookup places the topic's bundle (on this broker: the only one).
        await s.Lookup(pb.LookupRequest(topic=topic))
        consumer = s.Consume(
            metadata=(
                ("x-pulsar-topic", topic),
                ("x-pulsar-subscription", "sub"),
                ("x-pulsar-initial-position", "Earliest"),
            )
        )
        await consumer.read()
        producer = s.Produce(metadata=(("x-pulsar-topic", topic),))
        await producer.read()
        for i in range(BATCHES):
            await producer.write(batch(i, [f"m{i}-{j}".encode() for j in range(BATCH_SIZE)]))
        receipts = [(await producer.read()).receipt for _ in range(BATCHES)]
        producer.cancel()
        # Batch indexes are acked only for delivered entries: receive everything first.
        await consumer.write(pb.ConsumeRequest(flow=pb.Flow(permits=1000)))
        delivered = 0
        while delivered < BATCHES:
            delivered += len((await consumer.read()).messages.entries)
        ids = [
            pb.MessageId(ledger_id=r.ledger_id, entry_id=r.entry_id, batch_index=-1)
            for r in (receipts[3], receipts[0], receipts[1])
        ]
        ids += [
            pb.MessageId(
                ledger_id=receipts[4].ledger_id, entry_id=receipts[4].entry_id, batch_index=i
            )
            for i in (0, 2)
        ]
        await consumer.write(pb.ConsumeRequest(ack=pb.Ack(ids=ids, request_id=7)))
        while not (await consumer.read()).HasField("ack_receipt"):
            pass
        consumer.cancel()
    return receipts


def store_row(data_dir: Path) -> bytes:
    """The cursor's state row in the embedded ledger store (its cursor ledger)."""
    with sqlite3.connect(data_dir / "ledgers.db") as db:
        (state,) = db.execute(
            "SELECT state FROM cursors WHERE ledger_name=? AND cursor_name=?",
            (NODE.removeprefix("/managed-ledgers/"), "sub"),
        ).fetchone()
    return bytes(state)


def java_read(workdir: Path, ledger_node: bytes, cursor_node: bytes) -> list[str]:
    """The lines ReadManagedLedgerMetadata.java prints for the two nodes."""
    protoc, javac, java = shutil.which("protoc"), shutil.which("javac"), shutil.which("java")
    if protoc is None or javac is None or java is None or not PROTOBUF_JAR.exists():
        pytest.fail(
            "the Java reader needs protoc, a JDK and /usr/share/java/protobuf.jar: install "
            "the Debian packages protobuf-compiler and libprotobuf-java (make cluster-deps)"
        )
    sources, classes = workdir / "java-src", workdir / "java-classes"
    sources.mkdir()
    subprocess.run(
        [protoc, f"-I{ROOT / 'protos'}", f"--java_out={sources}", str(PROTO)],
        check=True,
        timeout=60,
    )
    subprocess.run(
        [javac, "-nowarn", "-cp", str(PROTOBUF_JAR), "-d", str(classes), str(JAVA_READER)]
        + [str(p) for p in sources.rglob("*.java")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    nodes = [workdir / "ledger.bin", workdir / "cursor.bin"]
    nodes[0].write_bytes(ledger_node)
    nodes[1].write_bytes(cursor_node)
    done = subprocess.run(
        [java, "-cp", f"{classes}:{PROTOBUF_JAR}", "ReadManagedLedgerMetadata", *map(str, nodes)],
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode().splitlines()


async def check_nodes(
    metadata: MetadataStore, root: str, receipts: list[pb.SendReceipt]
) -> tuple[bytes, bytes]:
    """Decode both nodes with protoc and check them; their bytes."""
    ledger_id = receipts[0].ledger_id
    got = await metadata.get(f"{root}{NODE}")
    assert got is not None
    ledger_node = got.value
    text = protoc_decode("ManagedLedgerInfo", ledger_node)
    # The ledger was closed with the broker: its entry count and close time are recorded.
    match = re.fullmatch(
        r"ledgerInfo \{\n  ledgerId: (\d+)\n  entries: (\d+)\n  size: (\d+)\n"
        r"  timestamp: (\d+)\n\}\n",
        text,
    )
    assert match is not None, text
    assert int(match[1]) == ledger_id and int(match[2]) == BATCHES
    assert int(match[3]) > 0 and int(match[4]) > 0

    got = await metadata.get(f"{root}{NODE}/sub")
    assert got is not None
    text = protoc_decode("ManagedCursorInfo", got.value)
    last_active = re.search(r"^lastActive: (\d+)$", text, re.MULTILINE)
    assert last_active is not None and int(last_active[1]) > 0, text
    assert text.replace(last_active[0] + "\n", "") == cursor_text("ManagedCursorInfo", ledger_id)
    return ledger_node, got.value


def cursor_text(message: str, ledger_id: int) -> str:
    """protoc's rendering of the cursor after produce_and_ack (lastActive left out): acked up to
    entry 1; entry 3 deleted, i.e. Pulsar's range (ledger:2, ledger:3]; in entry 4 only index 1
    unacked, i.e. deleteSet bit 1 set (= 2)."""
    if message == "ManagedCursorInfo":
        head = f"cursorsLedgerId: -1\nmarkDeleteLedgerId: {ledger_id}\nmarkDeleteEntryId: 1\n"
    else:
        head = f"ledgerId: {ledger_id}\nentryId: 1\n"
    return (
        head
        + "individualDeletedMessages {\n"
        + f"  lowerEndpoint {{\n    ledgerId: {ledger_id}\n    entryId: 2\n  }}\n"
        + f"  upperEndpoint {{\n    ledgerId: {ledger_id}\n    entryId: 3\n  }}\n}}\n"
        + "batchedEntryDeletionIndexInfo {\n"
        + f"  position {{\n    ledgerId: {ledger_id}\n    entryId: 4\n  }}\n"
        + "  deleteSet: 2\n}\n"
    )


async def test_embedded_metadata_is_pulsars_encoding(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    data = tmp_path / "broker-data"
    broker = broker_factory(data_dir=data)
    receipts = await produce_and_ack(broker.grpc_address)
    assert broker.service is not None
    await broker.call(broker.service.close())  # a graceful close writes the snapshots

    assert protoc_decode("PositionInfo", store_row(data)) == cursor_text(
        "PositionInfo", receipts[0].ledger_id
    )
    metadata = EmbeddedMetadataStore(data)
    try:
        ledger_node, cursor_node = await check_nodes(metadata, "", receipts)
    finally:
        await metadata.close()

    lines = java_read(tmp_path, ledger_node, cursor_node)
    lid = receipts[0].ledger_id
    assert re.fullmatch(rf"ledgerId={lid}, entries={BATCHES}, size=\d+, timestamp=\d+", lines[0])
    assert re.fullmatch(
        rf"cursorsLedgerId=-1, markDeleteLedgerId={lid}, markDeleteEntryId=1, lastActive=\d+",
        lines[1],
    )
    assert lines[2:] == [f"deleted=({lid}:2, {lid}:3]", f"batch={lid}:4, deleteSet=[2]"]


async def test_zookeeper_metadata_is_pulsars_encoding(
    broker_factory: Callable[..., BrokerThread],
    zookeeper: ZooKeeperServer,
    zk_chroot: str,
    tmp_path: Path,
) -> None:
    data = tmp_path / "broker-data"
    broker = broker_factory(metadataStoreUrl=f"zk:{zookeeper.hosts}{zk_chroot}", data_dir=data)
    receipts = await produce_and_ack(broker.grpc_address)
    assert broker.service is not None
    await broker.call(broker.service.close())

    assert protoc_decode("PositionInfo", store_row(data)) == cursor_text(
        "PositionInfo", receipts[0].ledger_id
    )
    outside = await ZooKeeperMetadataStore.connect(zookeeper.hosts)
    try:
        await check_nodes(outside, zk_chroot, receipts)
    finally:
        await outside.close()
