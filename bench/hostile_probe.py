"""Hostile-input probe: raw gRPC calls that a broken or malicious client could send, against a
standalone broker, each answered with a status code and message that this script records.

Why: the acceptance suites try a table of hostile inputs; errors a client causes must be clear
errors (INVALID_ARGUMENT, NOT_FOUND, ...), never INTERNAL or UNKNOWN, never a hang, never a
traceback in the broker's log. The calls go through ``channel.unary_unary`` /
``stream_stream`` with identity serializers, so undecodable bytes reach the broker as sent.

What it sends: garbage bytes and empty requests on every RPC; hostile topic names ('.', '..',
unicode, 10 KB, empty, unknown tenant/namespace/domain, odd partition suffixes) on every RPC;
consume metadata with bad values; Flow with 2^32 / 2^64-1 permits (raw varints); acks for
nonexistent ledgers, past the end, with negative-looking ids; seeks to absurd ids and times;
empty and odd produce requests. After each case the broker's log is searched for new
Traceback/ERROR lines. A case is a FINDING when the answer is INTERNAL or UNKNOWN, when a
request that expects an answer gets none in 10 s, or when the broker logged a traceback.

Usage::

    PYTHONPATH=$PWD:$PWD/protos python -m bench.hostile_probe --data /tmp/probe [--json out.json]

Exit status 1 if there is any finding.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import grpc

from bench.killsoak import Broker
from pulsar_grpc.client import Client, MessageId, Timeout
from pulsargrpc.v1 import pulsar_pb2 as pb

SERVICE = "/pulsargrpc.v1.PulsarService/"
ANSWER_S = 10.0
QUIET_S = 1.5
U64 = 2**64 - 1
# grpc-core's own answer, before anything is sent, to a metadata value it cannot carry.
CLIENT_SIDE_METADATA = "Invalid metadata"
Metadata = Sequence[tuple[str, str]]

NAMES: tuple[tuple[str, str], ...] = (
    ("dot", "."),
    ("dotdot", ".."),
    ("full-dot", "persistent://public/default/."),
    ("full-dotdot", "persistent://public/default/.."),
    ("ns-dotdot", "persistent://public/../t"),
    ("tenant-dot", "persistent://./default/t"),
    ("unicode", "persistent://public/default/тема-ü-🔥"),
    ("10KB", "persistent://public/default/" + "x" * 10240),
    ("empty", ""),
    ("domain-only", "persistent://"),
    ("no-local-name", "persistent://public/default/"),
    ("unknown-tenant", "persistent://no-such-tenant/default/t"),
    ("unknown-namespace", "persistent://public/no-such-ns/t"),
    ("bad-domain", "bogus://public/default/t"),
    ("non-persistent", "non-persistent://public/default/t"),
    ("partition-huge", "persistent://public/default/t-partition-99999999999999999999"),
    ("partition-negative", "persistent://public/default/t-partition--1"),
    ("extra-segments", "persistent://public/default/a/b/c"),
    ("space", "persistent://public/default/a b"),
    ("percent-dotdot", "persistent://public/default/%2e%2e"),
    ("trailing-slash", "persistent://public/default/t/"),
)


@dataclass
class Result:
    case: str
    rpc: str
    outcome: str
    findings: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def flow_raw(permits: int) -> bytes:
    """ConsumeRequest{flow: Flow{permits}} with any varint, even past uint32."""
    inner = b"\x08" + varint(permits)
    return b"\x0a" + varint(len(inner)) + inner


def consume_req(**kwargs: object) -> bytes:
    return pb.ConsumeRequest(**kwargs).SerializeToString()  # type: ignore[arg-type]


def mid(ledger: int, entry: int, batch: int = -1, partition: int = -1) -> pb.MessageId:
    return pb.MessageId(ledger_id=ledger, entry_id=entry, batch_index=batch, partition=partition)


def ack(ids: list[pb.MessageId], request_id: int = 7, cumulative: bool = False) -> bytes:
    kind = pb.Cumulative if cumulative else pb.Individual
    return consume_req(ack=pb.Ack(type=kind, ids=ids, request_id=request_id))


def describe(method: str, raw: bytes) -> str:
    cls = pb.ConsumeResponse if method == "Consume" else pb.ProduceResponse
    try:
        message = cls.FromString(raw)
    except Exception as exc:  # the broker sent something undecodable: worth seeing
        return f"undecodable response {exc!r}"
    kind = message.WhichOneof("response")
    if kind == "request_error":
        err = message.request_error
        return f"request_error({pb.ServerError.Name(err.code)}: {err.message[:120]})"
    return str(kind)


class Prober:
    def __init__(self, channel: grpc.aio.Channel, broker: Broker) -> None:
        self.channel = channel
        self.broker = broker
        self.results: list[Result] = []
        self._log_seen = 0

    def _new_log_lines(self) -> list[str]:
        lines = self.broker.log_problems()
        fresh, self._log_seen = lines[self._log_seen :], len(lines)
        return fresh

    def record(self, case: str, rpc: str, outcome: str, findings: list[str]) -> None:
        log = self._new_log_lines()
        if log:
            findings = [*findings, "broker logged Traceback/ERROR"]
        result = Result(case, rpc, outcome, findings, log[:10])
        self.results.append(result)
        flag = "FINDING " + "; ".join(findings) if findings else "ok"
        print(f"{case:42} {rpc:15} {outcome[:170]}  [{flag}]", flush=True)
        for line in log[:5]:
            print("    log:", line[:300], flush=True)

    async def unary(self, case: str, rpc: str, body: bytes, metadata: Metadata = ()) -> None:
        call = self.channel.unary_unary(SERVICE + rpc)
        try:
            raw = await asyncio.wait_for(call(body, metadata=metadata), ANSWER_S)
            self.record(case, rpc, f"OK {len(raw)} bytes", [])
        except TimeoutError:
            self.record(case, rpc, f"no answer in {ANSWER_S}s", ["hang"])
        except grpc.aio.AioRpcError as err:
            self.record(case, rpc, status_text(err), status_findings(err.code()))
        except Exception as exc:  # refused by the client library before sending
            self.record(case, rpc, f"client-side: {exc!r}", [])

    async def stream(
        self,
        case: str,
        rpc: str,
        metadata: Metadata,
        requests: Sequence[bytes],
        expect_answer: bool,
        wait_first: bool = True,
    ) -> None:
        """Open a stream, wait for Ready/Subscribed (``wait_first``), send ``requests``, then
        read: an answer, the stream's end, or silence (a hang if an answer was expected)."""
        call = self.channel.stream_stream(SERVICE + rpc)(metadata=metadata)
        seen: list[str] = []
        try:
            if wait_first:
                first = await asyncio.wait_for(call.read(), ANSWER_S)
                if first is grpc.aio.EOF:
                    await self._ended(case, rpc, call, seen)
                    return
                seen.append(describe(rpc, first))
            for request in requests:
                await call.write(request)
            wait_s = ANSWER_S if expect_answer else QUIET_S
            while True:
                response = await asyncio.wait_for(call.read(), wait_s)
                if response is grpc.aio.EOF:
                    await self._ended(case, rpc, call, seen)
                    return
                seen.append(describe(rpc, response))
                if expect_answer and seen[-1] not in ("messages", "active_consumer_change"):
                    self.record(case, rpc, f"answers {seen}; stream open", [])
                    return
                wait_s = QUIET_S
        except TimeoutError:
            findings = ["no answer (hang)"] if expect_answer else []
            self.record(case, rpc, f"answers {seen}; open, silent {wait_s}s", findings)
        except grpc.aio.AioRpcError as err:
            if err.details() == CLIENT_SIDE_METADATA:
                self.record(case, rpc, "client-side: grpc refuses a non-ASCII metadata value", [])
                return
            self.record(
                case, rpc, f"answers {seen}; {status_text(err)}", status_findings(err.code())
            )
        except Exception as exc:
            if call.done():
                await self._ended(case, rpc, call, seen)
            else:
                self.record(case, rpc, f"client-side: {exc!r}", [])
        finally:
            call.cancel()

    async def _ended(
        self, case: str, rpc: str, call: grpc.aio.StreamStreamCall, seen: list[str]
    ) -> None:
        code = await call.code()
        details = await call.details()
        if details == CLIENT_SIDE_METADATA:
            self.record(case, rpc, "client-side: grpc refuses a non-ASCII metadata value", [])
            return
        self.record(case, rpc, f"answers {seen}; {code.name}: {details}", status_findings(code))


def status_text(err: grpc.aio.AioRpcError) -> str:
    pulsar = dict(err.trailing_metadata() or ()).get("pulsar-error-code")
    return f"{err.code().name}: {err.details()} (pulsar-error-code={pulsar})"


def status_findings(code: grpc.StatusCode) -> list[str]:
    if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
        return [code.name]
    return []


def consume_md(topic: str, sub: str = "probe", **extra: str) -> list[tuple[str, str]]:
    md = [("x-pulsar-topic", topic), ("x-pulsar-subscription", sub)]
    md += [("x-pulsar-" + k.replace("_", "-"), v) for k, v in extra.items()]
    return md


async def probe_names(p: Prober) -> None:
    for label, name in NAMES:
        case = f"name:{label}"
        await p.unary(case, "Lookup", pb.LookupRequest(topic=name).SerializeToString())
        body = pb.PartitionedTopicMetadataRequest(topic=name).SerializeToString()
        await p.unary(case, "GetPartitionedTopicMetadata", body)
        body = pb.GetLastMessageIdRequest(topic=name).SerializeToString()
        await p.unary(case, "GetLastMessageId", body)
        await p.stream(case, "Produce", [("x-pulsar-topic", name)], [], expect_answer=False)
        await p.stream(case, "Consume", consume_md(name), [], expect_answer=False)


async def probe_garbage(p: Prober) -> None:
    garbage = [("garbage", b"\xff\xff\xff\xff\x0f"), ("truncated", b"\x0a\x05\x08"),
               ("wrong-wire-type", b"\x0d\x00\x00")]  # fmt: skip
    topic = "persistent://public/default/probe-garbage"
    for label, body in garbage:
        for rpc in ("Lookup", "GetPartitionedTopicMetadata", "GetLastMessageId"):
            await p.unary(f"{label}-bytes", rpc, body)
        await p.stream(f"{label}-bytes", "Produce", [("x-pulsar-topic", topic)], [body], True)
        await p.stream(f"{label}-bytes", "Consume", consume_md(topic), [body], True)
    for rpc in ("Lookup", "GetPartitionedTopicMetadata", "GetLastMessageId"):
        await p.unary("empty-request", rpc, b"")
    await p.stream("no-metadata", "Produce", [], [], expect_answer=True, wait_first=False)
    await p.stream("no-metadata", "Consume", [], [], expect_answer=True, wait_first=False)
    await p.stream("no-subscription", "Consume", [("x-pulsar-topic", topic)], [], True, False)


async def probe_consume_metadata(p: Prober) -> None:
    topic = "persistent://public/default/probe-md"
    bad: list[tuple[str, dict[str, str]]] = [
        ("sub-type-bogus", {"subscription_type": "Bogus"}),
        ("initial-position-middle", {"initial_position": "Middle"}),
        ("priority-abc", {"priority_level": "abc"}),
        ("priority-negative", {"priority_level": "-1"}),
        ("priority-huge", {"priority_level": "99999999999999999999999"}),
        ("durable-maybe", {"durable": "maybe"}),
        ("start-id-garbage", {"durable": "false", "start_message_id": "a:b:c"}),
        ("start-id-5-parts", {"durable": "false", "start_message_id": "1:2:3:4:5"}),
        ("start-id-huge", {"durable": "false", "start_message_id": f"{U64}:{U64}"}),
        ("start-id-negative", {"durable": "false", "start_message_id": "-5:-5"}),
        ("start-inclusive-bogus", {"durable": "false", "start_message_id_inclusive": "x"}),
        ("ack-timeout-negative", {"ack_timeout_ms": "-1"}),
        ("ack-timeout-huge", {"ack_timeout_ms": "1e99"}),
        ("nack-delay-negative", {"negative_ack_delay_ms": "-100"}),
        ("max-redeliver-negative", {"max_redeliver_count": "-3"}),
        ("max-redeliver-abc", {"max_redeliver_count": "abc"}),
        ("dlq-dotdot", {"max_redeliver_count": "2", "dead_letter_topic": ".."}),
        ("dlq-unknown-tenant", {"max_redeliver_count": "2",
                                "dead_letter_topic": "persistent://nope/nope/dlq"}),
        ("consumer-name-10KB", {"consumer_name": "c" * 10240}),
    ]  # fmt: skip
    for label, extra in bad:
        await p.stream(
            f"md:{label}", "Consume", consume_md(topic, f"s-{label}", **extra), [], False
        )
    await p.stream("md:sub-empty", "Consume", consume_md(topic, ""), [], False)
    await p.stream("md:sub-slash", "Consume", consume_md(topic, "a/../b"), [], False)
    await p.stream("md:sub-10KB", "Consume", consume_md(topic, "s" * 10240), [], False)
    produce = [("producer-name-empty", ""), ("producer-name-10KB", "p" * 10240)]
    for label, name in produce:
        md = [("x-pulsar-topic", topic), ("x-pulsar-producer-name", name)]
        await p.stream(f"md:{label}", "Produce", md, [], False)


async def probe_consume_requests(p: Prober, topic: str, last: MessageId) -> None:
    """``topic`` holds messages up to ``last``; each case uses its own subscription."""
    ledger, entry = last.ledger_id(), last.entry_id()
    cases: list[tuple[str, bytes, bool]] = [
        ("empty-consume-request", b"", True),
        ("flow-2^32-1", flow_raw(2**32 - 1), False),
        ("flow-2^32 (raw varint)", flow_raw(2**32), False),
        ("flow-2^64-1 (raw varint, '-1')", flow_raw(U64), False),
        ("flow-zero", flow_raw(0), False),
        ("ack-unknown-ledger", ack([mid(987654321, 0)]), True),
        ("ack-ledger-2^64-1", ack([mid(U64, U64)]), True),
        ("ack-past-end", ack([mid(ledger, entry + 5)]), True),
        ("ack-cumulative-past-end", ack([mid(ledger, entry + 100)], cumulative=True), True),
        ("ack-batch-index-negative", ack([mid(ledger, entry, -5)]), True),
        ("ack-batch-index-huge", ack([mid(ledger, entry, 2**31 - 1)]), True),
        ("ack-partition-99", ack([mid(ledger, entry, -1, 99)]), True),
        ("ack-no-ids", ack([]), True),
        ("ack-10000-ids", ack([mid(987654321, i) for i in range(10000)]), True),
        ("ack-no-request-id-unknown", ack([mid(987654321, 0)], request_id=0), False),
        ("nack-unknown", consume_req(negative_ack=pb.NegativeAck(ids=[mid(U64, 1)])), False),
        ("seek-no-target", consume_req(seek=pb.Seek(request_id=9)), True),
        ("seek-ledger-2^64-1", consume_req(seek=pb.Seek(message_id=mid(U64, U64), request_id=9)),
         True),
        ("seek-past-end", consume_req(seek=pb.Seek(message_id=mid(ledger, entry + 1000),
                                                   request_id=9)), True),
        ("seek-unknown-ledger", consume_req(seek=pb.Seek(message_id=mid(987654321, 3),
                                                         request_id=9)), True),
        ("seek-time-2^64-1", consume_req(seek=pb.Seek(publish_time=U64, request_id=9)), True),
        ("seek-time-zero", consume_req(seek=pb.Seek(publish_time=0, request_id=9)), True),
        ("redeliver-request-0", consume_req(redeliver=pb.RedeliverUnacknowledged()), False),
        ("unsubscribe", consume_req(unsubscribe=pb.Unsubscribe(request_id=3)), True),
    ]  # fmt: skip
    for label, body, expect in cases:
        md = consume_md(topic, f"s-{label.split()[0]}", initial_position="Earliest")
        await p.stream(f"consume:{label}", "Consume", md, [body], expect)
    md = consume_md(topic, "s-shared-cumulative", subscription_type="Shared")
    await p.stream("consume:cumulative-on-shared", "Consume", md,
                   [ack([mid(ledger, entry)], cumulative=True)], True)  # fmt: skip


async def probe_produce_requests(p: Prober) -> None:
    topic = "persistent://public/default/probe-produce"
    big = pb.MessageData(payload=b"x" * (6 * 1024 * 1024))
    huge_key = pb.MessageData(payload=b"x", key="k" * (1024 * 1024))
    cases: list[tuple[str, bytes]] = [
        ("empty-produce-request", b""),
        ("no-messages", pb.ProduceRequest(sequence_id=5).SerializeToString()),
        ("sequence-2^64-1", pb.ProduceRequest(sequence_id=U64,
                                              messages=[pb.MessageData(payload=b"a")]
                                              ).SerializeToString()),
        ("6MB-message", pb.ProduceRequest(sequence_id=1, messages=[big]).SerializeToString()),
        ("1MB-key", pb.ProduceRequest(sequence_id=2, messages=[huge_key]).SerializeToString()),
        ("100k-empty-messages", pb.ProduceRequest(
            sequence_id=3, messages=[pb.MessageData()] * 100000).SerializeToString()),
    ]  # fmt: skip
    for label, body in cases:
        md = [("x-pulsar-topic", topic), ("x-pulsar-producer-name", f"p-{label}")]
        await p.stream(f"produce:{label}", "Produce", md, [body], True)


async def still_delivers_after(
    p: Prober, client: Client, label: str, request: Callable[[MessageId], bytes], keeps: bool
) -> None:
    """Behaviour, not status: after a hostile request on a subscription (sent raw), messages
    published next still reach it. The topic holds b"before"; then b"after-1", b"after-2"
    are published and a fresh SDK consumer on the subscription must receive both, and also
    b"before" when the request (``keeps``) should not have acked it."""
    topic = f"persistent://public/default/probe-behaviour-{label}"
    producer = await client.create_producer(topic)
    last = await producer.send(b"before")
    md = consume_md(topic, "s", initial_position="Earliest")
    call = p.channel.stream_stream(SERVICE + "Consume")(metadata=md)
    answers: list[str] = []
    try:
        await asyncio.wait_for(call.read(), ANSWER_S)
        await call.write(request(last))
        while not answers or answers[-1] in ("active_consumer_change", "messages"):
            response = await asyncio.wait_for(call.read(), ANSWER_S)
            if response is grpc.aio.EOF:
                answers.append(f"ended {(await call.code()).name}")
                break
            answers.append(describe("Consume", response))
    except (TimeoutError, grpc.aio.AioRpcError) as exc:
        answers.append(f"{type(exc).__name__}")
    finally:
        call.cancel()
    for payload in (b"after-1", b"after-2"):
        await producer.send(payload)
    await producer.close()
    received: list[bytes] = []
    async with await client.subscribe(topic, "s", initial_position="earliest") as consumer:
        while True:
            try:
                received.append((await consumer.receive(timeout_ms=3000)).data())
            except Timeout:
                break
    wanted = (b"before", b"after-1", b"after-2") if keeps else (b"after-1", b"after-2")
    missing = [m for m in wanted if m not in received]
    findings = [f"never delivered: {missing}"] if missing else []
    p.record(f"behaviour:{label}", "Consume+SDK", f"answers {answers}; received {received}",
             findings)  # fmt: skip


def _seek_to(message_id: pb.MessageId) -> bytes:
    return consume_req(seek=pb.Seek(message_id=message_id, request_id=9))


BEHAVIOUR: tuple[tuple[str, Callable[[MessageId], bytes], bool], ...] = (
    ("ack-next-entries", lambda m: ack([mid(m.ledger_id(), m.entry_id() + 1),
                                        mid(m.ledger_id(), m.entry_id() + 2)]), True),
    ("batch-ack-next-entry", lambda m: ack([mid(m.ledger_id(), m.entry_id() + 1, 0)]), True),
    ("ack-2^64-1", lambda m: ack([mid(U64, U64)]), True),
    ("ack-next-ledger", lambda m: ack([mid(m.ledger_id() + 1, 0)]), True),
    ("batch-index-out-of-range", lambda m: ack([mid(m.ledger_id(), m.entry_id(), 5)]), True),
    ("batch-index-2^31-1", lambda m: ack([mid(m.ledger_id(), m.entry_id(), 2**31 - 1)]), True),
    ("seek-past-end", lambda m: _seek_to(mid(m.ledger_id(), m.entry_id() + 1000)), False),
    ("seek-ledger-2^64-1", lambda m: _seek_to(mid(U64, 0)), False),
    ("seek-time-2^64-1", lambda m: consume_req(seek=pb.Seek(publish_time=U64, request_id=9)),
     False),
)  # fmt: skip


async def reader_past_end(p: Prober, client: Client) -> None:
    """A reader whose start id is past the end gets what is published next (Pulsar clamps)."""
    topic = "persistent://public/default/probe-reader-past-end"
    producer = await client.create_producer(topic)
    last = await producer.send(b"before")
    start = MessageId(
        ledger_id=last.ledger_id(), entry_id=last.entry_id() + 1000, batch_index=-1, partition=-1
    )
    async with await client.create_reader(topic, start) as reader:
        await producer.send(b"after")
        try:
            got = (await reader.read_next(timeout_ms=5000)).data()
            p.record("behaviour:reader-start-past-end", "SDK", f"read {got!r}", [])
        except Timeout:
            p.record("behaviour:reader-start-past-end", "SDK", "nothing in 5s",
                     ["later messages never delivered"])  # fmt: skip
    await producer.close()


async def run(broker: Broker) -> list[Result]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{broker.port}") as channel:
        prober = Prober(channel, broker)
        async with Client(broker.service_url) as client:
            topic = "persistent://public/default/probe-acks"
            producer = await client.create_producer(topic)
            last = await producer.send(b"only")
            await producer.close()
            await probe_garbage(prober)
            await probe_names(prober)
            await probe_consume_metadata(prober)
            await probe_consume_requests(prober, topic, last)
            await probe_produce_requests(prober)
            for label, request, keeps in BEHAVIOUR:
                await still_delivers_after(prober, client, label, request, keeps)
            await reader_past_end(prober, client)
            # Still serving?
            producer = await client.create_producer("probe-alive")
            await asyncio.wait_for(producer.send(b"alive"), 10)
            prober.record("broker-still-serving", "Produce", "OK", [])
        return prober.results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, required=True, help="emptied first")
    parser.add_argument("--json", type=Path, default=None, help="write every result here")
    args = parser.parse_args()
    shutil.rmtree(args.data, ignore_errors=True)
    (args.data / "logs").mkdir(parents=True)
    broker = Broker(args.data / "data", args.data / "logs", [])
    broker.start()
    try:
        results = asyncio.run(run(broker))
    finally:
        broker.stop()
    findings = [r for r in results if r.findings]
    print(f"\n{len(results)} cases, {len(findings)} findings")
    for r in findings:
        print(f"FINDING {r.case} {r.rpc}: {r.outcome[:300]} -- {'; '.join(r.findings)}")
    if args.json is not None:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
