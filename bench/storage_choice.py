"""Benchmark candidate embedded stores for the broker's ledger access pattern.

Access pattern modelled (one topic):

* appends of ~12 KB entries keyed by (ledger_id, entry_id), committed in groups
  (group commit); the cursor state (~100 bytes) is rewritten in every group;
* a tailing reader reading ranges of 100 consecutive entries;
* whole ledgers (50,000 entries) deleted once consumed.

Two durability modes:

* ``a`` -- survives kill -9 of the process (data handed to the OS page cache, no fsync);
* ``b`` -- survives power loss (fsync per group commit).

Candidates: SQLite (WAL), LMDB, RocksDB (rocksdict) and plain append-only segment files
with an in-memory offset index. For each candidate and mode the script measures append
throughput with group sizes 1 and 20, the cost of a 100-entry range read, the cost of
deleting a 50,000-entry ledger (mode b only: an upper bound for mode a) and how much a
Python loop in the main thread slows down while a worker thread appends at the target
rate (the broker's event loop must keep serving gRPC while the store works).

Usage::

    .venv/bin/python bench/storage_choice.py --seconds 3

Everything is written under a temporary directory which is removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import shutil
import sqlite3
import statistics
import struct
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable

ENTRY_SIZE = 12 * 1024  # 100 messages x 100 bytes + batch/message metadata
CURSOR_SIZE = 100
LEDGER_ENTRIES = 50_000  # a ledger is rolled over after this many entries
READ_RANGE = 100
MODES = ("a", "b")
MODE_LABEL = {"a": "a: kill -9", "b": "b: power loss"}

_rng = random.Random(42)
PAYLOADS = [_rng.randbytes(ENTRY_SIZE) for _ in range(16)]  # incompressible
CURSOR = _rng.randbytes(CURSOR_SIZE)


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return struct.pack(">QQ", ledger_id, entry_id)


class Store:
    """The operations the broker's LedgerStore needs, in their simplest form."""

    name = "?"

    def __init__(self, path: str, durable: bool) -> None:
        self.path = path
        self.durable = durable

    def append_group(
        self, ledger_id: int, first_entry_id: int, payloads: list[bytes], cursor: bytes
    ) -> None:
        raise NotImplementedError

    def read_range(self, ledger_id: int, first_entry_id: int, count: int) -> list[bytes]:
        raise NotImplementedError

    def delete_ledger(self, ledger_id: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class SQLiteStore(Store):
    """WAL journal; synchronous=NORMAL (mode a) or FULL (mode b)."""

    def __init__(self, path: str, durable: bool, page_size: int = 4096) -> None:
        super().__init__(path, durable)
        self.name = "SQLite" if page_size == 4096 else f"SQLite page_size={page_size // 1024}K"
        self.db = sqlite3.connect(
            os.path.join(path, "ledgers.db"), isolation_level=None, check_same_thread=False
        )
        self.db.execute(f"PRAGMA page_size={page_size}")
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self.db.execute(
            "CREATE TABLE entries (ledger_id INTEGER NOT NULL, entry_id INTEGER NOT NULL,"
            " payload BLOB NOT NULL, PRIMARY KEY (ledger_id, entry_id))"
        )
        self.db.execute("CREATE TABLE cursors (name TEXT PRIMARY KEY, state BLOB NOT NULL)")

    def append_group(self, ledger_id, first_entry_id, payloads, cursor):
        db = self.db
        db.execute("BEGIN")
        db.executemany(
            "INSERT INTO entries (ledger_id, entry_id, payload) VALUES (?, ?, ?)",
            [(ledger_id, first_entry_id + i, p) for i, p in enumerate(payloads)],
        )
        db.execute("INSERT OR REPLACE INTO cursors (name, state) VALUES ('sub', ?)", (cursor,))
        db.execute("COMMIT")

    def read_range(self, ledger_id, first_entry_id, count):
        rows = self.db.execute(
            "SELECT payload FROM entries WHERE ledger_id = ? AND entry_id >= ? AND entry_id < ?"
            " ORDER BY entry_id",
            (ledger_id, first_entry_id, first_entry_id + count),
        ).fetchall()
        return [r[0] for r in rows]

    def delete_ledger(self, ledger_id):
        self.db.execute("BEGIN")
        self.db.execute("DELETE FROM entries WHERE ledger_id = ?", (ledger_id,))
        self.db.execute("COMMIT")

    def close(self):
        self.db.close()


class LMDBStore(Store):
    """sync=False, metasync=False (mode a) or sync=True, metasync=True (mode b)."""

    name = "LMDB"
    MAP_SIZE = 64 << 30  # sparse; must be fixed up front and cover the whole data set

    def __init__(self, path: str, durable: bool) -> None:
        import lmdb

        super().__init__(path, durable)
        self.env = lmdb.open(
            path,
            map_size=self.MAP_SIZE,
            max_dbs=2,
            sync=durable,
            metasync=durable,
            writemap=False,
        )
        self.entries = self.env.open_db(b"entries")
        self.cursors = self.env.open_db(b"cursors")

    def append_group(self, ledger_id, first_entry_id, payloads, cursor):
        with self.env.begin(write=True) as txn:
            for i, p in enumerate(payloads):
                txn.put(entry_key(ledger_id, first_entry_id + i), p, db=self.entries, append=True)
            txn.put(b"sub", cursor, db=self.cursors)

    def read_range(self, ledger_id, first_entry_id, count):
        out = []
        end = entry_key(ledger_id, first_entry_id + count)
        with self.env.begin(db=self.entries) as txn:
            cur = txn.cursor()
            if cur.set_range(entry_key(ledger_id, first_entry_id)):
                for k, v in cur:
                    if k >= end:
                        break
                    out.append(v)
        return out

    def delete_ledger(self, ledger_id):
        end = entry_key(ledger_id + 1, 0)
        with self.env.begin(write=True, db=self.entries) as txn:
            cur = txn.cursor()
            if cur.set_range(entry_key(ledger_id, 0)):
                while cur.key() and cur.key() < end:
                    if not cur.delete():
                        break

    def close(self):
        self.env.close()


class RocksStore(Store):
    """WAL on; WriteOptions.sync False (mode a) or True (mode b); compression off."""

    name = "RocksDB"

    def __init__(self, path: str, durable: bool) -> None:
        import rocksdict

        super().__init__(path, durable)
        self._rd = rocksdict
        opts = rocksdict.Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_compression_type(rocksdict.DBCompressionType.none())
        self.db = rocksdict.Rdict(os.path.join(path, "rocks"), opts)
        self.wo = rocksdict.WriteOptions()
        self.wo.sync = durable

    def append_group(self, ledger_id, first_entry_id, payloads, cursor):
        wb = self._rd.WriteBatch(raw_mode=True)
        for i, p in enumerate(payloads):
            wb.put(b"e" + entry_key(ledger_id, first_entry_id + i), p)
        wb.put(b"csub", cursor)
        self.db.write(wb, self.wo)

    def read_range(self, ledger_id, first_entry_id, count):
        out = []
        end = b"e" + entry_key(ledger_id, first_entry_id + count)
        it = self.db.iter()
        it.seek(b"e" + entry_key(ledger_id, first_entry_id))
        while it.valid() and it.key() < end:
            out.append(it.value())
            it.next()
        return out

    def delete_ledger(self, ledger_id):
        self.db.delete_range(
            b"e" + entry_key(ledger_id, 0), b"e" + entry_key(ledger_id + 1, 0), self.wo
        )

    def close(self):
        self.db.close()


class SegmentStore(Store):
    """One append-only file per ledger + in-memory offset index + cursor file.

    Record = header (entry_id u64, length u32, crc32 u32) + payload; a group is written
    with a single os.write. Mode b: fdatasync the segment and the cursor file per group.
    The cursor is overwritten in place with pwrite (a real design needs a torn-write-safe
    scheme: two checksummed slots or write-new + rename).
    """

    name = "Segment files"
    HEADER = struct.Struct(">QII")

    def __init__(self, path: str, durable: bool) -> None:
        super().__init__(path, durable)
        self.fds: dict[int, int] = {}
        self.offsets: dict[int, list[int]] = {}  # ledger -> start offset of each entry + end
        self.cursor_fd = os.open(os.path.join(path, "cursor"), os.O_RDWR | os.O_CREAT, 0o644)
        self.dir_fd = os.open(path, os.O_RDONLY)

    def _fd(self, ledger_id: int) -> int:
        fd = self.fds.get(ledger_id)
        if fd is None:
            fd = os.open(
                os.path.join(self.path, f"{ledger_id:016x}.seg"),
                os.O_RDWR | os.O_CREAT | os.O_APPEND,
                0o644,
            )
            self.fds[ledger_id] = fd
            self.offsets[ledger_id] = [0]
            if self.durable:
                os.fsync(self.dir_fd)
        return fd

    def append_group(self, ledger_id, first_entry_id, payloads, cursor):
        fd = self._fd(ledger_id)
        offs = self.offsets[ledger_id]
        pos = offs[-1]
        parts = []
        pack = self.HEADER.pack
        for i, p in enumerate(payloads):
            parts.append(pack(first_entry_id + i, len(p), zlib.crc32(p)))
            parts.append(p)
            pos += self.HEADER.size + len(p)
            offs.append(pos)
        os.write(fd, b"".join(parts))
        os.pwrite(self.cursor_fd, cursor, 0)
        if self.durable:
            os.fdatasync(fd)
            os.fdatasync(self.cursor_fd)

    def read_range(self, ledger_id, first_entry_id, count):
        offs = self.offsets[ledger_id]
        last = min(first_entry_id + count, len(offs) - 1)
        start = offs[first_entry_id]
        buf = os.pread(self.fds[ledger_id], offs[last] - start, start)
        out = []
        mv = memoryview(buf)
        pos = 0
        hs = self.HEADER.size
        while pos < len(buf):
            _eid, length, crc = self.HEADER.unpack_from(buf, pos)
            payload = mv[pos + hs : pos + hs + length]
            if zlib.crc32(payload) != crc:
                raise OSError("checksum mismatch")
            out.append(payload.tobytes())
            pos += hs + length
        return out

    def delete_ledger(self, ledger_id):
        os.close(self.fds.pop(ledger_id))
        self.offsets.pop(ledger_id)
        os.unlink(os.path.join(self.path, f"{ledger_id:016x}.seg"))
        if self.durable:
            os.fsync(self.dir_fd)

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        os.close(self.cursor_fd)
        os.close(self.dir_fd)


FACTORIES: dict[str, Callable[[str, bool], Store]] = {
    "sqlite": SQLiteStore,
    "sqlite16k": lambda path, durable: SQLiteStore(path, durable, page_size=16384),
    "lmdb": LMDBStore,
    "rocksdb": RocksStore,
    "segments": SegmentStore,
}


class Writer:
    """Appends groups to a store, rolling to a new ledger every LEDGER_ENTRIES entries."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.ledger_id = 1
        self.next_entry = 0
        self.entries = 0
        self.latencies: list[float] = []

    def group(self, size: int) -> None:
        if self.next_entry + size > LEDGER_ENTRIES:
            self.ledger_id += 1
            self.next_entry = 0
        payloads = [PAYLOADS[(self.entries + i) % len(PAYLOADS)] for i in range(size)]
        t0 = time.perf_counter()
        self.store.append_group(self.ledger_id, self.next_entry, payloads, CURSOR)
        self.latencies.append(time.perf_counter() - t0)
        self.next_entry += size
        self.entries += size


def spin(seconds: float, duty: float = 1.0, period: float = 0.002) -> float:
    """Iterations per wall-clock second of a pure-Python loop (stand-in for the event loop).

    duty=1.0: the loop never blocks (saturated event loop). duty<1: it spins for
    duty*period and then sleeps (blocks, releasing the GIL) for the rest of the period,
    like an event loop waiting in epoll.
    """
    n = 0
    t0 = time.perf_counter()
    end = t0 + seconds
    now = t0
    while now < end:
        busy_until = now + duty * period if duty < 1.0 else end
        while True:
            for _ in range(100):
                n += 1
            now = time.perf_counter()
            if now >= busy_until:
                break
        if duty < 1.0:
            time.sleep((1.0 - duty) * period)
            now = time.perf_counter()
    return n / (time.perf_counter() - t0)


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def bench_append(kind: str, mode: str, group: int, seconds: float, base: str) -> dict:
    d = tempfile.mkdtemp(prefix=f"{kind}-{mode}-g{group}-", dir=base)
    store = FACTORIES[kind](d, mode == "b")
    try:
        w = Writer(store)
        t0 = time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            w.group(group)
        elapsed = time.perf_counter() - t0
        res = {
            "eps": w.entries / elapsed,
            "mbps": w.entries * ENTRY_SIZE / elapsed / 1e6,
            "p50_ms": statistics.median(w.latencies) * 1e3,
            "p99_ms": pct(w.latencies, 0.99) * 1e3,
        }
        if group > 1:  # tailing reader: random 100-entry ranges in the current ledger
            hi = w.next_entry - READ_RANGE
            times = []
            rng = random.Random(1)
            t_end = time.perf_counter() + min(1.0, seconds)
            while hi >= 0 and time.perf_counter() < t_end and len(times) < 500:
                first = rng.randint(0, hi)
                t = time.perf_counter()
                got = store.read_range(w.ledger_id, first, READ_RANGE)
                times.append(time.perf_counter() - t)
                assert len(got) == READ_RANGE and len(got[0]) == ENTRY_SIZE, (kind, len(got))
            res["read_ms"] = statistics.median(times) * 1e3 if times else float("nan")
        return res
    finally:
        store.close()
        shutil.rmtree(d, ignore_errors=True)


def bench_delete(kind: str, mode: str, entries: int, max_fill_s: float, base: str) -> dict:
    d = tempfile.mkdtemp(prefix=f"{kind}-{mode}-del-", dir=base)
    store = FACTORIES[kind](d, mode == "b")
    try:
        t0 = time.perf_counter()
        n = 0
        while n < entries and time.perf_counter() - t0 < max_fill_s:
            size = min(500, entries - n)
            store.append_group(1, n, PAYLOADS[:1] * size, CURSOR)
            n += size
        fill_s = time.perf_counter() - t0
        store.append_group(2, 0, PAYLOADS[:1] * 100, CURSOR)  # a live ledger next to it
        os.sync()  # start the delete with clean page cache state for every store
        t = time.perf_counter()
        store.delete_ledger(1)
        delete_s = time.perf_counter() - t
        assert len(store.read_range(2, 0, READ_RANGE)) == READ_RANGE
        return {"entries": n, "fill_mbps": n * ENTRY_SIZE / fill_s / 1e6, "delete_s": delete_s}
    finally:
        store.close()
        shutil.rmtree(d, ignore_errors=True)


def bench_gil(
    kind: str,
    mode: str,
    group: int,
    rate: float,
    seconds: float,
    baseline: float,
    duty: float,
    base: str,
) -> dict:
    """Worker thread appends at `rate` entries/s while the main thread spins."""
    d = tempfile.mkdtemp(prefix=f"{kind}-{mode}-gil-", dir=base)
    store = FACTORIES[kind](d, mode == "b")
    stop = threading.Event()
    w = Writer(store)

    def worker() -> None:
        interval = group / rate
        nxt = time.perf_counter()
        while not stop.is_set():
            w.group(group)
            nxt += interval
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)

    try:
        th = threading.Thread(target=worker, daemon=True)
        t0 = time.perf_counter()
        th.start()
        spun = spin(seconds, duty)
        stop.set()
        th.join()
        elapsed = time.perf_counter() - t0
        return {
            "slowdown_pct": max(0.0, (1 - spun / baseline) * 100),
            "worker_eps": w.entries / elapsed,
            "worker_p99_ms": pct(w.latencies, 0.99) * 1e3,
        }
    finally:
        store.close()
        shutil.rmtree(d, ignore_errors=True)


def fmt(v: float, nd: int = 0) -> str:
    if v != v:  # nan
        return "-"
    return f"{v:,.{nd}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="append run per configuration")
    p.add_argument("--gil-seconds", type=float, default=3.0, help="GIL test per configuration")
    p.add_argument("--rate", type=float, default=5000.0, help="worker append rate (entries/s)")
    p.add_argument("--delete-entries", type=int, default=LEDGER_ENTRIES)
    p.add_argument("--max-fill-seconds", type=float, default=15.0)
    p.add_argument("--stores", default=",".join(FACTORIES), help="comma-separated subset")
    p.add_argument("--modes", default="a,b")
    p.add_argument("--duty", type=float, default=0.5, help="busy fraction, 2nd GIL test")
    p.add_argument("--switch-interval", type=float, default=0.0, help="sys.setswitchinterval")
    p.add_argument("--dir", default=None, help="parent directory for temp data (default: TMP)")
    args = p.parse_args()

    kinds = [k for k in args.stores.split(",") if k]
    modes = [m for m in args.modes.split(",") if m]
    base = tempfile.mkdtemp(prefix="storage-choice-", dir=args.dir)
    started = time.perf_counter()
    print(
        f"python {platform.python_version()} sqlite {sqlite3.sqlite_version} "
        f"nproc {os.cpu_count()} dir {base}",
        file=sys.stderr,
    )
    try:
        if args.switch_interval:
            sys.setswitchinterval(args.switch_interval)
        duties = (1.0, args.duty)
        base0 = {d: spin(args.gil_seconds, d) for d in duties}
        results: dict[tuple[str, str], dict] = {}
        for kind in kinds:
            for mode in modes:
                r: dict = {}
                for g in (1, 20):
                    r[g] = bench_append(kind, mode, g, args.seconds, base)
                    print(f"{kind} {mode} g={g}: {r[g]}", file=sys.stderr)
                if mode == "b" or "b" not in modes:
                    r["del"] = bench_delete(
                        kind, mode, args.delete_entries, args.max_fill_seconds, base
                    )
                    print(f"{kind} {mode} delete: {r['del']}", file=sys.stderr)
                results[(kind, mode)] = r
        base1 = {d: spin(args.gil_seconds, d) for d in duties}
        for d in duties:
            print(
                f"spin baseline duty={d}: {base0[d]:,.0f} / {base1[d]:,.0f} it/s", file=sys.stderr
            )
        for kind in kinds:
            for mode in modes:
                for d in duties:
                    baseline = (base0[d] + base1[d]) / 2
                    gil = bench_gil(kind, mode, 20, args.rate, args.gil_seconds, baseline, d, base)
                    results[(kind, mode)][("gil", d)] = gil
                    print(f"{kind} {mode} gil duty={d}: {gil}", file=sys.stderr)
    finally:
        shutil.rmtree(base, ignore_errors=True)

    print(
        f"\nEntry {ENTRY_SIZE} B, cursor {CURSOR_SIZE} B rewritten per group; "
        f"{args.seconds:g} s per append run; GIL test: worker appends groups of 20 at "
        f"{args.rate:,.0f} entries/s for {args.gil_seconds:g} s while the main thread runs a "
        f"Python loop either saturated (100% busy) or {args.duty:.0%} busy (spins, then "
        f"sleeps, every 2 ms); cells are main-thread slowdown % / entries/s the worker "
        f"achieved; GIL switch interval {sys.getswitchinterval() * 1e3:g} ms.\n"
    )
    print(
        "| store | mode | G=1 entries/s | G=1 MB/s | G=20 entries/s | G=20 MB/s "
        "| G=20 commit p50/p99 ms | read 100 entries ms | delete 50k-entry ledger s "
        f"| GIL: 100% busy loop | GIL: {args.duty:.0%} busy loop |"
    )
    print("|" + "---|" * 11)
    for kind in kinds:
        for mode in modes:
            r = results[(kind, mode)]
            name = _NAMES[kind]
            dl = r.get("del")
            dcell = "(see b)"
            if dl:
                dcell = fmt(dl["delete_s"], 3)
                if dl["entries"] != args.delete_entries:
                    dcell += f" ({dl['entries']:,} entries)"
            print(
                f"| {name} | {MODE_LABEL[mode]} | {fmt(r[1]['eps'])} | {fmt(r[1]['mbps'], 1)} "
                f"| {fmt(r[20]['eps'])} | {fmt(r[20]['mbps'], 1)} "
                f"| {fmt(r[20]['p50_ms'], 2)} / {fmt(r[20]['p99_ms'], 1)} "
                f"| {fmt(r[20].get('read_ms', float('nan')), 2)} | {dcell} "
                + "".join(
                    f"| {fmt(g['slowdown_pct'], 1)} % / {fmt(g['worker_eps'])} "
                    for g in (r[("gil", d)] for d in duties)
                )
                + "|"
            )
    print(f"\nTotal wall time {time.perf_counter() - started:.0f} s", file=sys.stderr)


_NAMES = {
    "sqlite": "SQLite (4K pages)",
    "sqlite16k": "SQLite (16K pages)",
    "lmdb": "LMDB",
    "rocksdb": "RocksDB (rocksdict)",
    "segments": "Segment files",
}


if __name__ == "__main__":
    main()
