"""Grouping of acknowledgements and negative acknowledgements into few Ack requests.

The consumer adds acks as the application makes them; it sends :meth:`AckGroup.take` when its
group timer fires (a millisecond or so) or at once when :meth:`AckGroup.index` says the group
is full. Cumulative acks keep only the highest id, since it covers all lower ones. Once every
delivered message of an entry (a produced batch) is acked, the entry goes out as one id with
batch index -1 instead of one id per message: the broker then acks the entry whole, and the
request is a hundred times smaller for batches of a hundred.

Adding an ack is O(1) and builds nothing for the wire: an ack of a delivered message is an
index added to its entry's set; the protobuf ids are built once per flush, one per entry
whole (or per index acked since the last flush, for an entry acked only in part so far).
"""

from __future__ import annotations

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._message_id import MessageId

EntryKey = tuple[int, int]  # (ledger id, entry id)
# (ledger id, entry id, batch index, partition): an ack outside any tracked entry.
LooseId = tuple[int, int, int, int]

_NOTHING_SENT: frozenset[int] = frozenset()


class _EntryAcks:
    """The acks of one delivered entry that is not fully acked yet."""

    __slots__ = ("acked", "count", "partition", "sent")

    def __init__(self, count: int, partition: int) -> None:
        self.count = count  # messages of the entry handed to the application
        self.partition = partition
        self.acked: set[int] = set()  # batch indexes the application acked
        self.sent: frozenset[int] | set[int] = _NOTHING_SENT  # of those, already on the wire


class AckGroup:
    """Pending acks of one consumer stream.

    >>> g = AckGroup(max_pending=1000)
    >>> g.delivered(1, 2, 2)
    >>> g.index((1, 2), 0, -1), g.individual(MessageId(-1, 1, 2, 1))
    (False, None)
    >>> [i.batch_index for r in g.take() for i in r.ack.ids]
    [-1]
    """

    def __init__(self, max_pending: int = 1000) -> None:
        self.max_pending = max_pending
        self._pending = 0  # acks and nacks added since the last take (duplicates counted)
        # Acks of messages outside any tracked entry, and nacks: one wire id each.
        self._loose: dict[LooseId, None] = {}
        self._cumulative: MessageId | None = None
        self._negative: dict[MessageId, None] = {}
        # Entries delivered and not fully acked, and those of them acked since the last take.
        self._entries: dict[EntryKey, _EntryAcks] = {}
        self._touched: dict[EntryKey, _EntryAcks] = {}

    def __len__(self) -> int:
        return self._pending

    def delivered(self, ledger_id: int, entry_id: int, count: int, partition: int = -1) -> None:
        """An entry arrived with ``count`` messages to hand to the application."""
        self._entries[(ledger_id, entry_id)] = _EntryAcks(count, partition)

    def forget_deliveries(self) -> None:
        """Queued messages were dropped (seek, redelivery): they will be delivered anew.
        Acks already added stay and go out with the next take."""
        self._entries.clear()

    def index(self, key: EntryKey, batch_index: int, partition: int) -> bool:
        """Ack message ``batch_index`` of entry ``key`` (duplicates collapse); return whether
        the group is full and should be sent now. The hot path of a consumer's acks."""
        tracked = self._entries.get(key)
        if tracked is None or batch_index < 0:  # -1: a whole entry (an undecrypted batch)
            self._loose[(*key, batch_index, partition)] = None
        else:
            tracked.acked.add(batch_index)
            self._touched[key] = tracked
        self._pending += 1
        return self._pending >= self.max_pending

    def individual(self, message_id: MessageId) -> None:
        """Ack one message by its id (duplicates collapse)."""
        ledger_id, entry_id, batch_index, partition = _sendable(message_id)
        self.index((ledger_id, entry_id), batch_index, partition)

    def cumulative(self, message_id: MessageId) -> None:
        """Ack every message up to and including ``message_id``."""
        _sendable(message_id)
        if self._cumulative is None or message_id > self._cumulative:
            self._cumulative = message_id
        self._pending += 1

    def negative(self, message_id: MessageId) -> None:
        """Ask for the redelivery of one message."""
        self._negative[_sendable(message_id)] = None
        self._pending += 1

    def is_full(self) -> bool:
        """Whether to send now instead of waiting for the group timer."""
        return self._pending >= self.max_pending

    def take(self) -> list[pb.ConsumeRequest]:
        """The requests to send (individual acks, cumulative ack, nacks), emptying the group."""
        out: list[pb.ConsumeRequest] = []
        ids = [_wire_id(*loose) for loose in self._loose]
        if self._touched:
            ids.extend(self._entry_ids())
        if ids:
            out.append(pb.ConsumeRequest(ack=pb.Ack(type=pb.Individual, ids=ids)))
        if self._cumulative is not None:
            ack = pb.Ack(type=pb.Cumulative, ids=[self._cumulative.to_proto()])
            out.append(pb.ConsumeRequest(ack=ack))
        if self._negative:
            nack = pb.NegativeAck(ids=[m.to_proto() for m in self._negative])
            out.append(pb.ConsumeRequest(negative_ack=nack))
        self._loose, self._cumulative, self._negative, self._touched = {}, None, {}, {}
        self._pending = 0
        return out

    def _entry_ids(self) -> list[pb.MessageId]:
        """Wire ids of the entries acked since the last take: one with batch index -1 for
        an entry now fully acked, else one per index not sent yet."""
        ids: list[pb.MessageId] = []
        for key, tracked in self._touched.items():
            ledger_id, entry_id = key
            if len(tracked.acked) >= tracked.count:
                ids.append(_wire_id(ledger_id, entry_id, -1, tracked.partition))
                if self._entries.get(key) is tracked:
                    del self._entries[key]
                continue
            ids.extend(
                _wire_id(ledger_id, entry_id, i, tracked.partition)
                for i in sorted(tracked.acked - tracked.sent)
            )
            tracked.sent = set(tracked.acked)
        return ids


def _sendable(message_id: MessageId) -> MessageId:
    """``message_id``, checked when the application acks it rather than when the group goes
    out (a bad id must not take the other acks of its group down with it)."""
    if message_id.ledger_id() < 0 or message_id.entry_id() < 0:
        raise ValueError(f"message id {message_id} cannot be sent to the broker")
    return message_id


def _wire_id(ledger_id: int, entry_id: int, batch_index: int, partition: int) -> pb.MessageId:
    return pb.MessageId(
        ledger_id=ledger_id, entry_id=entry_id, batch_index=batch_index, partition=partition
    )
