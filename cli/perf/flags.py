"""The flags of `perf produce|consume|e2e`, which speak pulsar-perf: the topic as a positional
argument, pulsar-perf's flag names and defaults where the setting is the same (``-r`` 100 msg/s,
``-s`` 1024 bytes, ``-n``, ``-m``, ``-time``, ``-b``, ``-bm`` 1000, ``-o``, ``-np``, ``-q``,
``-st``, ``-sp``, ``--histogram-file``); the longer names this tool had before stay as aliases.
With neither ``-m`` nor ``-time`` a run goes on until Ctrl-C, as pulsar-perf's. ``ceiling`` and
``all`` (the benchmark that runs its own broker) keep their own flags, and 10 s runs.
"""

from __future__ import annotations

import argparse
from enum import StrEnum

from pulsar_grpc.cli.client_cmd import (
    choice_of,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.client import ConsumerType, InitialPosition

# pulsar-perf's defaults (PerformanceProducer / PerformanceConsumer).
PULSAR_PERF_RATE = 100  # msg/s, over all producers
PULSAR_PERF_SIZE = 1024  # bytes
PULSAR_PERF_BATCH_MAX_MESSAGES = 1000
PULSAR_PERF_RECEIVER_QUEUE = 1000
PULSAR_PERF_SUBSCRIBER = "sub"
PULSAR_PERF_INTERVAL_S = 10.0  # pulsar-perf prints its throughput line every 10 s
DEFAULT_RUN_S = 10.0  # ceiling and all, with neither --messages nor --duration


class Verb(StrEnum):
    """The perf verbs that load a running broker."""

    PRODUCE = "produce"
    CONSUME = "consume"
    E2E = "e2e"


def add_pulsar_perf_flags(p: argparse.ArgumentParser, verb: Verb) -> None:
    """pulsar-perf's flags for one verb (e2e: both sides; its consumer count is ``-nc`` and its
    subscription ``-ss``, as ``-n`` and ``-s`` are the producer's count and size)."""
    add_connection_args(p, [UrlFlag.SERVICE, UrlFlag.ADMIN])
    p.add_argument(
        "topic_names", nargs="+", metavar="TOPIC",
        help="the topics; one with -t N stands for TOPIC-0 .. TOPIC-<N-1> (as pulsar-perf)",
    )  # fmt: skip
    p.add_argument(
        "-t", "--num-topic", "--num-topics", dest="num_topics", type=positive_int, default=1,
        help="number of topics (default 1)",
    )  # fmt: skip
    p.add_argument(
        "-np", "--partitions", type=non_negative_int, default=0,
        help="create each topic with N partitions first (admin HTTP); 0 = as it is (default)",
    )  # fmt: skip
    p.add_argument(
        "-m", "--num-messages", "--messages", dest="messages", type=non_negative_int, default=0,
        help="messages in total; 0 = until -time (default 0)",
    )  # fmt: skip
    p.add_argument(
        "-time", "--test-duration", "--duration", dest="duration", type=non_negative_float,
        default=0,
        help="seconds; 0 = until -m (default 0; with -m 0 too, until Ctrl-C, as pulsar-perf)",
    )  # fmt: skip
    if verb is Verb.CONSUME:
        p.add_argument(
            "--size", type=positive_int, default=PULSAR_PERF_SIZE,
            help=f"payload bytes the Mbit/s figures assume (default {PULSAR_PERF_SIZE})",
        )  # fmt: skip
    else:
        _producer_flags(p)
    if verb is not Verb.PRODUCE:
        _consumer_flags(p, verb)
    if verb is Verb.E2E:
        p.add_argument(
            "--separate-processes", action="store_true",
            help="run the consumers in a child process (end-to-end latency across processes)",
        )  # fmt: skip
    else:
        name = "ProduceRequests" if verb is Verb.PRODUCE else "Consume streams (permits, acks)"
        p.add_argument("--raw", action="store_true", help=f"hand-driven {name}, no SDK")
    p.add_argument(
        "--histogram-file", metavar="FILE",
        help="write each interval's latency histogram to FILE in HdrHistogram's log format",
    )  # fmt: skip
    p.add_argument("--plot", metavar="FILE.png", help="draw throughput and latency over time")
    p.add_argument(
        "--interval", type=positive_float, default=PULSAR_PERF_INTERVAL_S,
        help=f"seconds between throughput lines (default {PULSAR_PERF_INTERVAL_S:g})",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def _producer_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-r", "--rate", type=non_negative_float, default=PULSAR_PERF_RATE,
        help=f"msg/s over all producers; 0 = as fast as possible (default {PULSAR_PERF_RATE})",
    )  # fmt: skip
    p.add_argument(
        "-s", "--size", type=positive_int, default=PULSAR_PERF_SIZE,
        help=f"message size in bytes (default {PULSAR_PERF_SIZE})",
    )  # fmt: skip
    p.add_argument(
        "-n", "--num-producers", "--producers", dest="producers", type=positive_int, default=1,
        help="producers per topic (default 1)",
    )  # fmt: skip
    p.add_argument(
        "-b", "--batch-time-window", "--batch-delay-ms", dest="batch_delay_ms",
        type=non_negative_float, default=1.0, help="batch messages in a window of MS (default 1)",
    )  # fmt: skip
    p.add_argument(
        "-bm", "--batch-max-messages", "--batch", dest="batch", type=positive_int,
        default=PULSAR_PERF_BATCH_MAX_MESSAGES,
        help=f"messages per batch at most (default {PULSAR_PERF_BATCH_MAX_MESSAGES})",
    )  # fmt: skip
    p.add_argument(
        "-o", "--max-outstanding", "--max-pending", dest="max_pending", type=positive_int,
        default=10_000, help="messages in flight per producer at most (default 10000)",
    )  # fmt: skip


def _consumer_flags(p: argparse.ArgumentParser, verb: Verb) -> None:
    names = ("-s", "--subscriber-name") if verb is Verb.CONSUME else ("-ss", "--subscriber-name")
    p.add_argument(
        *names, "--subscription", dest="subscription", default=PULSAR_PERF_SUBSCRIBER,
        help=f"subscription name (default {PULSAR_PERF_SUBSCRIBER})",
    )  # fmt: skip
    p.add_argument(
        "-st", "--subscription-type", type=choice_of(ConsumerType), metavar="TYPE",
        help="Exclusive, Shared, Failover or Key_Shared (default: Exclusive with one consumer "
        "per topic, Shared with more)",
    )  # fmt: skip
    counts = ("-n", "--num-consumers") if verb is Verb.CONSUME else ("-nc", "--num-consumers")
    p.add_argument(
        *counts, "--consumers", dest="consumers", type=positive_int, default=1,
        help="consumers per topic (default 1)",
    )  # fmt: skip
    if verb is Verb.CONSUME:  # e2e subscribes at Latest, before its first send
        p.add_argument(
            "-sp", "--subscription-position", dest="initial_position",
            type=choice_of(InitialPosition), default=InitialPosition.Latest.value,
            metavar="POSITION", help="where a new subscription starts: Latest or Earliest "
            "(default Latest)",
        )  # fmt: skip
    p.add_argument(
        "-q", "--receiver-queue-size", "--receiver-queue", dest="receiver_queue",
        type=positive_int, default=PULSAR_PERF_RECEIVER_QUEUE,
        help=f"messages each consumer prefetches (default {PULSAR_PERF_RECEIVER_QUEUE})",
    )  # fmt: skip
    p.add_argument(
        "--idle-timeout", type=positive_float, default=10.0,
        help="stop after this many seconds without a message (default 10)",
    )  # fmt: skip


def add_benchmark_flags(p: argparse.ArgumentParser) -> None:
    """The flags of ``ceiling`` and ``all``: the benchmark's own (docs/benchmarks.md)."""
    p.add_argument("--size", type=positive_int, default=100, help="payload bytes (default 100)")
    p.add_argument(
        "--batch", type=positive_int, default=100, help="messages per batch (default 100)"
    )
    budget = p.add_mutually_exclusive_group()
    budget.add_argument(
        "--messages", "-m", type=non_negative_int, default=0, help="messages per run"
    )
    budget.add_argument(
        "--duration", "-d", type=non_negative_float, default=0, help="seconds per run"
    )
    p.add_argument("--producers", "-p", type=positive_int, default=1, help="producers per topic")
    p.add_argument(
        "--max-pending", type=positive_int, default=10_000, help="messages in flight per producer"
    )
    p.add_argument(
        "--batch-delay-ms",
        type=non_negative_float,
        default=1.0,
        help="SDK batching_max_publish_delay_ms",
    )
    p.add_argument(
        "--interval", type=positive_float, default=2.0, help="seconds between stats lines"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON")


def positive_ints(text: str) -> list[int]:
    """A comma list of counts, e.g. ``1,2,4``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of integers: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def topics_of(args: argparse.Namespace) -> tuple[str, ...]:
    """The run's topics: as given, or TOPIC-0 .. TOPIC-<N-1> for one topic and ``-t N``;
    ValueError when several are given and ``-t`` says another count (as pulsar-perf)."""
    names: list[str] = args.topic_names
    if len(names) == args.num_topics:
        return tuple(names)
    if len(names) == 1:
        return tuple(f"{names[0]}-{i}" for i in range(args.num_topics))
    raise ValueError(f"{len(names)} topics given but -t/--num-topic says {args.num_topics}")
