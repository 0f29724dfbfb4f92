"""The producer's batch container: messages waiting to go out as one ProduceRequest.

A batch is sent when it holds ``max_messages`` messages or ``max_bytes`` bytes, or when the
producer's delay timer fires (the producer owns the timer; this class is pure bookkeeping).
Messages arrive serialized. One that would push a non-empty batch over ``max_bytes`` starts
the next batch instead, and one bigger than ``max_bytes`` travels alone, as in Pulsar.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from ._wire import encode_request

T = TypeVar("T")


class BatchContainer(Generic[T]):
    """Collects serialized messages with one token each (the producer's futures).

    >>> c = BatchContainer[int](max_messages=2, max_bytes=1000)
    >>> c.add(encode_message(b"a"), 1)
    >>> c.is_full()
    False
    >>> c.add(encode_message(b"b"), 2)
    >>> c.is_full()
    True
    >>> [m.payload for m in pb.ProduceRequest.FromString(c.drain(sequence_id=5)[0]).messages]
    [b'a', b'b']
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("batching_max_messages and batching_max_bytes must be positive")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._messages: list[bytes] = []
        self._tokens: list[T] = []
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def num_bytes(self) -> int:
        """Serialized size of the messages in the batch."""
        return self._bytes

    def fits(self, message: bytes) -> bool:
        """Whether ``message`` may join this batch; if not, send the batch first."""
        if not self._messages:
            return True
        return (
            len(self._messages) < self.max_messages and self._bytes + len(message) <= self.max_bytes
        )

    def add(self, message: bytes, token: T) -> None:
        """Append a serialized message; the caller checked :meth:`fits`."""
        self._messages.append(message)
        self._tokens.append(token)
        self._bytes += len(message)

    def is_full(self) -> bool:
        """Whether the batch must be sent now."""
        return len(self._messages) >= self.max_messages or self._bytes >= self.max_bytes

    def drain(self, sequence_id: int) -> tuple[bytes, list[T]]:
        """Empty the container into one serialized ProduceRequest whose first message has
        ``sequence_id``."""
        request = encode_request(sequence_id, self._messages)
        tokens = self._tokens
        self._messages, self._tokens, self._bytes = [], [], 0
        return request, tokens
