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
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from enum import StrEnum

import mmh3


class PartitionsRoutingMode(StrEnum):
    """Where messages without a key go (pulsar-client's names; the values are what the CLI
    and string options take)."""

    RoundRobinDistribution = "round_robin"
    UseSinglePartition = "single"


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
    ) -> None:
        if partitions < 1:
            raise ValueError("a router needs at least one partition")
        self.partitions = partitions
        self.mode = PartitionsRoutingMode(mode)
        self._switch_ms = max(1.0, batching_delay_ms)
        self._clock = clock or (lambda: time.monotonic() * 1000)
        # A random start spreads producers that start together over different partitions.
        self._offset = random.randrange(partitions)

    def choose(self, key: str | None) -> int:
        """The partition index for a message with this key (None or "" = no key)."""
        if key:
            return partition_for_key(key, self.partitions)
        if self.mode is PartitionsRoutingMode.UseSinglePartition:
            return self._offset
        window = int(self._clock() // self._switch_ms)
        return (self._offset + window) % self.partitions
