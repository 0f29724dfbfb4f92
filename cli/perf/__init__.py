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
import http.client
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import replace
from typing import Any

import grpc
from hdrh.log import HistogramLogWriter

from pulsar_grpc.broker.stalls import freeze_startup_heap
from pulsar_grpc.cli.perf import curves
from pulsar_grpc.cli.perf.flags import (
    DEFAULT_RUN_S,
    Verb,
    add_benchmark_flags,
    add_pulsar_perf_flags,
    topics_of,
)
from pulsar_grpc.cli.perf.load import STAMP_BYTES, consume_sdk, e2e, produce_sdk
from pulsar_grpc.cli.perf.measure import MODES, Runner, measure, result, succeeded
from pulsar_grpc.cli.perf.procs import ceiling_server, standalone
from pulsar_grpc.cli.perf.raw import consume_raw, produce_raw
from pulsar_grpc.cli.perf.report import machine, plot, table
from pulsar_grpc.cli.perf.separate import e2e_separate
from pulsar_grpc.cli.perf.spec import ConsumerLatency, LoadSpec
from pulsar_grpc.cli.perf.stats import LineStyle, Recorder, open_histogram_log
from pulsar_grpc.cli.rest import no_http_answer
from pulsar_grpc.client.exceptions import PulsarException


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("perf")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, help in (
        (Verb.PRODUCE, "produce to a running broker (pulsar-perf produce)"),
        (Verb.CONSUME, "consume (and ack) from a running broker (pulsar-perf consume); "
         "end-to-end latency from each message's publish time"),
        (Verb.E2E, "producers and consumers at once; end-to-end latency publish -> receive"),
    ):  # fmt: skip
        add_pulsar_perf_flags(verbs.add_parser(verb.value, help=help), verb)
    ceiling = verbs.add_parser("ceiling", help="a bare grpc.aio stream, same batching, no broker")
    add_benchmark_flags(ceiling)
    everything = verbs.add_parser(
        "all", help="start a standalone broker; ceiling, produce, consume, latency; one table"
    )
    add_benchmark_flags(everything)
    everything.add_argument(
        "--latency-rate", type=float, default=50_000, help="msg/s of the fixed-rate latency run"
    )
    everything.add_argument(
        "--sync", action="store_true", help="also run with journalSyncData=true (fsync)"
    )
    from pulsar_grpc.cli.perf import cluster  # it builds on this module's helpers

    cluster.add_parser(verbs)
    curves.add_parser(verbs)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "cluster":
        from pulsar_grpc.cli.perf import cluster

        return cluster.run(args)
    if args.verb == "curves":
        return curves.run(args)
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
        with ceiling_server() as (url, _):
            result, rec = measure("ceiling", produce_raw, replace(spec, service_url=url))
        return _finish(args, [result], [rec], ok=succeeded(result))
    try:
        spec = _credentials(args, _spec(args, args.service_url, topics_of(args)))
    except ValueError as exc:  # -t against the topics given; --auth-params that do not parse
        print(f"pulsar-grpc perf: {exc}", file=sys.stderr)
        return 2
    if args.partitions:
        authorization = dict(spec.authorization()).get("authorization")
        try:
            for topic in spec.topics:
                create_partitioned_topic(args.admin_url, topic, args.partitions, authorization)
        except (RuntimeError, OSError, http.client.HTTPException) as exc:
            url = args.admin_url
            problem = str(exc) if isinstance(exc, RuntimeError) else no_http_answer(url, exc)
            print(f"pulsar-grpc perf: creating the topics: {problem}", file=sys.stderr)
            return 1
    try:
        # With --separate-processes the consumer's process writes it.
        own_log = args.histogram_file and not getattr(args, "separate_processes", False)
        log = open_histogram_log(args.histogram_file) if own_log else None
    except OSError as exc:
        print(f"pulsar-grpc perf: --histogram-file: {exc}", file=sys.stderr)
        return 2
    try:
        return _run_verb(args, spec, log[0] if log else None)
    finally:
        if log:
            log[1].close()


def _run_verb(args: argparse.Namespace, spec: LoadSpec, log: HistogramLogWriter | None) -> int:
    """produce, consume or e2e, each with pulsar-perf's throughput lines."""
    if args.verb == Verb.E2E:
        return _run_e2e(args, spec, log)
    raw = "raw" if args.raw else ""
    runners: dict[tuple[str, str], Runner] = {
        ("produce", ""): produce_sdk,
        ("produce", "raw"): produce_raw,
        ("consume", ""): consume_sdk,
        ("consume", "raw"): consume_raw,
    }
    style = LineStyle.PRODUCED if args.verb == Verb.PRODUCE else LineStyle.RECEIVED
    label = f"{args.verb} {raw}".strip()
    rec = Recorder(label, spec.size, style, log)
    result, rec = measure(label, runners[args.verb, raw], spec, rec)
    print(rec.aggregated(), file=sys.stderr)
    return _finish(args, [result], [rec], ok=succeeded(result))


def _check(args: argparse.Namespace) -> str:
    """What is wrong with the flags, or ''."""
    if args.verb in ("ceiling", "all") and min(args.size, args.batch, args.producers) < 1:
        return "--size, --batch, --producers must be >= 1"
    if getattr(args, "max_pending", 0) < getattr(args, "batch", 0):
        return "-o/--max-outstanding must be at least -bm/--batch-max-messages"
    if getattr(args, "raw", False) and args.partitions:
        return (
            "--raw streams go to one topic each: give the partitions (T-partition-0 ...) as topics"
        )
    if args.verb == "e2e" and args.size < STAMP_BYTES:
        return f"e2e payloads carry an {STAMP_BYTES}-byte send time: -s/--size must be >= 8"
    if getattr(args, "subscription_type", None) == "Exclusive" and args.consumers > 1:
        return "an Exclusive subscription takes one consumer per topic"
    return ""


def _spec(args: argparse.Namespace, service_url: str, topics: tuple[str, ...]) -> LoadSpec:
    """The run's settings (a verb's missing flags: LoadSpec's defaults); with no budget at
    all: until Ctrl-C for pulsar-perf's verbs, 10 s for ceiling and all."""
    given = {
        name: getattr(args, name)
        for name in (
            "size", "batch", "messages", "rate", "producers", "consumers", "partitions",
            "max_pending", "batch_delay_ms", "subscription", "receiver_queue", "idle_timeout",
            "interval", "initial_position",
        )
        if getattr(args, name, None) is not None
    }  # fmt: skip
    consumers = given.get("consumers", 1)
    return LoadSpec(
        service_url=service_url,
        topics=topics,
        **given,
        duration=args.duration
        or (0 if args.messages or args.verb in tuple(Verb) else DEFAULT_RUN_S),
        subscription_type=getattr(args, "subscription_type", None)
        or ("Exclusive" if consumers == 1 else "Shared"),
        # pulsar-perf consume's latency: publish time -> receive, per message.
        consumer_latency=ConsumerLatency.FROM_PUBLISH_TIME
        if args.verb == Verb.CONSUME
        else ConsumerLatency.NONE,
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


def _run_e2e(args: argparse.Namespace, spec: LoadSpec, log: HistogramLogWriter | None) -> int:
    """Both sides; --histogram-file logs the end-to-end latency."""
    import uvloop

    if args.separate_processes:
        return _run_e2e_separate(args, spec)
    produced = Recorder("e2e publish", spec.size, LineStyle.PRODUCED)
    received = Recorder("e2e receive", spec.size, LineStyle.RECEIVED, log)
    freeze_startup_heap()
    try:
        counts = uvloop.run(e2e(spec, produced, received))
        lost = counts["sent"] - counts["received"]
    except KeyboardInterrupt:  # Ctrl-C: what was sent by then; some was still in flight
        produced.finish()
        received.finish()
        counts = {"sent": produced.count, "received": received.count, "stale": 0}
        lost = 0
    publish = result("e2e publish", spec, produced)
    end_to_end = result("e2e receive", spec, received)
    print(produced.aggregated(), received.aggregated(), sep="\n", file=sys.stderr)
    report = {"run": "e2e", "topic": publish["topic"], **counts}
    report.update(publish=publish, end_to_end=end_to_end)
    return _e2e_finish(args, report, lost, [produced, received])


def _run_e2e_separate(args: argparse.Namespace, spec: LoadSpec) -> int:
    """The consumers in a child process (cli.perf.separate), which writes --histogram-file."""
    produced = Recorder("e2e publish", spec.size, LineStyle.PRODUCED)
    try:
        counts = e2e_separate(spec, produced, args.histogram_file)
    except RuntimeError as exc:  # the child did not start or did not answer
        print(f"pulsar-grpc perf e2e: {exc}", file=sys.stderr)
        return 1
    print(produced.aggregated(), file=sys.stderr)
    report = {"run": "e2e", "topic": counts["publish"]["topic"], "separate_processes": True}
    report.update(counts)
    # The child's per-interval figures, for --plot next to the producer's.
    received = Recorder("e2e receive", spec.size, series=counts["end_to_end"]["series"])
    return _e2e_finish(args, report, counts["sent"] - counts["received"], [produced, received])


def _e2e_finish(
    args: argparse.Namespace, report: dict[str, Any], lost: int, recorders: list[Recorder]
) -> int:
    """The e2e summary; exit code 1 unless everything sent was received without errors."""
    publish = report["publish"]
    ok = report["sent"] > 0 and not lost and not publish["errors"]
    if not ok:
        print(f"pulsar-grpc perf e2e: sent {report['sent']}, received {report['received']}, "
              f"errors {publish['errors']}", file=sys.stderr)  # fmt: skip
    return _finish(args, [publish, report["end_to_end"]], recorders, ok, report)


# ---------------------------------------------------------------- perf all


def _run_all(args: argparse.Namespace) -> int:
    spec = _spec(args, "", ("",))
    report: dict[str, Any] = {"machine": machine(), "settings": _settings(args, spec)}
    with ceiling_server() as (url, _):
        ceiling, _ = measure("ceiling", produce_raw, replace(spec, service_url=url, topics=("c",)))
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
    return _finish(args, rows, [], all(succeeded(r) for r in rows), report)


def _broker_runs(spec: LoadSpec, latency_rate: float) -> dict[str, dict[str, Any]]:
    """Produce (SDK, then raw); consume what the SDK produced (SDK, then raw, on a second
    subscription); then publish latency at a fixed rate, and end-to-end latency at that rate
    with the consumer in its own process (its row: the consumer's figures, send -> receive)."""
    sdk, _ = measure("produce", produce_sdk, replace(spec, topics=("perf-sdk",)))
    raw, _ = measure("produce raw", produce_raw, replace(spec, topics=("perf-raw",)))
    drain = replace(spec, topics=("perf-sdk",), messages=sdk["messages"], duration=0)
    consume, _ = measure("consume", consume_sdk, drain)
    drain_raw = replace(drain, subscription="perf-raw-sub")
    consume_raw_result, _ = measure("consume raw", consume_raw, drain_raw)
    paced = replace(spec, topics=("perf-latency",), rate=latency_rate)
    latency, _ = measure(f"latency@{latency_rate:,.0f}", produce_sdk, paced)
    label = f"e2e@{latency_rate:,.0f} 2 procs"
    apart = e2e_separate(replace(paced, topics=("perf-e2e",)), Recorder(label, spec.size))
    e2e_row = {
        **apart["end_to_end"],
        "run": label,
        "sent": apart["sent"],
        "received": apart["received"],
        "publish_latency_ms": apart["publish"]["latency_ms"],
    }
    if apart["sent"] != apart["received"]:  # a lost message fails the run, as in perf e2e
        e2e_row["errors"] += apart["sent"] - apart["received"]
    return {
        "produce_sdk": sdk,
        "produce_raw": raw,
        "consume_sdk": consume,
        "consume_raw": consume_raw_result,
        "latency": latency,
        "e2e_separate": e2e_row,
    }


def _settings(args: argparse.Namespace, spec: LoadSpec) -> dict[str, Any]:
    keep = ("size", "batch", "messages", "duration", "producers", "max_pending", "batch_delay_ms")
    out = {k: getattr(spec, k) for k in keep}
    out.update(latency_rate=args.latency_rate, receiver_queue=spec.receiver_queue)
    return out
