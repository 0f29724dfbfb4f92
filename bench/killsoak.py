"""Kill -9 soak: a standalone broker is killed with SIGKILL and restarted, again and again,
while SDK producers and consumers keep working; then every promise the broker made is checked.

Why: the product's acceptance suites run "kill -9 cycles" and require that no receipted
message is lost and that an ack stays acked once its AckReceipt was sent. Unit and e2e tests
run one or two kills; this runs many, at random moments, on several subscription types.

Setup: one standalone broker process (``python -m pulsar_grpc.cli.main standalone``) on a fixed
port and data directory, so clients reconnect to the address they had. Topics: a non-
partitioned one and a 3-partition one (created through the admin REST API). On each, batching
producers (one keyed with key-based batching, one unkeyed) send numbered payloads, and
subscriptions of each type (Exclusive, Failover with 2 consumers, Shared with 2, Key_Shared
with 2) receive. Each delivered message is, at random: acked with ``wait=True`` (the broker's
AckReceipt), acked without waiting (grouped), or never acked. Each cycle: traffic for a random
while, SIGKILL, a random outage, restart on the same port and data directory, then wait until
every producer got a receipt and every subscription a delivery again.

Checks (each failure is a violation; the exit status is 1 if there is any):

a. every payload whose send resolved (receipted) is in the topic (a reader from earliest),
   unless it is before the first entry kept in its partition (ledgers every subscription
   consumed are trimmed, as in Pulsar without retention; check d covers those; with
   ``--retain`` an unread subscription keeps them all);
b. with ``--dedup`` (brokerDeduplicationEnabled=true), each stored payload is stored once;
c. a message id whose ack receipt arrived is never delivered again to that subscription
   (during the soak, after a restart, or when the subscription is drained at the end);
d. every receipted payload reaches every subscription, and every delivered message that was
   never acked is delivered again when the subscription is drained;
e. the application sees no exception except a send ``Timeout`` (counted) and, for an ack
   awaiting its receipt on a stream that was lost, ``ConnectError``/``Timeout`` (counted: the
   SDK says the ack may or may not have been applied);
f. the broker always restarts (ready line within the timeout), and its log has no
   ``Traceback`` and no ERROR line.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.killsoak --cycles 20 --data /tmp/soak \\
        [--dedup] [--sync] [--retain] [--rate 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

import aiohttp

from pulsar_grpc.client import (
    BatchingType,
    Client,
    ConnectError,
    Consumer,
    ConsumerType,
    MessageId,
    Producer,
    Timeout,
)

READY = re.compile(r"pulsar-grpc standalone ready grpc=grpc://(\S+) http=(\S+)")
LOG_PROBLEM = re.compile(r"Traceback|\bERROR\b|CRITICAL")
PARTITIONS = 3
DRAIN_IDLE_MS = 5000
SUBSCRIPTIONS: tuple[tuple[str, ConsumerType, int], ...] = (
    ("ex", ConsumerType.Exclusive, 1),
    ("fo", ConsumerType.Failover, 2),
    ("sh", ConsumerType.Shared, 2),
    ("ks", ConsumerType.KeyShared, 2),
)


class BrokerDidNotStart(Exception):
    """The standalone broker exited or printed no ready line in time (check f)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Broker:
    """The standalone broker as a child process; each incarnation logs to its own file, so
    the logs can be searched for tracebacks and quoted in findings."""

    def __init__(self, data_dir: Path, log_dir: Path, extra: list[str]) -> None:
        self.data_dir = data_dir
        self.log_dir = log_dir
        self.port = free_port()
        self.extra = extra
        self.http_url = ""
        self.incarnation = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def service_url(self) -> str:
        return f"grpc://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The running incarnation's process id (its RSS and CPU time are measured)."""
        assert self._proc is not None
        return self._proc.pid

    def log_path(self, incarnation: int) -> Path:
        return self.log_dir / f"broker-{incarnation}.log"

    def start(self, timeout_s: float = 60) -> float:
        """Start and wait for the ready line; the seconds it took."""
        self.incarnation += 1
        path = self.log_path(self.incarnation)
        self._log = path.open("wb")
        cmd = [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone",
            "--data", str(self.data_dir),
            "--set", f"grpcServicePort={self.port}", "--set", "webServicePort=0",
            "--log-level", "WARNING", *self.extra,
        ]  # fmt: skip
        started = time.monotonic()
        self._proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        while time.monotonic() - started < timeout_s:
            match = READY.search(path.read_text(errors="replace"))
            if match:
                self.http_url = match.group(2)
                return time.monotonic() - started
            if self._proc.poll() is not None:
                break
            time.sleep(0.05)
        self._proc.kill()
        self._proc.wait()
        raise BrokerDidNotStart(
            f"incarnation {self.incarnation} (exit {self._proc.returncode}):\n"
            + path.read_text(errors="replace")[-3000:]
        )

    def kill9(self) -> None:
        assert self._proc is not None
        self._proc.send_signal(signal.SIGKILL)
        self._proc.wait(10)
        self._close_log()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(20)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def log_problems(self) -> list[str]:
        """``incarnation: line`` for each Traceback/ERROR line of every incarnation's log."""
        found = []
        for n in range(1, self.incarnation + 1):
            for line in self.log_path(n).read_text(errors="replace").splitlines():
                if LOG_PROBLEM.search(line):
                    found.append(f"broker-{n}.log: {line}")
        return found


class AckMode(StrEnum):
    """What the application does with a delivered message."""

    WAIT = "ack with receipt"
    GROUPED = "ack without waiting"
    NONE = "never ack"


@dataclass(frozen=True)
class AckRecord:
    """When an ack with ``wait=True`` was receipted, and by which broker incarnation: a copy
    redelivered by a later incarnation means the ack was lost across the restart; one from
    the same incarnation may have been dispatched before the ack was applied."""

    event: int
    cycle: int
    consumer: str
    delivered_in: int
    receipted_in: int


@dataclass
class SubscriptionRecord:
    """Everything one subscription saw; the checks read it at the end."""

    name: str
    type: ConsumerType
    # message id -> payload, for every delivery of the soak (several deliveries: one entry).
    delivered: dict[MessageId, bytes] = field(default_factory=dict)
    deliveries: int = 0
    ack_attempted: set[MessageId] = field(default_factory=set)
    # message id -> (consumer, broker incarnation) of its latest delivery.
    delivered_by: dict[MessageId, tuple[str, int]] = field(default_factory=dict)
    # message id -> when and where its AckReceipt arrived.
    ack_receipted: dict[MessageId, AckRecord] = field(default_factory=dict)
    ack_wait_failures: Counter[str] = field(default_factory=Counter)
    drained: dict[MessageId, bytes] = field(default_factory=dict)
    last_event: int = 0


@dataclass
class TopicRecord:
    name: str
    partitions: int
    receipted: dict[bytes, MessageId] = field(default_factory=dict)
    dedup_dropped: int = 0
    subscriptions: dict[str, SubscriptionRecord] = field(default_factory=dict)
    stored: Counter[bytes] = field(default_factory=Counter)
    first_stored: dict[int, MessageId] = field(default_factory=dict)
    trimmed: int = 0


class Soak:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.events: Iterator[int] = itertools.count(1)
        self.cycle = 0
        self.violations: list[str] = []
        self.send_timeouts = 0
        self.restart_s: list[float] = []
        self.cycles_done = 0
        self.last_receipt: dict[str, int] = {}
        self.stopping = asyncio.Event()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.broker: Broker | None = None
        run = uuid.uuid4().hex[:6]
        self.topics = [
            TopicRecord(f"persistent://public/default/soak-plain-{run}", 0),
            TopicRecord(f"persistent://public/default/soak-parted-{run}", PARTITIONS),
        ]

    def violation(self, check: str, text: str) -> None:
        line = f"[{check}] cycle {self.cycle}: {text}"
        self.violations.append(line)
        print("VIOLATION", line, flush=True)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # ---------------------------------------------------------------- producing

    async def produce(self, producer: Producer, topic: TopicRecord, name: str, keyed: bool) -> None:
        pause = 10 / self.args.rate
        for n in itertools.count():
            if self.stopping.is_set():
                return
            payload = f"{name}:{n}".encode()
            try:
                future = await producer.enqueue(
                    payload, partition_key=f"k{n % 13}" if keyed else None
                )
            except Exception as exc:
                self.violation("e", f"enqueue({payload!r}) raised {exc!r}")
                await asyncio.sleep(0.5)
                continue
            future.add_done_callback(
                functools.partial(self._settled, topic=topic, name=name, payload=payload)
            )
            if n % 10 == 9:
                await asyncio.sleep(pause)

    def _settled(
        self, future: asyncio.Future[MessageId], topic: TopicRecord, name: str, payload: bytes
    ) -> None:
        if future.cancelled():
            self.violation("e", f"send of {payload!r} was cancelled")
            return
        exc = future.exception()
        if isinstance(exc, Timeout):
            self.send_timeouts += 1
        elif exc is not None:
            self.violation("e", f"send of {payload!r} failed: {exc!r}")
        else:
            message_id = future.result()
            if message_id.ledger_id() == -1:
                topic.dedup_dropped += 1
            topic.receipted[payload] = message_id
            self.last_receipt[name] = next(self.events)

    # ---------------------------------------------------------------- consuming

    @property
    def incarnation(self) -> int:
        """The broker incarnation now running (or last killed)."""
        return self.broker.incarnation if self.broker is not None else 0

    async def consume(self, consumer: Consumer, sub: SubscriptionRecord, label: str) -> None:
        while not self.stopping.is_set():
            try:
                msg = await consumer.receive(timeout_ms=500)
            except Timeout:
                continue
            except Exception as exc:
                self.violation("e", f"receive on {sub.name} raised {exc!r}")
                await asyncio.sleep(0.5)
                continue
            message_id = msg.message_id()
            event = next(self.events)
            self._check_not_acked(sub, message_id, msg.data(), f"during the soak to {label}")
            sub.delivered[message_id] = msg.data()
            sub.delivered_by[message_id] = (label, self.incarnation)
            sub.deliveries += 1
            sub.last_event = event
            mode = self.rng.choices(list(AckMode), weights=(5, 4, 1))[0]
            if mode is AckMode.NONE:
                continue
            sub.ack_attempted.add(message_id)
            try:
                if mode is AckMode.GROUPED:
                    await consumer.acknowledge(message_id)
                else:
                    delivery = sub.delivered_by[message_id]
                    self._spawn(self._ack_and_wait(consumer, sub, message_id, delivery))
            except Exception as exc:
                self.violation("e", f"acknowledge({message_id}) on {sub.name} raised {exc!r}")

    async def _ack_and_wait(
        self,
        consumer: Consumer,
        sub: SubscriptionRecord,
        message_id: MessageId,
        delivery: tuple[str, int],
    ) -> None:
        try:
            await consumer.acknowledge(message_id, wait=True)
        except (ConnectError, Timeout) as exc:
            sub.ack_wait_failures[type(exc).__name__] += 1
            return
        except Exception as exc:
            self.violation("e", f"acknowledge({message_id}, wait=True) on {sub.name}: {exc!r}")
            return
        consumer_label, delivered_in = delivery
        sub.ack_receipted[message_id] = AckRecord(
            next(self.events), self.cycle, consumer_label, delivered_in, self.incarnation
        )

    def _check_not_acked(
        self, sub: SubscriptionRecord, message_id: MessageId, payload: bytes, when: str
    ) -> None:
        receipt = sub.ack_receipted.get(message_id)
        if receipt is not None:
            now = self.incarnation
            kind = (
                "ack lost across a restart"
                if now > receipt.receipted_in
                else "same incarnation: the copy may have been dispatched before the ack applied"
            )
            self.violation(
                "c",
                f"{sub.name}: {message_id} ({payload!r}) delivered again {when} (broker "
                f"incarnation {now}) although its AckReceipt arrived in cycle {receipt.cycle} "
                f"(acked copy delivered to {receipt.consumer} by incarnation "
                f"{receipt.delivered_in}, receipt from incarnation {receipt.receipted_in}; {kind})",
            )

    # ---------------------------------------------------------------- the run

    async def run(self, broker: Broker) -> None:
        self.broker = broker
        broker.start()
        parted = self.topics[1]
        await create_partitioned(broker.http_url, parted.name, PARTITIONS)
        backoff = {"max_backoff_interval_ms": self.args.max_backoff_ms}
        async with (
            Client(broker.service_url, **backoff) as pc,
            Client(broker.service_url, **backoff) as cc,
        ):
            consumers = await self._subscribe_all(cc)
            producers: list[Producer] = []
            for topic in self.topics:
                short = topic.name.rsplit("/", 1)[1]
                for keyed in (True, False):
                    name = f"{short}-{'keyed' if keyed else 'plain'}"
                    producer = await pc.create_producer(
                        topic.name,
                        name,
                        batching_type=BatchingType.KeyBased if keyed else BatchingType.Default,
                        block_if_queue_full=True,
                    )
                    producers.append(producer)
                    self._spawn(self.produce(producer, topic, name, keyed))
            for consumer, sub, label in consumers:
                self._spawn(self.consume(consumer, sub, label))
            for cycle in range(1, self.args.cycles + 1):
                self.cycle = cycle
                await asyncio.sleep(self.rng.uniform(1.5, 4.0))
                await asyncio.to_thread(broker.kill9)
                await asyncio.sleep(self.rng.uniform(0.0, 1.5))
                try:
                    self.restart_s.append(await asyncio.to_thread(broker.start))
                except BrokerDidNotStart as exc:
                    self.violation("f", f"broker did not restart: {exc}")
                    break
                await self._wait_for_progress()
                self.cycles_done = self.cycle
                print(f"cycle {self.cycle} done: {self.progress_line()}", flush=True)
            self.cycle += 1  # findings from here on are the drain's
            self.stopping.set()
            await asyncio.wait_for(asyncio.gather(*(p.flush() for p in producers)), 90)
            await asyncio.sleep(0.2)
            if self.tasks:
                await asyncio.wait(list(self.tasks), timeout=60)
            await asyncio.gather(*(c.close() for c, _, _ in consumers))
            for producer in producers:
                await producer.close()
            for topic in self.topics:
                for sub in topic.subscriptions.values():
                    await self._drain(cc, topic, sub)
                await self._read_all(cc, topic)

    async def _subscribe_all(
        self, client: Client
    ) -> list[tuple[Consumer, SubscriptionRecord, str]]:
        consumers = []
        for topic in self.topics:
            if self.args.retain:
                # A subscription nobody reads keeps every ledger, so the final reader sees
                # everything ever stored and check a covers every receipted message.
                await (await client.subscribe(topic.name, "retain-all")).close()
            for name, sub_type, count in SUBSCRIPTIONS:
                sub = SubscriptionRecord(f"{topic.name.rsplit('/', 1)[1]}/{name}", sub_type)
                topic.subscriptions[name] = sub
                for i in range(count):
                    consumer = await client.subscribe(
                        topic.name,
                        name,
                        sub_type,
                        consumer_name=f"{name}-{i}",
                        initial_position="earliest",
                    )
                    consumers.append((consumer, sub, f"{name}-{i}"))
        return consumers

    async def _wait_for_progress(self, timeout_s: float = 90) -> None:
        """After a restart, every producer gets a receipt and every subscription a delivery."""
        mark = next(self.events)
        deadline = time.monotonic() + timeout_s
        subs = [s for t in self.topics for s in t.subscriptions.values()]
        while time.monotonic() < deadline:
            stalled = [n for n, e in self.last_receipt.items() if e < mark]
            stalled += [s.name for s in subs if s.last_event < mark]
            if not stalled:
                return
            await asyncio.sleep(0.1)
        self.violation("e", f"no progress {timeout_s}s after the restart: {stalled}")

    async def _drain(self, client: Client, topic: TopicRecord, sub: SubscriptionRecord) -> None:
        """A fresh consumer on the subscription receives what is left, until idle."""
        short = sub.name.rsplit("/", 1)[1]
        consumer = await client.subscribe(
            topic.name, short, sub.type, consumer_name=f"{short}-drain"
        )
        try:
            while True:
                try:
                    msg = await consumer.receive(timeout_ms=DRAIN_IDLE_MS)
                except Timeout:
                    break
                message_id = msg.message_id()
                self._check_not_acked(sub, message_id, msg.data(), "when draining")
                sub.drained[message_id] = msg.data()
                await consumer.acknowledge(message_id)
        finally:
            await consumer.close()
        never_acked = set(sub.delivered) - sub.ack_attempted - set(sub.drained)
        for message_id in sorted(never_acked)[:20]:
            self.violation(
                "d",
                f"{sub.name}: {message_id} ({sub.delivered[message_id]!r}) was delivered, "
                "never acked, and not delivered again when draining",
            )
        if len(never_acked) > 20:
            self.violation("d", f"{sub.name}: {len(never_acked) - 20} more never-acked lost")
        seen = set(sub.delivered.values()) | set(sub.drained.values())
        missing = sorted(set(topic.receipted) - seen)
        for payload in missing[:20]:
            self.violation(
                "d",
                f"{sub.name}: receipted {payload!r} ({topic.receipted[payload]}) never delivered",
            )
        if len(missing) > 20:
            self.violation("d", f"{sub.name}: {len(missing) - 20} more receipted never delivered")

    async def _read_all(self, client: Client, topic: TopicRecord) -> None:
        reader = await client.create_reader(topic.name, MessageId.earliest)
        try:
            while True:
                try:
                    msg = await reader.read_next(timeout_ms=DRAIN_IDLE_MS)
                except Timeout:
                    break
                topic.stored[msg.data()] += 1
                first = topic.first_stored.setdefault(msg.partition, msg.message_id())
                topic.first_stored[msg.partition] = min(first, msg.message_id())
        finally:
            await reader.close()
        # Ledgers that every subscription consumed are trimmed (no retention, as in Pulsar),
        # so the reader starts at each partition's first kept entry: what is missing before it
        # was trimmed (check d says whether every subscription got it); after it, lost.
        absent = set(topic.receipted) - set(topic.stored)
        topic.trimmed = sum(1 for p in absent if self._before_kept(topic, topic.receipted[p]))
        lost = sorted(p for p in absent if not self._before_kept(topic, topic.receipted[p]))
        for payload in lost[:20]:
            self.violation("a", f"{topic.name}: receipted {payload!r} "
                           f"({topic.receipted[payload]}) is not in the topic")  # fmt: skip
        if len(lost) > 20:
            self.violation("a", f"{topic.name}: {len(lost) - 20} more receipted not stored")
        if self.args.dedup:
            twice = sorted(p for p, n in topic.stored.items() if n > 1)
            for payload in twice[:20]:
                self.violation(
                    "b", f"{topic.name}: {payload!r} stored {topic.stored[payload]} times"
                )
            if len(twice) > 20:
                self.violation("b", f"{topic.name}: {len(twice) - 20} more stored twice")

    @staticmethod
    def _before_kept(topic: TopicRecord, message_id: MessageId) -> bool:
        """Whether an id is before the first entry the reader found in its partition (a
        dedup-dropped resend has no id: it counts as trimmed only if the whole topic was)."""
        first = topic.first_stored.get(message_id.partition())
        if message_id.ledger_id() == -1:
            return not topic.first_stored
        return first is None or message_id[:2] < first[:2]

    def progress_line(self) -> str:
        receipted = sum(len(t.receipted) for t in self.topics)
        deliveries = sum(s.deliveries for t in self.topics for s in t.subscriptions.values())
        return f"receipted={receipted} deliveries={deliveries} violations={len(self.violations)}"

    def summary(self, broker: Broker) -> str:
        lines = [
            f"cycles completed: {self.cycles_done}/{self.args.cycles}",
            f"broker restarts: {len(self.restart_s)}, ready after "
            f"max {max(self.restart_s, default=0):.1f}s",
            f"send timeouts (allowed): {self.send_timeouts}",
        ]
        for topic in self.topics:
            duplicates = sum(n - 1 for n in topic.stored.values() if n > 1)
            lines.append(
                f"{topic.name}: receipted={len(topic.receipted)} "
                f"(dedup-dropped resends {topic.dedup_dropped}) stored={len(topic.stored)} "
                f"(receipted but trimmed, consumed by every subscription: {topic.trimmed}) "
                f"distinct, {duplicates} extra copies"
            )
            for sub in topic.subscriptions.values():
                lines.append(
                    f"  {sub.name} ({sub.type.value}): deliveries={sub.deliveries} "
                    f"acks with receipt={len(sub.ack_receipted)} "
                    f"ack-wait failures={dict(sub.ack_wait_failures)} drained={len(sub.drained)}"
                )
        problems = broker.log_problems()
        lines.append(f"broker log problems: {len(problems)}")
        lines.extend(problems[:40])
        lines.append(f"violations: {len(self.violations)}")
        lines.extend(self.violations[:200])
        return "\n".join(lines)


async def create_partitioned(http_url: str, topic: str, partitions: int) -> None:
    name = topic.removeprefix("persistent://")
    url = f"{http_url}/admin/v2/persistent/{name}/partitions"
    async with (
        aiohttp.ClientSession() as session,
        session.put(url, data=str(partitions), headers={"Content-Type": "application/json"}) as r,
    ):
        if r.status not in (200, 204):
            raise RuntimeError(f"creating {topic}: HTTP {r.status} {await r.text()}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--data", type=Path, required=True, help="emptied first")
    parser.add_argument("--dedup", action="store_true", help="brokerDeduplicationEnabled=true")
    parser.add_argument("--sync", action="store_true", help="journalSyncData=true")
    parser.add_argument("--rate", type=float, default=100, help="messages/s per producer")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--retain", action="store_true", help="an unread subscription keeps every ledger"
    )
    parser.add_argument("--max-backoff-ms", type=int, default=60000)
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    shutil.rmtree(args.data, ignore_errors=True)
    data_dir, log_dir = args.data / "data", args.data / "logs"
    log_dir.mkdir(parents=True)
    extra = ["--set", f"brokerDeduplicationEnabled={str(args.dedup).lower()}"]
    extra += ["--set", f"journalSyncData={str(args.sync).lower()}"]
    broker = Broker(data_dir, log_dir, extra)
    soak = Soak(args)
    print(f"seed={args.seed} port={broker.port} logs={log_dir}", flush=True)

    def loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        soak.violation("e", f"escaped on the application's loop: {context.get('message')} "
                       f"{context.get('exception')!r}")  # fmt: skip

    async def go() -> None:
        asyncio.get_running_loop().set_exception_handler(loop_error)
        await soak.run(broker)

    try:
        asyncio.run(go())
    except BrokerDidNotStart as exc:
        soak.violation("f", f"broker did not start: {exc}")
    finally:
        broker.stop()
    print(soak.summary(broker), flush=True)
    if broker.log_problems():
        soak.violations.append("broker log problems")
    return 1 if soak.violations else 0


if __name__ == "__main__":
    sys.exit(main())
