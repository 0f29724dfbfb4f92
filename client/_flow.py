"""Consumer flow control: how many permits to grant the broker, and when.

As Pulsar's ConsumerImpl: the consumer grants ``receiver_queue_size`` permits once, then counts
the messages the application took and grants them back in one Flow when they reach half the
queue, so a busy consumer sends one Flow per ``receiver_queue_size / 2`` messages.

A queue size of 0 is Pulsar's zero-queue consumer: no permits up front and none given back;
the consumer grants one permit per ``receive()`` instead (see ``PartitionConsumer.want_one``).
"""

from __future__ import annotations


class PermitTracker:
    """Counts consumed messages and says when to refill.

    >>> t = PermitTracker(receiver_queue_size=4)
    >>> t.initial_permits()
    4
    >>> t.consumed(), t.consumed()
    (0, 2)
    """

    def __init__(self, receiver_queue_size: int) -> None:
        if receiver_queue_size < 0:
            raise ValueError("receiver_queue_size must be at least 0")
        self.receiver_queue_size = receiver_queue_size
        self.threshold = max(1, receiver_queue_size // 2)
        self._available = 0

    def initial_permits(self) -> int:
        """Permits of the first Flow, sent right after subscribing."""
        return self.receiver_queue_size

    def consumed(self, count: int = 1) -> int:
        """Record ``count`` messages handed out or dropped; return the permits to send now."""
        if not self.receiver_queue_size:
            return 0
        self._available += count
        if self._available < self.threshold:
            return 0
        permits, self._available = self._available, 0
        return permits
