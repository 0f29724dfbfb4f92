"""Positions in a topic partition: offset JSON, read ranges, splits, and finding the ends.

One convention everywhere (user options, streaming checkpoints, tasks): an offset per
partition is the id of the *last message already covered* ("ledger:entry:batch:partition")
or ``earliest`` (nothing covered). A read range is therefore (start, end]: it starts after its
start id and includes its end id, so a streaming query resumes from its checkpoint without
losing or repeating a message, and a ``messageId`` seen in a row can be used as an offset.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from pulsar_grpc.client import Client, MessageId, Timeout

from ._topics import full_topic_name

EARLIEST = "earliest"
LATEST = "latest"

Key = tuple[int, int, int]


def key(message_id: MessageId) -> Key:
    """Order of ids within one partition (the partition field is not part of it)."""
    return (message_id.ledger_id, message_id.entry_id, message_id.batch_index)


def parse_id(text: str) -> MessageId:
    """An offset value -> MessageId, with the partition dropped (ranges are per partition)."""
    mid = MessageId.parse(text)
    return MessageId(mid.ledger_id, mid.entry_id, mid.batch_index, -1)


def format_id(message_id: MessageId, partition: int) -> str:
    """The ``messageId`` column and offset text: ``ledger:entry:batch:partition``."""
    return f"{message_id.ledger_id}:{message_id.entry_id}:{message_id.batch_index}:{partition}"


def parse_offsets(option: str | None, partitions: list[str], default: str) -> dict[str, str]:
    """``earliest`` | ``latest`` | JSON ``{partition: id|earliest|latest}`` -> one value per
    partition; partitions the JSON does not name get ``default``."""
    text = (option or default).strip()
    if text.lower() in (EARLIEST, LATEST):
        return dict.fromkeys(partitions, text.lower())
    try:
        given = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"offsets must be earliest, latest or a JSON object of partition -> "
            f"'ledger:entry:batch:partition', got {text!r}"
        ) from None
    if not isinstance(given, dict):
        raise ValueError(f"offsets JSON must be an object, got {text!r}")
    normalized = {full_topic_name(k): str(v).strip() for k, v in given.items()}
    unknown = sorted(set(normalized) - set(partitions))
    if unknown:
        raise ValueError(f"offsets name partitions that are not read: {unknown}")
    out = {}
    for name in partitions:
        value = normalized.get(name, default)
        if value.lower() not in (EARLIEST, LATEST):
            parse_id(value)  # validate now, on the driver
        out[name] = value.lower() if value.lower() in (EARLIEST, LATEST) else value
    return out


@dataclass(frozen=True)
class Range:
    """What one Spark task reads: messages of ``topic`` after ``after`` up to ``until``.

    ``until_inclusive`` is False for the inner boundaries of a split partition, where the
    boundary is the first id *not* to read (an entry start, ``ledger:entry:-1``).
    """

    topic: str
    after: str  # an id or "earliest"
    until: str  # an id
    until_inclusive: bool = True

    def start_id(self) -> MessageId:
        return MessageId.earliest if self.after == EARLIEST else parse_id(self.after)

    def end_key(self) -> Key:
        return key(parse_id(self.until))

    def is_past_end(self, message_id: MessageId) -> bool:
        k, end = key(message_id), self.end_key()
        return k > end if self.until_inclusive else k >= end

    def is_end(self, message_id: MessageId) -> bool:
        return self.until_inclusive and key(message_id) == self.end_key()


def split(
    topic: str, after: str, until: MessageId, first: MessageId | None, entries_per_split: int
) -> list[Range]:
    """Cut (after, until] into ranges of about ``entries_per_split`` entries.

    Entry ids are contiguous within a ledger, so split points are computed, not found by
    reading: the span inside ``until``'s ledger is cut at entry boundaries; whatever lies in
    earlier ledgers stays in the first range. ``first`` is the partition's first available id
    (needed when ``after`` is earliest); None means the partition is empty.
    """
    low = first if after == EARLIEST else parse_id(after)
    if low is None or key(until) < key(low) or (after != EARLIEST and key(until) <= key(low)):
        return []
    ledger = until.ledger_id
    start_entry = low.entry_id if low.ledger_id == ledger else 0
    span = until.entry_id - start_entry + 1
    count = math.ceil(span / entries_per_split) if entries_per_split > 0 else 1
    if count <= 1:
        return [Range(topic, after, str(until))]
    step = math.ceil(span / count)
    bounds = list(range(start_entry + step, until.entry_id + 1, step))
    ranges: list[Range] = []
    previous = after
    for entry in bounds:
        ranges.append(Range(topic, previous, f"{ledger}:{entry}:-1", until_inclusive=False))
        previous = f"{ledger}:{entry - 1}:-1"  # exclusive start at entry-1 = from entry on
    ranges.append(Range(topic, previous, str(until)))
    return ranges


async def first_id(client: Client, topic: str, idle_ms: int) -> MessageId | None:
    """The oldest available message of a partition, None if it holds none."""
    reader = await client.create_reader(topic, MessageId.earliest, receiver_queue_size=1)
    try:
        return (await reader.read_next(idle_ms)).message_id()
    except Timeout:
        return None
    finally:
        await reader.close()


async def last_id(client: Client, topic: str) -> MessageId | None:
    """The newest message of a partition now, None if it holds none (GetLastMessageId)."""
    return await client.get_last_message_id(topic)
