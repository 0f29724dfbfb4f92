"""`pulsar-grpc perf`: throughput and latency of a broker, in the spirit of pulsar-perf.

``produce`` / ``consume`` load a running broker; ``e2e`` runs producers and consumers at once
and measures publish -> receive; ``ceiling`` measures a bare grpc.aio stream with the same
batching and no broker behind it; ``all`` starts its own standalone broker (and the bare
server) as child processes, so the broker and the load each get a core, and reports
everything in one table; ``cluster`` starts ZooKeeper, PostgreSQL and 1, 2, 4 brokers and
measures how throughput scales and how long an unload or a kill blocks clients.
Progress lines go to stderr, the summary (table or --json) to stdout.

Modules: ``spec`` (settings), ``stats`` (recorder, HDR histograms, budget, pacing), ``load``
(SDK producers and consumers), ``raw`` (hand-driven streams, the bare server), ``procs``
(child processes), ``report`` (machine, table, plot), ``cluster``, ``servers`` and ``blocked``
(the cluster benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

import grpc

from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.cli.perf.load import STAMP_BYTES, consume_sdk, e2e, produce_sdk
from pulsar_grpc.cli.perf.procs import ceiling_server, standalone
from pulsar_grpc.cli.perf.raw import consume_raw, produce_raw
from pulsar_grpc.cli.perf.report import machine, plot, table
from pulsar_grpc.cli.perf.spec import LoadSpec
from pulsar_grpc.cli.perf.stats import Recorder
from pulsar_grpc.client.exceptions import PulsarException

Runner = Callable[[LoadSpec, Recorder], Coroutine[Any, Any, None]]
MODES: dict[str, tuple[str, ...]] = {
    "page-cache": (),
    "fsync": ("--set", "journalSyncData=true"),
}
SUBSCRIPTION_TYPES = ("Exclusive", "Shared", "Failover", "Key_Shared")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("perf", help="measure throughput and latency (like pulsar-perf)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    produce = verbs.add_parser("produce", help="produce to a running broker")
    _add_load_flags(produce, topic=True)
    produce.add_argument(
        "--raw", action="store_true", help="hand-built ProduceRequests, one stream each, no SDK"
    )
    consume = verbs.add_parser("consume", help="consume (and ack) from a running broker")
    _add_load_flags(consume, topic=True)
    _add_consumer_flags(consume)
    consume.add_argument(
        "--raw", action="store_true", help="hand-driven Consume streams (permits, acks), no SDK"
    )
    both = verbs.add_parser(
        "e2e", help="producers and consumers at once; end-to-end latency publish -> receive"
    )
    _add_load_flags(both, topic=True)
    _add_consumer_flags(both)
    ceiling = verbs.add_parser("ceiling", help="a bare grpc.aio stream, same batching, no broker")
    _add_load_flags(ceiling, topic=False)
    everything = verbs.add_parser(
        "all", help="start a standalone broker; ceiling, produce, consume, latency; one table"
    )
    _add_load_flags(everything, topic=False)
    everything.add_argument(
        "--latency-rate", type=float, default=50_000, help="msg/s of the fixed-rate latency run"
    )
    everything.add_argument(
        "--sync", action="store_true", help="also run with journalSyncData=true (fsync)"
    )
    from pulsar_grpc.cli.perf import cluster  # it builds on this module's helpers

    cluster.add_parser(verbs)
    p.set_defaults(run=run)


def _add_load_flags(p: argparse.ArgumentParser, topic: bool) -> None:
    if topic:
        add_connection_args(p, [UrlFlag.SERVICE, UrlFlag.ADMIN])
        p.add_argument("--topic", "-t", default="perf", help="a topic, or the base of --topics N")
        p.add_argument(
            "--topics",
            metavar="N|T1,T2",
            help="N topics named <topic>-0..N-1, or a comma list of topics",
        )
        p.add_argument(
            "--partitions",
            type=int,
            default=0,
            help="create each topic with N partitions first (admin HTTP); 0 = as it is",
        )
        p.add_argument("--rate", "-r", type=float, default=0, help="msg/s, 0 = as fast as possible")
        p.add_argument("--plot", metavar="FILE.png", help="draw throughput and latency over time")
    p.add_argument("--size", type=int, default=100, help="payload bytes (default 100)")
    p.add_argument("--batch", type=int, default=100, help="messages per batch (default 100)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--messages", "-m", type=int, default=0, help="messages per run")
    budget.add_argument("--duration", "-d", type=float, default=0, help="seconds per run")
    p.add_argument("--producers", "-p", type=int, default=1, help="producers per topic")
    p.add_argument(
        "--max-pending", type=int, default=10_000, help="messages in flight per producer"
    )
    p.add_argument(
        "--batch-delay-ms", type=float, default=1.0, help="SDK batching_max_publish_delay_ms"
    )
    p.add_argument("--interval", type=float, default=2.0, help="seconds between stats lines")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _add_consumer_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--subscription", "-s", default="perf-sub", help="subscription name (default perf-sub)"
    )
    p.add_argument(
        "--subscription-type",
        choices=SUBSCRIPTION_TYPES,
        help="default: Exclusive with one consumer per topic, Shared with more",
    )
    p.add_argument("--consumers", "-c", type=int, default=1, help="consumers per topic")
    p.add_argument(
        "--receiver-queue", type=int, default=10_000,
        help="messages each consumer prefetches (default 10000)",
    )  # fmt: skip
    p.add_argument(
        "--idle-timeout", type=float, default=10.0, help="stop after this long without a message"
    )


def run(args: argparse.Namespace) -> int:
    if args.verb == "cluster":
        from pulsar_grpc.cli.perf import cluster

        return cluster.run(args)
    problem = _check(args)
    if problem:
        print(f"pulsar-grpc perf: {problem}", file=sys.stderr)
        return 2
    try:
        return _run_load(args)
    except PulsarException as exc:  # the broker refused the run: credentials, permissions...
        print(f"pulsar-grpc perf: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except grpc.RpcError as exc:  # the same, on a --raw run's hand-driven streams
        print(f"pulsar-grpc perf: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1


def _run_load(args: argparse.Namespace) -> int:
    """The measurement the verb names (its flags checked already)."""
    if args.verb == "all":
        return _run_all(args)
    if args.verb == "ceiling":
        spec = _spec(args, "", ("ceiling",))
        with ceiling_server() as url:
            result, rec = _measure("ceiling", produce_raw, replace(spec, service_url=url))
        return _finish(args, [result], [rec], ok=_ok(result))
    try:
        spec = _credentials(args, _spec(args, args.service_url, _topics(args)))
    except ValueError as exc:  # --auth-params (or the client.conf's) that do not parse
        print(f"pulsar-grpc perf: {exc}", file=sys.stderr)
        return 2
    if args.partitions:
        authorization = dict(spec.authorization()).get("authorization")
        for topic in spec.topics:
            create_partitioned_topic(args.admin_url, topic, args.partitions, authorization)
    if args.verb == "e2e":
        return _run_e2e(args, spec)
    raw = "raw" if args.raw else ""
    runners: dict[tuple[str, str], Runner] = {
        ("produce", ""): produce_sdk,
        ("produce", "raw"): produce_raw,
        ("consume", ""): consume_sdk,
        ("consume", "raw"): consume_raw,
    }
    result, rec = _measure(f"{args.verb} {raw}".strip(), runners[args.verb, raw], spec)
    return _finish(args, [result], [rec], ok=_ok(result))


def _check(args: argparse.Namespace) -> str:
    """What is wrong with the flags, or ''."""
    if args.size < 1 or args.batch < 1 or args.producers < 1 or args.max_pending < args.batch:
        return "--size, --batch, --producers must be >= 1 and --max-pending >= --batch"
    if getattr(args, "consumers", 1) < 1 or getattr(args, "partitions", 0) < 0:
        return "--consumers must be >= 1 and --partitions >= 0"
    if getattr(args, "raw", False) and args.partitions:
        return "--raw streams go to one topic each: list the partitions with --topics instead"
    if args.verb == "e2e" and args.size < STAMP_BYTES:
        return f"e2e payloads carry an {STAMP_BYTES}-byte send time: --size must be >= 8"
    if getattr(args, "subscription_type", None) == "Exclusive" and args.consumers > 1:
        return "an Exclusive subscription takes one consumer per topic"
    return ""


def _topics(args: argparse.Namespace) -> tuple[str, ...]:
    if args.topics is None:
        return (args.topic,)
    if args.topics.isdigit():
        return tuple(f"{args.topic}-{i}" for i in range(int(args.topics)))
    return tuple(t.strip() for t in args.topics.split(",") if t.strip())


def _spec(args: argparse.Namespace, service_url: str, topics: tuple[str, ...]) -> LoadSpec:
    """The run's settings; with no budget at all, 10 s."""
    consumers = getattr(args, "consumers", 1)
    return LoadSpec(
        service_url=service_url,
        topics=topics,
        size=args.size,
        batch=args.batch,
        messages=args.messages,
        duration=args.duration or (0 if args.messages else 10.0),
        rate=getattr(args, "rate", 0),
        producers=args.producers,
        consumers=consumers,
        partitions=getattr(args, "partitions", 0),
        max_pending=args.max_pending,
        batch_delay_ms=args.batch_delay_ms,
        subscription=getattr(args, "subscription", "perf-sub"),
        subscription_type=getattr(args, "subscription_type", None)
        or ("Exclusive" if consumers == 1 else "Shared"),
        receiver_queue=getattr(args, "receiver_queue", 10_000),
        idle_timeout=getattr(args, "idle_timeout", 10.0),
        interval=args.interval,
    )


def _credentials(args: argparse.Namespace, spec: LoadSpec) -> LoadSpec:
    """The spec with the command's credentials and trust; ValueError if they do not parse."""
    with_them = replace(
        spec,
        auth_plugin=args.auth_plugin,
        auth_params=args.auth_params,
        tls_trust_cert_path=args.tls_trust_cert_path,
    )
    with_them.authorization()  # parses them here, not in the middle of a run
    return with_them


def create_partitioned_topic(
    admin_url: str, topic: str, partitions: int, authorization: str | None = None
) -> None:
    """``PUT {admin}/admin/v2/persistent/<tenant>/<ns>/<topic>/partitions`` with the count
    as body (Pulsar's admin API; the gRPC contract has no create call). A topic that already
    has that many partitions is fine; another count is an error, as numbers would mislead."""
    full = (
        topic
        if "://" in topic
        else "persistent://" + (topic if "/" in topic else f"public/default/{topic}")
    )
    domain, _, rest = full.partition("://")
    path = "/".join([domain, *(urllib.parse.quote(p, safe="") for p in rest.split("/"))])
    url = f"{admin_url.rstrip('/')}/admin/v2/{path}/partitions"
    headers = {"Authorization": authorization} if authorization else {}
    request = urllib.request.Request(url, data=str(partitions).encode(), method="PUT")
    request.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        if exc.code != 409:
            raise RuntimeError(f"PUT {url}: HTTP {exc.code} {exc.read().decode()}") from None
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=30
        ) as response:
            existing = json.loads(response.read())["partitions"]
    else:
        return
    if existing != partitions:
        raise RuntimeError(f"{full} exists with {existing} partitions, not {partitions}")


def _measure(label: str, runner: Runner, spec: LoadSpec) -> tuple[dict[str, Any], Recorder]:
    """Run one load on a fresh uvloop and return its summary (and recorder, for a plot)."""
    import uvloop

    rec = Recorder(label, spec.size)
    uvloop.run(runner(spec, rec))
    return _result(label, spec, rec), rec


def _result(label: str, spec: LoadSpec, rec: Recorder) -> dict[str, Any]:
    return {
        "run": label,
        "topic": ",".join(spec.topics),
        "partitions": spec.partitions,
        "rate_limit": spec.rate,
        **rec.summary(),
    }


def _ok(result: dict[str, Any]) -> bool:
    return bool(result["messages"]) and not result["errors"]


def _finish(
    args: argparse.Namespace,
    rows: list[dict[str, Any]],
    recorders: list[Recorder],
    ok: bool,
    report: dict[str, Any] | None = None,
) -> int:
    """Print the summary (table or JSON), draw the plot if asked; the exit code."""
    if getattr(args, "plot", None):
        title = f"pulsar-grpc perf {args.verb}: {rows[0]['topic']}, {args.size} B"
        plot(args.plot, recorders, title)
    if args.json:
        print(json.dumps(report if report is not None else rows[0], indent=2))
    else:
        print(table(rows))
    return 0 if ok else 1


def _run_e2e(args: argparse.Namespace, spec: LoadSpec) -> int:
    import uvloop

    produced = Recorder("e2e publish", spec.size)
    received = Recorder("e2e receive", spec.size)
    counts = uvloop.run(e2e(spec, produced, received))
    publish = _result("e2e publish", spec, produced)
    end_to_end = _result("e2e receive", spec, received)
    report = {"run": "e2e", "topic": publish["topic"], **counts}
    report.update(publish=publish, end_to_end=end_to_end)
    ok = counts["sent"] > 0 and counts["sent"] == counts["received"] and not publish["errors"]
    if not ok:
        print(f"pulsar-grpc perf e2e: sent {counts['sent']}, received {counts['received']}, "
              f"errors {publish['errors']}", file=sys.stderr)  # fmt: skip
    return _finish(args, [publish, end_to_end], [produced, received], ok, report)


# ---------------------------------------------------------------- perf all


def _run_all(args: argparse.Namespace) -> int:
    spec = _spec(args, "", ("",))
    report: dict[str, Any] = {"machine": machine(), "settings": _settings(args, spec)}
    with ceiling_server() as url:
        ceiling, _ = _measure("ceiling", produce_raw, replace(spec, service_url=url, topics=("c",)))
    report["ceiling"] = ceiling
    rows = [{**ceiling, "durability": "none (no broker)"}]
    report["runs"] = {}
    for mode in ("page-cache", "fsync") if args.sync else ("page-cache",):
        with standalone(*MODES[mode]) as broker:
            runs = _broker_runs(replace(spec, service_url=broker.service_url), args.latency_rate)
        report["runs"][mode] = runs
        rows += [{**r, "durability": mode} for r in runs.values()]
    report["machine"]["load_after"] = os.getloadavg()
    ceiling_rate = ceiling["msg_per_s"]
    for row in rows:
        row["pct_of_ceiling"] = round(100 * row["msg_per_s"] / ceiling_rate, 1)
    return _finish(args, rows, [], all(_ok(r) for r in rows), report)


def _broker_runs(spec: LoadSpec, latency_rate: float) -> dict[str, dict[str, Any]]:
    """Produce (SDK, then raw); consume what the SDK produced (SDK, then raw, on a second
    subscription); then publish latency at a fixed rate."""
    sdk, _ = _measure("produce", produce_sdk, replace(spec, topics=("perf-sdk",)))
    raw, _ = _measure("produce raw", produce_raw, replace(spec, topics=("perf-raw",)))
    drain = replace(spec, topics=("perf-sdk",), messages=sdk["messages"], duration=0)
    consume, _ = _measure("consume", consume_sdk, drain)
    drain_raw = replace(drain, subscription="perf-raw-sub")
    consume_raw_result, _ = _measure("consume raw", consume_raw, drain_raw)
    paced = replace(spec, topics=("perf-latency",), rate=latency_rate)
    latency, _ = _measure(f"latency@{latency_rate:,.0f}", produce_sdk, paced)
    return {
        "produce_sdk": sdk,
        "produce_raw": raw,
        "consume_sdk": consume,
        "consume_raw": consume_raw_result,
        "latency": latency,
    }


def _settings(args: argparse.Namespace, spec: LoadSpec) -> dict[str, Any]:
    keep = ("size", "batch", "messages", "duration", "producers", "max_pending", "batch_delay_ms")
    out = {k: getattr(spec, k) for k in keep}
    out.update(latency_rate=args.latency_rate, receiver_queue=spec.receiver_queue)
    return out
