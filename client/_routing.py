"""Choosing the partition of a message, as Pulsar's Java client does.

A message with a key goes to ``murmur3_32(key) & 0x7fffffff % partitions`` (Pulsar's
``Murmur3_32Hash`` with seed 0 and ``signSafeMod``), so a Java, C++ or this client put a key on
the same partition. The hash is mmh3's (MurmurHash3 x86 32-bit in C): a keyed send hashes its
key every time, and the pure-Python hash cost more than the rest of the send.

Messages without a key follow the routing mode (pulsar-client's ``PartitionsRoutingMode``):

- ``RoundRobinDistribution`` (Pulsar's RoundRobinPartition with batching): every partition in
  turn, one batching window (``batching_max_publish_delay_ms``) each, so that a batch fills up
  on one partition instead of being scattered over all of them;
- ``UseSinglePartition``: one partition picked at random when the producer is created.

A ``message_router`` (pulsar-client's custom router, ``CustomPartition``) decides instead, for
every message, keyed or not: it is called with the message being sent and the partition count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from enum import StrEnum
from typing import Any

import mmh3


class PartitionsRoutingMode(StrEnum):
    """Where messages without a key go (pulsar-client's names; the values are what the CLI
    and string options take)."""

    RoundRobinDistribution = "round_robin"
    UseSinglePartition = "single"
    CustomPartition = "custom"  # a message_router chooses (pulsar-client sets it for one)


class RoutedMessage:
    """The message a custom ``message_router`` is asked about: the one being sent, with the
    accessors of pulsar-client's ``Message`` that exist before it is stored (pulsar-client
    hands its router the outgoing message the same way)."""

    __slots__ = ("_event_timestamp", "_key", "_ordering_key", "_payload", "_properties", "_value")

    def __init__(
        self,
        value: Any,
        payload: bytes | None,
        partition_key: str | None,
        ordering_key: bytes | None,
        properties: dict[str, str] | None,
        event_timestamp: int | None,
    ) -> None:
        self._value = value
        self._payload = payload
        self._key = partition_key
        self._ordering_key = ordering_key
        self._properties = properties
        self._event_timestamp = event_timestamp

    def data(self) -> bytes:
        return self._payload or b""

    def value(self) -> Any:
        return self._value

    def partition_key(self) -> str:
        return self._key or ""

    def ordering_key(self) -> str:
        return (self._ordering_key or b"").decode("utf-8", "replace")

    def properties(self) -> dict[str, str]:
        return dict(self._properties or {})

    def event_timestamp(self) -> int:
        return self._event_timestamp or 0

    def has_null_value(self) -> bool:
        return self._payload is None


# pulsar-client's message_router: (the message, the partition count) -> the partition index.
MessageRouter = Callable[[RoutedMessage, int], int]


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """MurmurHash3 x86 32-bit, unsigned (Pulsar's ``Murmur3_32Hash`` with seed 0).

    >>> hex(murmur3_32(b"The quick brown fox jumps over the lazy dog"))
    '0x2e4ff723'
    """
    return mmh3.hash(data, seed, signed=False)


def partition_for_key(key: str, partitions: int) -> int:
    """The partition Pulsar chooses for ``key``.

    >>> partition_for_key("user-42", 4) == partition_for_key("user-42", 4)
    True
    """
    return (murmur3_32(key.encode()) & 0x7FFFFFFF) % partitions


class Router:
    """Chooses the partition of each message of a partitioned producer.

    ``clock`` returns milliseconds; it is a parameter so tests can drive the windows.

    >>> router = Router(4, PartitionsRoutingMode.UseSinglePartition, batching_delay_ms=10)
    >>> router.choose("k") == partition_for_key("k", 4)
    True
    """

    def __init__(
        self,
        partitions: int,
        mode: PartitionsRoutingMode | str = PartitionsRoutingMode.RoundRobinDistribution,
        batching_delay_ms: float = 10,
        clock: Callable[[], float] | None = None,
        custom: MessageRouter | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError("a router needs at least one partition")
        self.partitions = partitions
        self.mode = PartitionsRoutingMode.CustomPartition if custom else PartitionsRoutingMode(mode)
        if self.mode is PartitionsRoutingMode.CustomPartition and custom is None:
            raise ValueError("message_routing_mode CustomPartition needs a message_router")
        self.custom = custom
        self._switch_ms = max(1.0, batching_delay_ms)
        self._clock = clock or (lambda: time.monotonic() * 1000)
        # A random start spreads producers that start together over different partitions.
        self._offset = random.randrange(partitions)

    def route(self, message: RoutedMessage) -> int:
        """The partition the custom router chooses for ``message``, checked: an index outside
        the topic's partitions would send the message nowhere."""
        assert self.custom is not None
        index = self.custom(message, self.partitions)
        if type(index) is not int or not 0 <= index < self.partitions:
            raise ValueError(
                f"message_router returned {index!r}: not a partition index of a topic with "
                f"{self.partitions} partitions (0..{self.partitions - 1})"
            )
        return index

    def choose(self, key: str | None) -> int:
        """The partition index for a message with this key (None or "" = no key)."""
        if key:
            return partition_for_key(key, self.partitions)
        if self.mode is PartitionsRoutingMode.UseSinglePartition:
            return self._offset
        window = int(self._clock() // self._switch_ms)
        return (self._offset + window) % self.partitions
