"""Durability: whatever a killed (SIGKILL) broker confirmed is there after reopening."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

from pulsar_grpc.broker.ledger import (
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    Position,
    SqliteLedgerStore,
)
from pulsar_grpc.broker.metadata import EmbeddedMetadataStore

NAME = "public/default/persistent/durable"
REPO = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from pulsar_grpc.broker.ledger import (
        ManagedLedgerConfig, ManagedLedgerFactory, SqliteLedgerStore,
    )
    from pulsar_grpc.broker.metadata import EmbeddedMetadataStore

    async def main() -> None:
        data_dir = Path(sys.argv[1])
        factory = ManagedLedgerFactory(
            SqliteLedgerStore(data_dir, sync=bool(int(sys.argv[2]))),
            EmbeddedMetadataStore(data_dir),
            ManagedLedgerConfig(max_entries_per_ledger=50),
        )
        ml = await factory.open(sys.argv[3])
        cursor = await ml.open_cursor("sub", "earliest")

        def report(kind, pos, payload=b""):
            def done(f):
                if not f.exception():
                    print(kind, pos, payload.decode(), flush=True)
            return done

        def entry_done(i, payload):
            def done(f):
                if f.exception():
                    return
                pos = f.result()
                print("E", pos, payload.decode(), flush=True)
                if i % 3 == 0:
                    cursor.delete([pos]).add_done_callback(report("A", pos))
                if i % 40 == 39:
                    cursor.mark_delete(pos).add_done_callback(report("M", pos))
            return done

        i = 0
        while True:
            for _ in range(20):
                payload = b"payload-%d" % i
                ml.add_entry(payload).add_done_callback(entry_done(i, payload))
                i += 1
            await asyncio.sleep(0.001)

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("sync", [False, True])
async def test_confirmed_entries_and_acks_survive_sigkill(tmp_path: Path, sync: bool) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(tmp_path),
        str(int(sync)),
        NAME,
        stdout=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    assert proc.stdout is not None
    entries: dict[Position, str] = {}
    acked: list[Position] = []
    marked: list[Position] = []
    try:
        async with asyncio.timeout(60):
            while len(entries) < 2000 or len(marked) < 20:
                line = await proc.stdout.readline()
                assert line, "writer exited"
                kind, pos, *rest = line.decode().split()
                position = Position.parse(pos)
                if kind == "E":
                    entries[position] = rest[0]
                elif kind == "A":
                    acked.append(position)
                else:
                    marked.append(position)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert proc.returncode == -signal.SIGKILL

    store = SqliteLedgerStore(tmp_path)
    metadata = EmbeddedMetadataStore(tmp_path)
    factory = ManagedLedgerFactory(store, metadata, ManagedLedgerConfig(max_entries_per_ledger=50))
    try:
        ml = await factory.open(NAME)
        cursor = ml.cursors["sub"]
        assert cursor.mark_delete_position >= max(marked)
        for position in acked:
            assert cursor.is_deleted(position), position
        assert ml.last_confirmed_entry is not None
        assert ml.last_confirmed_entry >= max(entries)
        # Consumed ledgers may have been trimmed; everything after mark-delete must be there.
        kept = {p: v for p, v in entries.items() if p > cursor.mark_delete_position}
        for position, payload in kept.items():
            entry = await ml.read_entry(position)
            assert entry is not None, position
            assert entry.data.decode() == payload
        # From mark-delete on, entries are numbered in position order without holes.
        reader = ml.new_non_durable_cursor(cursor.mark_delete_position, inclusive=False)
        read = await reader.read_entries(100_000)
        numbers = [int(e.data.decode().split("-")[1]) for e in read]
        if kept:  # empty when the last mark-delete covered everything confirmed
            assert read[0].data.decode() == kept[min(kept)]
            assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))
    finally:
        await factory.close()
        await store.close()
        await metadata.close()
