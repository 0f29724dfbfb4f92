"""The seam between the broker and a protocol handler's consumer stream (Pulsar's TransportCnx).

A handler implements :class:`ConsumerTransport` for each consumer it opens; the broker calls it
to push messages and state changes. Calls are synchronous and never block. Permits alone do not
bound what a handler queues (a client may grant 2^32 and not read), so a transport also says
whether it can take more messages now (:meth:`ConsumerTransport.writable`, Netty's
``isWritable`` in Pulsar) and calls back when it has drained: dispatch waits for that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.ledger import Position


@dataclass(slots=True, frozen=True)
class Delivery:
    """One entry sent to one consumer."""

    position: Position
    data: bytes
    redelivery_count: int
    # The batch indexes acked before this delivery, as a bit set (bit i = index i; 0: none):
    # a redelivery of a partly acked batch lists them without a Python step per message.
    acked_indexes: int
    num_messages: int  # messages delivered: the batch less its acked indexes
    batch_size: int


class ConsumerTransport(Protocol):
    def send_messages(self, deliveries: list[Delivery]) -> None:
        """Send entries; the broker has already charged the consumer's permits."""

    def send_active_change(self, is_active: bool) -> None:
        """Failover: tell the consumer it became (or stopped being) the active one."""

    def close(self, error: BrokerError | None = None) -> None:
        """The broker ends the consumer (topic unloaded, unsubscribed, fenced)."""

    def writable(self) -> bool:
        """False while the messages sent and not yet written out reach the transport's bound:
        the dispatcher sends this consumer nothing more until it has drained."""

    def on_writable(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` each time the transport becomes writable again."""
