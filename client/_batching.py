"""The producer's batch container: messages waiting to go out as one ProduceRequest.

A batch is sent when it holds ``max_messages`` messages or ``max_bytes`` bytes, or when the
producer's delay timer fires (the producer owns the timer; this class is pure bookkeeping).
Messages arrive serialized. One that would push a non-empty batch over ``max_bytes`` starts
the next batch instead, and one bigger than ``max_bytes`` travels alone, as in Pulsar.

Two containers, as Pulsar's BatcherBuilder: :class:`BatchContainer` puts messages in one batch
whatever their keys (the default), :class:`KeyBasedBatchContainer` keeps one batch per key (the
ordering key if set, else the key). A Key_Shared subscription dispatches a whole entry to the
consumer of its first message's key, so a batching producer whose batches mix keys breaks the
per-key affinity and order there; key-based batching keeps every entry to one key.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Generic, Protocol, TypeVar

from ._compression import CompressionType, Sealer
from ._wire import encode_request

T = TypeVar("T")
BatchKey = str | bytes | None
# One ProduceRequest: the sequence id of its first message, its bytes, its messages' tokens.
Drained = list[tuple[int, bytes, list[T]]]


class Container(Protocol[T]):
    """What the producer needs of a batch container."""

    def __len__(self) -> int: ...

    def fits(self, message: bytes, key: BatchKey = None) -> bool: ...

    def add(self, message: bytes, token: T, key: BatchKey = None) -> None: ...

    def is_full(self) -> bool: ...

    def drain(self, sequence_id: int) -> Drained[T]: ...


class BatchingType(StrEnum):
    """How a producer groups messages into batches (Pulsar's BatcherBuilder)."""

    Default = "default"  # one batch for all keys
    KeyBased = "key_based"  # one batch per key: use with Key_Shared subscriptions


def batch_container(
    batching_type: BatchingType | str,
    max_messages: int,
    max_bytes: int,
    codec: CompressionType = CompressionType.NONE,
    sealer: Sealer | None = None,
) -> Container[T]:
    """The container for a producer's ``batching_type``; each batch it drains is compressed
    with ``codec`` (see ``_compression``), then encrypted by ``sealer`` (see ``_crypto``)."""
    if BatchingType(batching_type) is BatchingType.KeyBased:
        return KeyBasedBatchContainer(max_messages, max_bytes, codec, sealer)
    return BatchContainer(max_messages, max_bytes, codec, sealer)


def _key_bytes(key: BatchKey) -> bytes:
    if key is None:
        return b""
    return key.encode() if isinstance(key, str) else key


class BatchContainer(Generic[T]):
    """Collects serialized messages with one token each (the producer's futures).

    >>> c = BatchContainer[int](max_messages=2, max_bytes=1000)
    >>> c.add(encode_message(b"a"), 1)
    >>> c.is_full()
    False
    >>> c.add(encode_message(b"b"), 2)
    >>> c.is_full()
    True
    >>> [(seq, len(tokens)) for seq, _, tokens in c.drain(sequence_id=5)]
    [(5, 2)]
    """

    def __init__(
        self,
        max_messages: int,
        max_bytes: int,
        codec: CompressionType = CompressionType.NONE,
        sealer: Sealer | None = None,
    ) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError(
                "batching_max_messages and batching_max_allowed_size_in_bytes must be positive"
            )
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.codec = codec
        self.sealer = sealer
        self._messages: list[bytes] = []
        self._tokens: list[T] = []
        self._bytes = 0
        self._first_key: BatchKey = None  # the Key_Shared key of a compressed batch

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def num_bytes(self) -> int:
        """Serialized size of the messages in the batch."""
        return self._bytes

    def fits(self, message: bytes, key: BatchKey = None) -> bool:
        """Whether ``message`` may join this batch; if not, send the batch first."""
        if not self._messages:
            return True
        return (
            len(self._messages) < self.max_messages and self._bytes + len(message) <= self.max_bytes
        )

    def add(self, message: bytes, token: T, key: BatchKey = None) -> None:
        """Append a serialized message; the caller checked :meth:`fits`."""
        if not self._messages:
            self._first_key = key
        self._messages.append(message)
        self._tokens.append(token)
        self._bytes += len(message)

    def is_full(self) -> bool:
        """Whether the batch must be sent now."""
        return len(self._messages) >= self.max_messages or self._bytes >= self.max_bytes

    def drain(self, sequence_id: int) -> Drained[T]:
        """Empty the container into one serialized ProduceRequest whose first message has
        ``sequence_id`` (none when empty)."""
        if not self._messages:
            return []
        request = encode_request(
            sequence_id, self._messages, self.codec, _key_bytes(self._first_key), self.sealer
        )
        tokens = self._tokens
        self._messages, self._tokens, self._bytes = [], [], 0
        return [(sequence_id, request, tokens)]


class KeyBasedBatchContainer(Generic[T]):
    """One batch per key, as Pulsar's BatchMessageKeyBasedContainer: the limits count the
    messages and bytes of all keys together, and a drain sends every key's batch, in the order
    the keys first arrived, with consecutive sequence ids.

    >>> c = KeyBasedBatchContainer[int](max_messages=10, max_bytes=1000)
    >>> for i, key in enumerate(["a", "b", "a"]):
    ...     c.add(encode_message(b"x"), i, key)
    >>> [(seq, tokens) for seq, _, tokens in c.drain(sequence_id=5)]
    [(5, [0, 2]), (7, [1])]
    """

    def __init__(
        self,
        max_messages: int,
        max_bytes: int,
        codec: CompressionType = CompressionType.NONE,
        sealer: Sealer | None = None,
    ) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError(
                "batching_max_messages and batching_max_allowed_size_in_bytes must be positive"
            )
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.codec = codec
        self.sealer = sealer
        self._batches: dict[BatchKey, tuple[list[bytes], list[T]]] = {}
        self._count = 0
        self._bytes = 0

    def __len__(self) -> int:
        return self._count

    @property
    def num_bytes(self) -> int:
        """Serialized size of the messages of every key."""
        return self._bytes

    def fits(self, message: bytes, key: BatchKey = None) -> bool:
        """Whether ``message`` may join; if not, send the batches first."""
        if not self._count:
            return True
        return self._count < self.max_messages and self._bytes + len(message) <= self.max_bytes

    def add(self, message: bytes, token: T, key: BatchKey = None) -> None:
        """Append a serialized message to its key's batch; the caller checked :meth:`fits`."""
        batch = self._batches.get(key)
        if batch is None:
            batch = self._batches[key] = ([], [])
        batch[0].append(message)
        batch[1].append(token)
        self._count += 1
        self._bytes += len(message)

    def is_full(self) -> bool:
        """Whether the batches must be sent now."""
        return self._count >= self.max_messages or self._bytes >= self.max_bytes

    def drain(self, sequence_id: int) -> Drained[T]:
        """One ProduceRequest per key; the first starts at ``sequence_id``."""
        out: Drained[T] = []
        for key, (messages, tokens) in self._batches.items():
            request = encode_request(
                sequence_id, messages, self.codec, _key_bytes(key), self.sealer
            )
            out.append((sequence_id, request, tokens))
            sequence_id += len(messages)
        self._batches, self._count, self._bytes = {}, 0, 0
        return out
