"""Grouping of acknowledgements and negative acknowledgements into few Ack requests.

The consumer adds ids as the application acks; it sends :meth:`AckGroup.take` when its group
timer fires (a millisecond or so) or at once when :meth:`AckGroup.is_full`. Cumulative acks
keep only the highest id, since it covers all lower ones. Once every delivered message of an
entry (a produced batch) is acked, the entry goes out as one id with batch index -1 instead of
one id per message: the broker then acks the entry whole, and the request is a hundred times
smaller for batches of a hundred.
"""

from __future__ import annotations

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._message import MessageId

EntryKey = tuple[int, int]  # (ledger id, entry id)


class AckGroup:
    """Pending acks of one consumer stream.

    >>> g = AckGroup(max_pending=1000)
    >>> g.delivered(1, 2, 2)
    >>> g.individual(MessageId(1, 2, 0, -1)); g.individual(MessageId(1, 2, 1, -1))
    >>> [i.batch_index for r in g.take() for i in r.ack.ids]
    [-1]
    """

    def __init__(self, max_pending: int = 1000) -> None:
        self.max_pending = max_pending
        self._individual: dict[MessageId, None] = {}
        self._cumulative: MessageId | None = None
        self._negative: dict[MessageId, None] = {}
        # Entries delivered and not fully acked: how many of their messages were delivered,
        # and which batch indexes the application acked so far.
        self._entries: dict[EntryKey, tuple[int, set[int]]] = {}

    def __len__(self) -> int:
        return len(self._individual) + len(self._negative) + (self._cumulative is not None)

    def delivered(self, ledger_id: int, entry_id: int, count: int) -> None:
        """An entry arrived with ``count`` messages to hand to the application."""
        self._entries[(ledger_id, entry_id)] = (count, set())

    def forget_deliveries(self) -> None:
        """Queued messages were dropped (seek, redelivery): they will be delivered anew."""
        self._entries.clear()

    def individual(self, message_id: MessageId) -> None:
        """Ack one message (duplicates collapse)."""
        self._individual[message_id] = None

    def cumulative(self, message_id: MessageId) -> None:
        """Ack every message up to and including ``message_id``."""
        if self._cumulative is None or message_id > self._cumulative:
            self._cumulative = message_id

    def negative(self, message_id: MessageId) -> None:
        """Ask for the redelivery of one message."""
        self._negative[message_id] = None

    def is_full(self) -> bool:
        """Whether to send now instead of waiting for the group timer."""
        return len(self) >= self.max_pending

    def take(self) -> list[pb.ConsumeRequest]:
        """The requests to send (individual acks, cumulative ack, nacks), emptying the group."""
        out: list[pb.ConsumeRequest] = []
        if self._individual:
            ids = self._compress(list(self._individual))
            out.append(pb.ConsumeRequest(ack=pb.Ack(type=pb.Individual, ids=ids)))
        if self._cumulative is not None:
            ack = pb.Ack(type=pb.Cumulative, ids=[self._cumulative.to_proto()])
            out.append(pb.ConsumeRequest(ack=ack))
        if self._negative:
            nack = pb.NegativeAck(ids=[m.to_proto() for m in self._negative])
            out.append(pb.ConsumeRequest(negative_ack=nack))
        self._individual, self._cumulative, self._negative = {}, None, {}
        return out

    def _compress(self, message_ids: list[MessageId]) -> list[pb.MessageId]:
        """Whole entries as one id each; the rest message by message."""
        ids: list[pb.MessageId] = []
        completed: dict[EntryKey, int] = {}
        for mid in message_ids:
            key = (mid.ledger_id, mid.entry_id)
            tracked = self._entries.get(key)
            if tracked is None or mid.batch_index < 0:
                ids.append(mid.to_proto())
                continue
            count, acked = tracked
            acked.add(mid.batch_index)
            if len(acked) >= count:
                completed[key] = mid.partition
                del self._entries[key]
        for mid in message_ids:
            key = (mid.ledger_id, mid.entry_id)
            if key not in completed and key in self._entries and mid.batch_index >= 0:
                ids.append(mid.to_proto())
        for (ledger_id, entry_id), partition in completed.items():
            ids.append(
                pb.MessageId(
                    ledger_id=ledger_id, entry_id=entry_id, batch_index=-1, partition=partition
                )
            )
        return ids
