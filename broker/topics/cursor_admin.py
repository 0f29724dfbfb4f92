"""What an operator does to a loaded topic's subscriptions and ledger through the admin API
(Pulsar's PersistentSubscription / ManagedCursor admin operations): create a subscription at a
position, delete it, skip entries, clear its backlog, reset its cursor, peek at and examine
entries, the last message id and the managed ledger's internal stats.

A narrow layer over the broker core: the cursor moves are the core's own (Subscription.seek,
ManagedCursor.mark_delete, ManagedLedger.open_cursor, PersistentTopic.delete_subscription),
so a consumer sees an admin's change exactly as it sees its own. As in Pulsar, a reset
disconnects the subscription's consumers (their clients reconnect and get the messages from the
new position) and a delete refuses a subscription with consumers unless forced.
"""

from __future__ import annotations

import datetime as dt
import enum
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.errors import (
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    PreconditionFailedError,
    ServiceNotReadyError,
)
from pulsar_grpc.broker.ledger import Entry, ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.naming import DEDUPLICATION_CURSOR, check_subscription_name
from pulsar_grpc.broker.topics.subscription import Subscription

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics.topic import PersistentTopic

__all__ = ["CursorAdmin", "Force", "From", "Start", "entry_headers"]


class From(enum.Enum):
    """Where examine counts from (pulsar-admin's examine-message --initialPosition)."""

    EARLIEST = "earliest"
    LATEST = "latest"


class Force(enum.Enum):
    """Whether a delete may disconnect the subscription's consumers."""

    REFUSE_IF_CONNECTED = "refuse"
    DISCONNECT = "disconnect"


@dataclass(frozen=True, slots=True)
class Start:
    """Where a new subscription starts: a From end, or at an entry (inclusive)."""

    end: From | None = From.LATEST
    position: Position | None = None


class CursorAdmin:
    """The admin operations on one loaded topic."""

    def __init__(self, topic: PersistentTopic) -> None:
        self.topic = topic
        self.ledger: ManagedLedger = topic.ledger

    # ------------------------------------------------------------ subscriptions

    def names(self) -> list[str]:
        """The topic's subscriptions (its internal deduplication cursor is not one)."""
        return sorted(n for n in self.topic.subscriptions if n != DEDUPLICATION_CURSOR)

    def subscription(self, name: str) -> Subscription:
        """The subscription; 404 "Subscription not found" as Pulsar answers."""
        found = self.topic.subscriptions.get(name)
        if found is None or name == DEDUPLICATION_CURSOR:
            raise NotFoundError(f"Subscription {name} not found on {self.topic.name}")
        return found

    async def create(self, name: str, start: Start) -> None:
        """A durable subscription with no consumers, at ``start``; 409 if it exists."""
        check_subscription_name(name)
        if name == DEDUPLICATION_CURSOR:
            raise InvalidArgumentError(f"{name} is a reserved subscription name")
        if name in self.topic.subscriptions:
            raise NotAllowedError(f"Subscription {name} already exists for topic {self.topic.name}")
        initial: Literal["earliest", "latest"] = (
            "earliest" if start.end is From.EARLIEST else "latest"
        )
        cursor = await self.ledger.open_cursor(name, initial)
        if start.position is not None:
            await cursor.reset_cursor(start.position)
        self.topic.adopt_subscription(name, cursor)

    async def delete(self, name: str, force: Force) -> None:
        """Pulsar's unsubscribe: 412 while consumers are connected, unless forced (then they
        are disconnected first)."""
        subscription = self.subscription(name)
        if subscription.consumers and force is Force.REFUSE_IF_CONNECTED:
            raise PreconditionFailedError("Subscription has active connected consumers")
        gone = ServiceNotReadyError(f"subscription {name} was deleted")
        for consumer in list(subscription.consumers):
            consumer.transport.close(gone)
        await subscription.close()
        await self.topic.delete_subscription(subscription)

    # ------------------------------------------------------------ moving a cursor

    async def skip(self, name: str, entries: int) -> None:
        """Acknowledge the next ``entries`` unacknowledged entries (all of them if fewer)."""
        if entries < 0:
            raise InvalidArgumentError(f"cannot skip {entries} messages")
        cursor = self.subscription(name).cursor
        if entries >= cursor.get_number_of_entries_in_backlog():
            await self.clear_backlog(name)  # all of them: no need to count
            return
        last = _nth_unacked(self.ledger, cursor, entries)
        if last is not None:
            await cursor.mark_delete(last)

    async def clear_backlog(self, name: str) -> None:
        """Acknowledge everything written so far (Pulsar's skip_all)."""
        cursor = self.subscription(name).cursor
        lac = self.ledger.last_confirmed_entry
        if lac is not None:
            await cursor.mark_delete(lac)

    async def reset_to_time(self, name: str, timestamp_ms: int) -> None:
        """Reset to the first entry published at or after ``timestamp_ms``."""
        subscription = self.subscription(name)
        await subscription.seek(_disconnecting(subscription), publish_time=timestamp_ms)

    async def reset_to_position(
        self, name: str, position: Position, batch_index: int = -1, excluded: bool = False
    ) -> None:
        """Reset to a message id: from that message on, or after it when ``excluded``."""
        subscription = self.subscription(name)
        if excluded and batch_index < 0:
            position, batch_index = self.ledger.next_position(position), -1
        elif excluded:
            batch_index += 1
        await subscription.seek(
            _disconnecting(subscription), position=position, batch_index=max(batch_index, 0)
        )

    # ------------------------------------------------------------ reading entries

    async def peek(self, name: str, n: int) -> Entry:
        """The subscription's ``n``-th unacknowledged entry (1 = the next one delivered)."""
        if n < 1:
            raise InvalidArgumentError(f"message position must be at least 1, got {n}")
        cursor = self.subscription(name).cursor
        if n > cursor.get_number_of_entries_in_backlog():  # Pulsar's 404: not that many
            raise NotFoundError(f"Message not found on {self.topic.name}")
        position = _nth_unacked(self.ledger, cursor, n)
        return await self._read(position)

    async def examine(self, start: From, n: int) -> Entry:
        """The ``n``-th entry counted from the first (earliest) or the last (latest) one."""
        if n < 1:
            raise InvalidArgumentError(f"message position must be at least 1, got {n}")
        return await self._read(_nth_stored(self.ledger, start, n))

    async def _read(self, position: Position | None) -> Entry:
        entry = await self.ledger.read_entry(position) if position is not None else None
        if entry is None:
            raise NotFoundError(f"Message not found on {self.topic.name}")
        return entry

    async def last_message_id(self) -> dict[str, int]:
        """Pulsar's MessageIdImpl (a BatchMessageIdImpl when the last entry is a batch); an
        empty topic answers entryId -1 in the current ledger, as Pulsar does."""
        partition = self.topic.partition
        last = await self.topic.last_message()
        if last is None:
            ledger_id = self.ledger.current_ledger_id
            return {"ledgerId": ledger_id, "entryId": -1, "partitionIndex": partition}
        position, index = last
        answer = {
            "ledgerId": position.ledger_id,
            "entryId": position.entry_id,
            "partitionIndex": partition,
        }
        if index > 0:
            answer |= {"batchIndex": index, "batchSize": index + 1}
        return answer

    # ------------------------------------------------------------ internal stats

    def internal_stats(self) -> dict[str, Any]:
        """Pulsar's PersistentTopicInternalStats (ManagedLedgerInternalStats and cursors)."""
        ledger = self.ledger
        ledgers = ledger.ledgers
        lac = ledger.last_confirmed_entry
        return {
            "entriesAddedCounter": ledger.entries_added_counter,
            "numberOfEntries": ledger.number_of_entries,
            "totalSize": ledger.total_size,
            "currentLedgerEntries": ledgers[-1].entries,
            "currentLedgerSize": ledgers[-1].size,
            "lastConfirmedEntry": str(lac or Position(ledgers[-1].ledger_id, -1)),
            "state": "LedgerOpened",
            "ledgers": [
                {
                    "ledgerId": i.ledger_id,
                    "entries": i.entries,
                    "size": i.size,
                    "timestamp": i.timestamp,
                    "offloaded": False,
                    "underReplicated": False,
                }
                for i in ledgers
            ],
            "cursors": {
                name: _cursor_stats(ledger, cursor)
                for name, cursor in sorted(ledger.cursors.items())
            },
        }


def _cursor_stats(ledger: ManagedLedger, cursor: ManagedCursor) -> dict[str, Any]:
    """Pulsar's CursorStats; messagesConsumedCounter counts entries acknowledged since the
    ledger was opened here (entries added since minus the backlog's growth), as Pulsar's."""
    backlog = cursor.get_number_of_entries_in_backlog()
    ranges = cursor.individually_deleted.ranges()
    return {
        "markDeletePosition": str(cursor.mark_delete_position),
        "readPosition": str(cursor.read_position),
        "individuallyDeletedMessages": _ranges_text(ranges),
        "totalNonContiguousDeletedMessagesRange": len(ranges),
        "messagesConsumedCounter": ledger.entries_added_counter - backlog,
        "properties": dict(cursor.properties),
        "state": "Open",
        "waitingReadOp": False,
        "pendingReadOps": 0,
        "cursorLedger": -1,
        "cursorLedgerLastEntry": -1,
    }


def _ranges_text(ranges: list[tuple[Position, Position]]) -> str:
    """Pulsar's open-closed range notation: acked entries 3:5..3:7 are ``(3:4..3:7]``."""
    parts = [f"({first.ledger_id}:{first.entry_id - 1}..{last}]" for first, last in ranges]
    return "[" + ", ".join(parts) + "]"


def _nth_unacked(ledger: ManagedLedger, cursor: ManagedCursor, n: int) -> Position | None:
    """The position of the cursor's ``n``-th unacknowledged entry (None: fewer than n), by
    arithmetic over the ledger list and the acknowledged ranges, O(ledgers + ranges), never a
    walk of the entries: a peek or skip deep into a large backlog does not hold the event loop
    (and pulsar-admin's peek-messages -n N, which asks position/1..N, costs O(N) answers)."""
    lac = ledger.last_confirmed_entry
    if lac is None or n < 1:
        return None
    mark = cursor.mark_delete_position
    acked: dict[int, list[tuple[int, int]]] = {}
    for first, last in cursor.individually_deleted.ranges():
        acked.setdefault(first.ledger_id, []).append((first.entry_id, last.entry_id))
    for info in ledger.ledgers:
        ledger_id = info.ledger_id
        if ledger_id < mark.ledger_id or not info.entries:
            continue
        if ledger_id > lac.ledger_id:
            break
        current = mark.entry_id + 1 if ledger_id == mark.ledger_id else 0
        end = info.entries - 1
        if ledger_id == lac.ledger_id:
            end = min(end, lac.entry_id)
        # The unacknowledged runs of this ledger: between its acknowledged ranges.
        for acked_first, acked_last in [*acked.get(ledger_id, []), (end + 1, end + 1)]:
            gap = min(acked_first, end + 1) - current
            if gap > 0:
                if n <= gap:
                    return Position(ledger_id, current + n - 1)
                n -= gap
            current = max(current, acked_last + 1)
            if current > end:
                break
    return None


def _nth_stored(ledger: ManagedLedger, start: From, n: int) -> Position | None:
    """The ``n``-th stored entry from either end, by the ledger list (O(ledgers))."""
    infos = [i for i in ledger.ledgers if i.entries]
    if start is From.LATEST:
        for info in reversed(infos):
            if n <= info.entries:
                return Position(info.ledger_id, info.entries - n)
            n -= info.entries
    else:
        for info in infos:
            if n <= info.entries:
                return Position(info.ledger_id, n - 1)
            n -= info.entries
    return None


def _disconnecting(subscription: Subscription) -> Callable[[], None]:
    """The on_reset of an admin's reset: its consumers are disconnected (retryable), as
    Pulsar's resetCursor does, so their clients come back and read from the new position."""

    def disconnect() -> None:
        reset = ServiceNotReadyError(f"the cursor of subscription {subscription.name} was reset")
        for consumer in list(subscription.consumers):
            consumer.transport.close(reset)

    return disconnect


def entry_headers(entry: Entry, partition: int) -> tuple[dict[str, str], bytes]:
    """Pulsar's peek answer for an entry: X-Pulsar-* headers and the body. A single message's
    body is its payload; a batch (or a compressed one) is the stored entry itself
    (pulsargrpc.internal.v1.StoredEntry), with X-Pulsar-num-batch-message."""
    stored = entry_format.parse(entry.data)
    info = entry_format.info(entry.data)
    headers = {
        "X-Pulsar-Message-ID": f"{entry.position}",
        "X-Pulsar-publish-time": _iso_ms(info.publish_time),
        "X-Pulsar-producer-name": _header_text(info.producer_name, _VISIBLE),
        "X-Pulsar-sequence-id": str(info.sequence_id),
    }
    if partition >= 0:
        headers["X-Pulsar-partition"] = str(partition)
    if stored.HasField("compressed") or len(stored.messages) != 1:
        headers["X-Pulsar-num-batch-message"] = str(info.num_messages)
        headers["Content-Type"] = "application/x-protobuf"
        return headers, entry.data
    message = stored.messages[0]
    if message.key:
        headers["X-Pulsar-partitionKey"] = _header_text(message.key, _VISIBLE)
    if message.event_time:
        headers["X-Pulsar-event-time"] = _iso_ms(message.event_time)
    if message.null_value:  # Pulsar's header, sent only for a null value
        headers["X-Pulsar-null-value"] = "true"
    for key, value in message.properties.items():
        headers[f"X-Pulsar-PROPERTY-{_header_text(key, _TOKEN)}"] = _header_text(value, _VISIBLE)
    headers["Content-Type"] = "application/octet-stream"
    return headers, message.payload


# What may stand in an HTTP header as is: a name's token characters (RFC 9110), a value's
# visible ASCII and space. Anything else in a client's key, value or name is percent-encoded,
# and so is %, so that a reader can always decode.
_TOKEN = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_VISIBLE = frozenset(chr(c) for c in range(0x20, 0x7F))


def _header_text(text: str, allowed: frozenset[str]) -> str:
    """``text`` with every character not ``allowed``, and every %, percent-encoded (UTF-8)."""
    return "".join(c if c in allowed and c != "%" else quote(c, safe="") for c in text)


def _iso_ms(ms: int) -> str:
    moment = dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
