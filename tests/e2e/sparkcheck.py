"""Helpers shared by the Spark tests: fresh topic names, offsets as the source writes them, and
the line of Spark's error message that is the source's own."""

from __future__ import annotations

import time

from pulsar_grpc.client import MessageId


def fresh_topic(name: str) -> str:
    """A topic no earlier test (or run on the same broker) has used."""
    return f"persistent://public/default/{name}-{time.time_ns() % 10**9}"


def oid(mid: MessageId, partition: int = -1) -> str:
    """The source's offset text for a message id (partition -1: a non-partitioned topic)."""
    return f"{mid.ledger_id()}:{mid.entry_id()}:{mid.batch_index()}:{partition}"


def last_line(error: BaseException) -> str:
    """The last line of Spark's message for a Python error: the exception's own line (Spark
    appends a `` SQLSTATE: ...`` line after the traceback)."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    if lines and lines[-1].strip().startswith("SQLSTATE"):
        lines.pop()
    return lines[-1]
