"""Grouping of acknowledgements and negative acknowledgements into few Ack requests.

The consumer adds ids as the application acks; it sends :meth:`AckGroup.take` when its group
timer fires (a millisecond or so) or at once when :meth:`AckGroup.is_full`. Cumulative acks
keep only the highest id, since it covers all lower ones.
"""

from __future__ import annotations

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._message import MessageId


class AckGroup:
    """Pending acks of one consumer stream.

    >>> g = AckGroup(max_pending=1000)
    >>> g.individual(MessageId(1, 2, 0, -1)); g.cumulative(MessageId(1, 5, 0, -1))
    >>> [r.WhichOneof("request") for r in g.take()]
    ['ack', 'ack']
    """

    def __init__(self, max_pending: int = 1000) -> None:
        self.max_pending = max_pending
        self._individual: dict[MessageId, None] = {}
        self._cumulative: MessageId | None = None
        self._negative: dict[MessageId, None] = {}

    def __len__(self) -> int:
        return len(self._individual) + len(self._negative) + (self._cumulative is not None)

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
            ids = [m.to_proto() for m in self._individual]
            out.append(pb.ConsumeRequest(ack=pb.Ack(type=pb.Individual, ids=ids)))
        if self._cumulative is not None:
            ack = pb.Ack(type=pb.Cumulative, ids=[self._cumulative.to_proto()])
            out.append(pb.ConsumeRequest(ack=ack))
        if self._negative:
            nack = pb.NegativeAck(ids=[m.to_proto() for m in self._negative])
            out.append(pb.ConsumeRequest(negative_ack=nack))
        self._individual, self._cumulative, self._negative = {}, None, {}
        return out
