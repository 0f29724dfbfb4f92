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

from pulsar_grpc.client import (
    Client,
    ConsumerCryptoFailureAction,
    MessageId,
    Reader,
    Timeout,
    TopicNotFound,
)

from ._message_ids import parse_id
from ._options import OptionError
from ._topics import full_topic_name

EARLIEST = "earliest"
LATEST = "latest"

Key = tuple[int, int, int]


def key(message_id: MessageId) -> Key:
    """Order of ids within one partition (the partition field is not part of it)."""
    return (message_id.ledger_id(), message_id.entry_id(), message_id.batch_index())


def format_id(message_id: MessageId, partition: int) -> str:
    """The ``messageId`` column and offset text: ``ledger:entry:batch:partition``."""
    return (
        f"{message_id.ledger_id()}:{message_id.entry_id()}:{message_id.batch_index()}:{partition}"
    )


def parse_offsets(
    name: str, option: str | None, partitions: list[str], default: str
) -> dict[str, str]:
    """``earliest`` | ``latest`` | JSON ``{partition: id|earliest|latest}`` -> one value per
    partition; partitions the JSON does not name get ``default``. The syntax was checked when
    the options were parsed; here the JSON's partitions are matched to those read."""
    text = (option or default).strip()
    if text.lower() in (EARLIEST, LATEST):
        return dict.fromkeys(partitions, text.lower())
    given = json.loads(text)
    normalized = {full_topic_name(k): str(v).strip() for k, v in given.items()}
    unknown = sorted(set(normalized) - set(partitions))
    if unknown:
        raise OptionError(
            f"{name}: expected partitions of the topics read ({', '.join(partitions) or 'none'})"
            f", got {', '.join(unknown)}"
        )
    out = {}
    for partition in partitions:
        value = normalized.get(partition, default)
        out[partition] = value.lower() if value.lower() in (EARLIEST, LATEST) else value
    return out


def before(message_id: MessageId) -> str:
    """The offset just before ``message_id``'s entry (``ledger:entry-1:-1``): reading after
    it starts with that entry. Entry -1 stands for "from the ledger's first entry"."""
    return f"{message_id.ledger_id()}:{message_id.entry_id() - 1}:-1"


def reader_start(after: str) -> tuple[MessageId, bool]:
    """Where a reader must start to read what follows offset ``after``: (id, inclusive).

    The broker knows no entry -1, so :func:`before` of a ledger's first entry opens the
    reader inclusively at that entry instead."""
    if after == EARLIEST:
        return MessageId.earliest, False
    start = parse_id(after)
    if start.entry_id() < 0:
        return MessageId(
            ledger_id=start.ledger_id(), entry_id=0, batch_index=-1, partition=-1
        ), True
    return start, False


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

    def end_key(self) -> Key:
        return key(parse_id(self.until))

    def is_past_end(self, message_id: MessageId) -> bool:
        k, end = key(message_id), self.end_key()
        return k > end if self.until_inclusive else k >= end

    def is_end(self, message_id: MessageId) -> bool:
        """Whether ``message_id`` is the last to read: the end id itself, or a whole entry
        holding it (an encrypted batch handed over undecrypted, batch index -1)."""
        if not self.until_inclusive:
            return False
        k, end = key(message_id), self.end_key()
        return k == end or (message_id.batch_index() == -1 and k[:2] == end[:2])


@dataclass(frozen=True)
class Span:
    """What a batch read covers in one partition before it is split into tasks.

    ``after`` is an offset (or earliest, then ``first`` is the partition's first id); the
    span ends at ``until``, inclusively unless ``until_inclusive`` is False (an endingTime
    ends before the first message published after it).
    """

    topic: str
    after: str
    until: MessageId
    first: MessageId | None
    until_inclusive: bool = True

    def low(self) -> MessageId | None:
        return self.first if self.after == EARLIEST else parse_id(self.after)

    def is_empty(self) -> bool:
        low = self.low()
        if low is None:
            return True
        if self.after == EARLIEST:  # low is a message to read
            return key(self.until) < key(low) or (
                not self.until_inclusive and key(self.until) <= key(low)
            )
        return key(self.until) <= key(low)

    def start_entry(self) -> int:
        low = self.low()
        assert low is not None  # callers check is_empty() first
        return max(low.entry_id(), 0) if low.ledger_id() == self.until.ledger_id() else 0

    def entries(self) -> int:
        """Entries of ``until``'s ledger the span covers (what :func:`split` cuts)."""
        return self.until.entry_id() - self.start_entry() + 1


def split(span: Span, entries_per_split: int) -> list[Range]:
    """Cut a span into ranges of about ``entries_per_split`` entries.

    Entry ids are contiguous within a ledger, so split points are computed, not found by
    reading: the span inside ``until``'s ledger is cut at entry boundaries; whatever lies in
    earlier ledgers stays in the first range.
    """
    if span.is_empty():
        return []
    until, ledger = span.until, span.until.ledger_id()
    start_entry, count = span.start_entry(), math.ceil(span.entries() / entries_per_split)
    last = Range(span.topic, span.after, format_id(until, until.partition()), span.until_inclusive)
    if count <= 1:
        return [last]
    step = math.ceil(span.entries() / count)
    bounds = list(range(start_entry + step, until.entry_id() + 1, step))
    ranges: list[Range] = []
    previous = span.after
    for entry in bounds:
        ranges.append(Range(span.topic, previous, f"{ledger}:{entry}:-1", until_inclusive=False))
        previous = f"{ledger}:{entry - 1}:-1"  # exclusive start at entry-1 = from entry on
    ranges.append(Range(span.topic, previous, last.until, last.until_inclusive))
    return ranges


class TopicMissing(RuntimeError):
    """A topic read does not exist and the broker does not create topics."""


async def first_id(
    client: Client, topic: str, idle_ms: int, at_ms: int | None = None
) -> MessageId | None:
    """The oldest available message of a partition (or the first published at or after
    ``at_ms``), None if there is none."""
    reader = await _probe_reader(client, topic)
    try:
        if at_ms is not None:
            await reader.seek(at_ms)
        return (await reader.read_next(idle_ms)).message_id()
    except Timeout:
        return None
    finally:
        await reader.close()


async def last_id(client: Client, topic: str) -> MessageId | None:
    """The newest message of a partition now, None if it holds none (GetLastMessageId).

    A topic that does not exist reads as empty where the broker creates topics on first use
    (opening a reader creates it, as a Kafka consumer does); otherwise it is an error naming
    the topic.
    """
    try:
        return await client.get_last_message_id(topic)
    except TopicNotFound:
        pass
    await (await _probe_reader(client, topic)).close()
    return None


async def _probe_reader(client: Client, topic: str) -> Reader:
    """A one-message reader from earliest; opening it creates a missing topic where the
    broker allows that, else the error names the topic. It only needs ids, so an encrypted
    entry counts whether or not the query holds its key (CONSUME: the entry as it is)."""
    try:
        return await client.create_reader(
            topic,
            MessageId.earliest,
            receiver_queue_size=1,
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
    except TopicNotFound:
        raise TopicMissing(
            f"topic: {topic} does not exist and the broker does not create topics on first "
            "use (allowAutoTopicCreation=false); create it or correct the name"
        ) from None
