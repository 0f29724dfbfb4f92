"""End-to-end encryption options of the source and the sink (docs/spark.md, "Encryption").

- sink: ``encryptionKeys`` (key names, comma separated) and ``publicKeyFile`` (the PEM public
  key they name): every batch a task writes is encrypted before it leaves the executor;
- source: ``privateKeyFile`` (the PEM private key) decrypts; ``cryptoFailureAction`` (``fail``,
  ``discard`` or ``consume``, Pulsar's ConsumerCryptoFailureAction) says what a task does with a
  message it cannot decrypt: ``fail`` (the default) fails the task with the SDK's error naming
  the entry, ``discard`` skips it, ``consume`` yields its encrypted bytes as the ``value``.

Pulsar's Spark connector has no options of its own for this (its producers and readers take a
CryptoKeyReader object, which an option string cannot carry); the names follow the SDK's and
Pulsar's CryptoKeyReader. The files are read where the tasks run, so they must be there (a
path on every executor, or a shared file system); the driver checks only the options' form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pulsar_grpc.client import ConsumerCryptoFailureAction, CryptoKeyReader, Message

# Pulsar's actions; the SDK's own RAISE is what "fail" reads with (the query fails).
ACTIONS = tuple(
    action.name.lower()
    for action in ConsumerCryptoFailureAction
    if action is not ConsumerCryptoFailureAction.RAISE
)


@dataclass(frozen=True)
class EncryptionOptions:
    """Picklable (plain text), turned into the SDK's keywords where a task opens a producer
    or a reader."""

    keys: tuple[str, ...] = ()
    public_key_file: str | None = None
    private_key_file: str | None = None
    failure_action: str = "fail"

    def producer_keywords(self) -> dict[str, Any]:
        """create_producer's keywords (none when the sink does not encrypt)."""
        if not self.keys:
            return {}
        reader = CryptoKeyReader(self.public_key_file, None)
        return {"encryption_key": list(self.keys), "crypto_key_reader": reader}

    def reader_keywords(self) -> dict[str, Any]:
        """create_reader's keywords: the private key (if any) and the failure action. A task
        discards by itself (:meth:`discards`): it reads what it cannot decrypt as CONSUME
        does, so the entry's id still tells it where its range ends."""
        reader = None
        if self.private_key_file is not None:
            reader = CryptoKeyReader(None, self.private_key_file)
        action = ConsumerCryptoFailureAction[self.failure_action.upper()]
        if action is ConsumerCryptoFailureAction.DISCARD:
            action = ConsumerCryptoFailureAction.CONSUME
        elif action is ConsumerCryptoFailureAction.FAIL:
            action = ConsumerCryptoFailureAction.RAISE  # the query fails with the CryptoError
        return {"crypto_key_reader": reader, "crypto_failure_action": action}

    def discards(self, message: Message) -> bool:
        """Whether ``message`` is left out of the rows: undecryptable under ``discard``."""
        return self.failure_action == "discard" and message.encryption_context() is not None
