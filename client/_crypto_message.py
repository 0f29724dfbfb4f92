"""What a consumer does with a batch it cannot decrypt: its ConsumerCryptoFailureAction.

- FAIL (the default), as pulsar-client's: the batch is held back, never delivered (logged as an
  error); ``receive`` waits on for other messages and times out if none comes. Nothing is
  acknowledged: the broker redelivers the batch later (ack timeout,
  ``redeliver_unacknowledged_messages``, the consumer closing), e.g. to a consumer with the
  key. A reader counts it as read (``has_message_available`` does not wait for it).
- RAISE (this SDK's): as FAIL, but taking the batch's place (``receive``, ``read_next``,
  ``batch_receive``) raises :class:`CryptoError` naming the entry and why.
- DISCARD: the batch is acknowledged whole and dropped; a warning says so.
- CONSUME: the application gets one :class:`EncryptedMessage` for the whole batch: ``data()``
  is the encrypted bytes, ``encryption_context()`` says how to decrypt them, and
  acknowledging it acknowledges the batch.

The broker charged one permit per message of the batch: those the application will not take
one by one are given back at once, so the receiver queue keeps its size.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._crypto import ConsumerCryptoFailureAction, CryptoFailure, EncryptionContext
from ._errors import CryptoError, PulsarException
from ._message import EntryOrigin, Message
from ._message_id import MessageId

log = logging.getLogger(__name__)


class ReadingStream(Protocol):
    """What :func:`undecryptable` needs of the partition consumer that read the entry (named
    here so that this module, which the consumer imports, need not import the consumer)."""

    @property
    def topic(self) -> str: ...

    @property
    def partition(self) -> int: ...

    def acknowledge(self, message_id: MessageId) -> None: ...

    def consumed(self, count: int) -> None: ...


class EncryptedMessage(Message):
    """A whole batch still encrypted: its id is the entry's (batch index -1), its payload the
    encrypted ``messages`` bytes; ``partition_key()`` is the batch's key in clear (the first
    message's ordering key, else its key)."""

    __slots__ = ("_failure",)

    def __init__(
        self,
        entry: pb.DeliveredEntry,
        partition: int,
        topic_name: str,
        topic_ids: bool,
        failure: CryptoFailure,
    ) -> None:
        super().__init__(EntryOrigin(entry, partition, topic_name, topic_ids, None), -1)
        self._failure = failure

    def raise_if_failed(self) -> None:
        """Under RAISE, the error the application gets instead of this message; the error's
        ``position`` says how far a reader got (:meth:`last_position`)."""
        if self._failure.action is ConsumerCryptoFailureAction.RAISE:
            error = CryptoError(
                f"{self._failure.reason} (crypto_failure_action=RAISE: not acknowledged, the "
                "broker redelivers it)"
            )
            error.position = self.last_position()
            raise error

    def held_back(self) -> bool:
        """Under FAIL: never given to the application (pulsar-client's consumer holds it)."""
        return self._failure.action is ConsumerCryptoFailureAction.FAIL

    def last_position(self) -> MessageId:
        """The id of the batch's last message: what the broker's last message id is when this
        batch ends the topic (a reader compares the two to know it read everything)."""
        entry = self._origin.entry
        last = max(entry.compressed.num_messages - 1, 0)
        return MessageId(
            ledger_id=entry.ledger_id,
            entry_id=entry.entry_id,
            batch_index=last,
            partition=self._origin.partition,
        )

    def encryption_context(self) -> EncryptionContext | None:
        """How the payload is encrypted (keys, algorithm, nonce, compression, sizes)."""
        return EncryptionContext.of(self._origin.entry.compressed)

    def data(self) -> bytes:
        """The encrypted batch, as the producer sent it."""
        return self._origin.entry.compressed.messages

    def value(self) -> Any:
        """The encrypted bytes: no schema can read them."""
        return self.data()

    def has_null_value(self) -> bool:
        """The batch's values are encrypted, null ones too: False."""
        return False

    def partition_key(self) -> str:
        """The batch's key in clear."""
        return self._origin.entry.compressed.key.decode(errors="replace")

    def ordering_key(self) -> str:
        """Not known apart from the key: empty."""
        return ""

    def properties(self) -> dict[str, str]:
        """Encrypted with the payloads: empty."""
        return {}

    def event_timestamp(self) -> int:
        """Encrypted with the payloads: 0."""
        return 0

    def sequence_id(self) -> int:
        """The sequence id of the batch's first message."""
        return self._origin.entry.sequence_id


def failed_decryption(message: Message) -> bool:
    """Whether taking ``message`` raises (an undecryptable batch under RAISE)."""
    return (
        isinstance(message, EncryptedMessage)
        and message._failure.action is ConsumerCryptoFailureAction.RAISE
    )


def undecryptable(
    entry: pb.DeliveredEntry, failure: CryptoFailure, stream: ReadingStream, topic_ids: bool
) -> list[Message]:
    """The messages ``stream`` queues for an entry it could not decrypt (see the module doc);
    gives back the permits of the batch's other messages, and under DISCARD acks it.
    ``topic_ids``: the message's id names its topic (a multi-topic consumer's)."""
    # What the broker charged: the batch's messages less those acked before (a redelivery).
    permits = max(entry.compressed.num_messages - len(entry.acked_batch_indexes), 1)
    action, topic = failure.action, stream.topic
    if action is ConsumerCryptoFailureAction.DISCARD:
        log.warning("%s: %s: discarded (crypto_failure_action=DISCARD)", topic, failure.reason)
        with contextlib.suppress(PulsarException):  # closing: the broker redelivers it later
            stream.acknowledge(
                MessageId(
                    ledger_id=entry.ledger_id,
                    entry_id=entry.entry_id,
                    batch_index=-1,
                    partition=stream.partition,
                )
            )
        stream.consumed(permits)
        return []
    if action in (ConsumerCryptoFailureAction.FAIL, ConsumerCryptoFailureAction.RAISE):
        log.error(
            "%s: %s: not delivered (crypto_failure_action=%s)", topic, failure.reason, action.name
        )
    if permits > 1:
        stream.consumed(permits - 1)
    return [EncryptedMessage(entry, stream.partition, topic, topic_ids, failure)]
