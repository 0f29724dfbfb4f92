"""End-to-end encryption of batches: the producer's encryptor and the consumer's decryptor.

The broker never sees a payload in clear: a producer with encryption keys serializes each
batch, compresses it (maybe with NONE), then encrypts it with AES-256-GCM under a data key
and a fresh 12-byte nonce, and sends a ``CompressedBatch`` whose ``encryption`` says how
(the data key wrapped for each named key, the algorithm, the nonce). The message count and
the Key_Shared key stay in clear, so the broker counts and routes without reading. The data
key is made when the producer starts and again every :data:`DATA_KEY_ROTATION_S` (Pulsar's
4 hours), not per message: wrapping it costs an RSA or ECDH operation per key.

A consumer unwraps the data key with the first of the batch's keys its CryptoKeyReader has
a private key for (unwrapped keys are cached by their wrapped bytes, so a batch then costs
one AES-GCM), decrypts, and hands the batch on to decompression. When it cannot, its
:class:`ConsumerCryptoFailureAction` decides (see ``_crypto_message``). Formats:
docs/protocol.md, "End-to-end encryption".
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Generic, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._compression import CompressionType
from ._crypto_keys import (
    DATA_KEY_SIZE,
    NONCE_SIZE,
    EncryptionKeyInfo,
    KeyReader,
    PrivateKey,
    PublicKey,
    load_private_key,
    load_public_key,
    unwrap,
    wrap,
)
from ._errors import CryptoError

log = logging.getLogger(__name__)

ALGORITHM = "AES-256-GCM"
DATA_KEY_ROTATION_S = 4 * 3600.0  # Pulsar's producer renews its data key every 4 hours
DATA_KEY_CACHE_SIZE = 100  # unwrapped data keys a consumer keeps (a producer rotates rarely)
MISS_RETRY_S = 30.0  # how long a consumer trusts that its reader has no key for a data key
# Keys of one batch a consumer tries: a producer names a few, and each try may cost a private
# key operation, so a batch listing thousands (anyone who may produce can send one) must not
# hold the consumer's event loop for minutes.
MAX_KEYS_TRIED = 16
# Private keys kept loaded, by their PEM bytes: loading and checking an RSA key costs ~35 ms,
# and a reader typically gives the same key for every name it is asked.
PRIVATE_KEY_CACHE_SIZE = 16


class ConsumerCryptoFailureAction(IntEnum):
    """What a consumer does with a batch it cannot decrypt (Pulsar's names and numbers)."""

    FAIL = 0  # held back, as pulsar-client's: receive() waits on (times out), batch unacked
    DISCARD = 1  # acknowledged and dropped (logged)
    CONSUME = 2  # given as one message: the encrypted bytes and their encryption_context()
    # This SDK's own: receive() raises CryptoError in the batch's place, which stays unacked
    # (what FAIL did before issue 26; the CLI and the Spark source fail with it).
    RAISE = 3


@dataclass(frozen=True, slots=True)
class EncryptionKey:
    """One wrapped data key of a batch: the key's name, the data key encrypted with its
    public key, and the metadata the producer's CryptoKeyReader gave."""

    key: str
    value: bytes
    metadata: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class EncryptionContext:
    """How a batch was encrypted, as Pulsar's ``Message.getEncryptionCtx()``: what an
    application holding encrypted bytes (``ConsumerCryptoFailureAction.CONSUME``) needs to
    decrypt them itself."""

    keys: tuple[EncryptionKey, ...]
    algorithm: str
    param: bytes  # the nonce
    compression_type: CompressionType | int  # applied before encryption (an int: unknown here)
    uncompressed_message_size: int
    batch_size: int

    @classmethod
    def of(cls, batch: pb.CompressedBatch) -> EncryptionContext:
        """The context of an encrypted CompressedBatch."""
        encryption = batch.encryption
        codec: CompressionType | int = batch.compression
        with contextlib.suppress(ValueError):
            codec = CompressionType(batch.compression)
        return cls(
            keys=tuple(EncryptionKey(k.key, k.value, dict(k.metadata)) for k in encryption.keys),
            algorithm=encryption.algorithm,
            param=encryption.param,
            compression_type=codec,
            uncompressed_message_size=batch.uncompressed_size,
            batch_size=batch.num_messages,
        )


def decrypt_payload(data_key: bytes, nonce: bytes, ciphertext: bytes) -> bytes:
    """AES-256-GCM with no associated data, ``ciphertext`` ending in its 16-byte tag (what
    :meth:`BatchEncryptor.seal` makes); raises ``InvalidTag`` if anything was altered."""
    return AESGCM(data_key).decrypt(nonce, ciphertext, None)


class BatchEncryptor:
    """A producer's encryption: the current data key, wrapped for each named key, and the
    sealing of each batch. One per producer (its partitions share it).

    Raises :class:`CryptoError` at construction when a key's public key cannot be had, as
    Pulsar fails the producer's creation."""

    def __init__(
        self,
        key_names: Sequence[str],
        reader: KeyReader,
        rotation_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not key_names:
            raise ValueError("encryption needs at least one key name")
        self._names = list(dict.fromkeys(key_names))
        self._reader = reader
        self._rotation_s = DATA_KEY_ROTATION_S if rotation_s is None else rotation_s
        self._clock = clock
        self._public = self._load_public_keys()
        self.rotations = 0  # data keys made so far (the first included)
        self._rotate()

    def _load_public_keys(self) -> list[tuple[str, PublicKey, dict[str, str]]]:
        out = []
        for name in self._names:
            try:
                info = self._reader.get_public_key(name, {})
            except CryptoError:
                raise
            except Exception as exc:  # the application's reader: say which key it failed
                raise CryptoError(f"the CryptoKeyReader failed for key {name!r}: {exc}") from exc
            if info is None:
                raise CryptoError(f"the CryptoKeyReader has no public key {name!r}")
            out.append((name, load_public_key(name, info), dict(info.metadata)))
        return out

    def _rotate(self) -> None:
        """A new data key, wrapped for every key (public keys read anew, as Pulsar does;
        kept as they were if the reader fails now)."""
        if self.rotations:
            try:
                self._public = self._load_public_keys()
            except CryptoError as exc:
                log.warning("keeping the previous public keys for the new data key: %s", exc)
        data_key = os.urandom(DATA_KEY_SIZE)
        self._cipher = AESGCM(data_key)
        self._keys: list[pb.EncryptionKey] = [
            pb.EncryptionKey(key=name, value=wrap(public, data_key), metadata=metadata)
            for name, public, metadata in self._public
        ]
        self._rotate_at: float = self._clock() + self._rotation_s
        self.rotations += 1

    def seal(self, batch: pb.CompressedBatch) -> None:
        """Encrypt ``batch.messages`` in place and set ``batch.encryption``."""
        if self._clock() >= self._rotate_at:
            self._rotate()
        nonce = os.urandom(NONCE_SIZE)
        batch.messages = self._cipher.encrypt(nonce, batch.messages, None)
        batch.encryption.keys.extend(self._keys)
        batch.encryption.algorithm = ALGORITHM
        batch.encryption.param = nonce


@dataclass(frozen=True, slots=True)
class CryptoFailure:
    """Why an entry could not be decrypted, and what the consumer does about it."""

    action: ConsumerCryptoFailureAction
    reason: str


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A mapping that keeps its ``size`` most recently used items."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._size = size

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._size:
            self._items.popitem(last=False)


class EntryDecryptor:
    """A consumer's decryption: its CryptoKeyReader (maybe none), its failure action, and
    two bounded caches: unwrapped data keys by their wrapped bytes, and the batches' key lists
    that nothing unwrapped, so that a consumer without the key asks its reader once per data
    key (every :data:`MISS_RETRY_S`, in case it gained the key), not once per entry."""

    def __init__(
        self,
        reader: KeyReader | None = None,
        action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        cache_size: int = DATA_KEY_CACHE_SIZE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.action = ConsumerCryptoFailureAction(action)
        self._cache: _Lru[bytes, bytes] = _Lru(cache_size)
        self._misses: _Lru[bytes, float] = _Lru(cache_size)  # key list digest -> retry time
        self._private_keys: _Lru[bytes, PrivateKey] = _Lru(PRIVATE_KEY_CACHE_SIZE)
        self._clock = clock

    def decrypt(self, entry: pb.DeliveredEntry) -> CryptoFailure | None:
        """Decrypt an encrypted entry's batch in place (it is then only compressed), or say
        why not. An entry that is not encrypted is left alone."""
        if not entry.HasField("compressed") or not entry.compressed.HasField("encryption"):
            return None
        batch = entry.compressed
        encryption = batch.encryption
        where = f"entry {entry.ledger_id}:{entry.entry_id}"
        if encryption.algorithm != ALGORITHM or len(encryption.param) != NONCE_SIZE:
            return self._failed(
                f"{where} is encrypted with {encryption.algorithm!r} and a "
                f"{len(encryption.param)}-byte nonce: this client knows {ALGORITHM} (12 bytes)"
            )
        if self.reader is None:
            return self._failed(f"{where} is encrypted and the consumer has no crypto_key_reader")
        keys = encryption.keys[:MAX_KEYS_TRIED]
        data_key = self._data_key(keys)
        if data_key is None:
            names = ", ".join(repr(k.key[:64]) for k in keys[:4]) or "none"
            if len(encryption.keys) > 4:
                names += f" and {len(encryption.keys) - 4} more"
            return self._failed(
                f"{where} is encrypted for keys {names}: the crypto_key_reader has no private "
                "key that unwraps its data key"
            )
        try:
            plain = decrypt_payload(data_key, encryption.param, batch.messages)
        except InvalidTag:
            return self._failed(f"{where} does not decrypt: its AES-GCM tag does not verify")
        batch.messages = plain
        batch.ClearField("encryption")
        return None

    def _failed(self, reason: str) -> CryptoFailure:
        return CryptoFailure(self.action, reason)

    def _data_key(self, keys: Sequence[pb.EncryptionKey]) -> bytes | None:
        """The data key: cached, or unwrapped with the first private key that fits."""
        for key in keys:
            cached = self._cache.get(key.value)
            if cached is not None:
                return cached
        digest = hashlib.sha256(b"".join(k.SerializeToString() for k in keys)).digest()
        retry_at = self._misses.get(digest)
        if retry_at is not None and self._clock() < retry_at:
            return None
        data_key = self._unwrap(keys)
        if data_key is None:
            self._misses.put(digest, self._clock() + MISS_RETRY_S)
        return data_key

    def _unwrap(self, keys: Sequence[pb.EncryptionKey]) -> bytes | None:
        assert self.reader is not None
        for key in keys:
            try:
                info = self.reader.get_private_key(key.key, dict(key.metadata))
                if info is None:
                    continue
                data_key = unwrap(self._private_key(key.key, info), key.value)
            except Exception as exc:  # the reader's, the key's or the unwrapping's
                log.debug("key %r does not unwrap the data key: %s", key.key, exc)
                continue
            self._cache.put(key.value, data_key)
            return data_key
        return None

    def _private_key(self, name: str, info: EncryptionKeyInfo) -> PrivateKey:
        """``info``'s key, loaded once for all the names a reader gives it under."""
        key = self._private_keys.get(info.key)
        if key is None:
            key = load_private_key(name, info)
            self._private_keys.put(info.key, key)
        return key


def producer_encryptor(
    encryption_key: str | Sequence[str] | None, reader: KeyReader | None
) -> BatchEncryptor | None:
    """``create_producer``'s encryption_key and crypto_key_reader: the producer's encryptor,
    None without keys. Keys without a reader are a ValueError, as Pulsar's builder refuses."""
    names = [encryption_key] if isinstance(encryption_key, str) else list(encryption_key or ())
    if not names:
        return None
    if reader is None:
        raise ValueError("encryption_key needs a crypto_key_reader to read the public keys")
    return BatchEncryptor(names, reader)
