"""End-to-end encryption keys: where they come from and how a data key is wrapped in them.

A producer encrypts each batch with a data key (see ``_crypto``) and sends that data key
wrapped in the PUBLIC key of every encryption key it names; a consumer unwraps it with the
matching PRIVATE key. Keys come from a CryptoKeyReader (Pulsar's interface): the ready-made
:class:`CryptoKeyReader` reads PEM files, and any object with ``get_public_key`` and
``get_private_key`` works too (:class:`KeyReader`).

The wrapping depends on the key's type (docs/protocol.md, "End-to-end encryption"):

- RSA: RSA-OAEP with SHA-1 and MGF1-SHA-1, no label (Pulsar's
  ``RSA/NONE/OAEPWithSHA1AndMGF1Padding``), so a Pulsar RSA key pair works unchanged.
- EC (secp256r1, secp384r1, secp521r1, secp256k1): ECIES, ours and documented: an ephemeral
  key pair on the recipient's curve, ECDH, HKDF-SHA256 (no salt, info
  :data:`ECIES_INFO`) to a 32-byte key, then AES-256-GCM of the data key. The wrapped value
  is the ephemeral public point (uncompressed SEC1) || 12-byte nonce || ciphertext and tag.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from cryptography.exceptions import InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._errors import CryptoError

ECIES_INFO = b"pulsar-grpc ecies v1"
NONCE_SIZE = 12  # AES-GCM's nonce, for batches and for ECIES
DATA_KEY_SIZE = 32  # AES-256
_OAEP = padding.OAEP(mgf=padding.MGF1(hashes.SHA1()), algorithm=hashes.SHA1(), label=None)

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass(frozen=True, slots=True)
class EncryptionKeyInfo:
    """A key as a CryptoKeyReader gives it (Pulsar's EncryptionKeyInfo): PEM bytes, and
    metadata that travels with the wrapped data key (e.g. a key version)."""

    key: bytes = field(repr=False)  # a private key's PEM must not end up in a log line
    metadata: Mapping[str, str] = field(default_factory=dict)


@runtime_checkable
class KeyReader(Protocol):
    """What a producer and a consumer ask for keys (Pulsar's CryptoKeyReader interface):
    the key of that name, or None when there is none."""

    def get_public_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None: ...

    def get_private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None: ...


class CryptoKeyReader:
    """Reads the public and the private key from PEM files, whatever the key's name, as
    pulsar-client's ``CryptoKeyReader(public_key_path, private_key_path)``. A producer needs
    only the public key, a consumer only the private one: either path may be None.

    >>> reader = CryptoKeyReader("public.pem", "private.pem")
    """

    def __init__(self, public_key_path: str | None, private_key_path: str | None) -> None:
        self.public_key_path = public_key_path
        self.private_key_path = private_key_path

    def get_public_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        """The public key file's contents (None without a path)."""
        return _read(self.public_key_path)

    def get_private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        """The private key file's contents (None without a path)."""
        return _read(self.private_key_path)


def _read(path: str | None) -> EncryptionKeyInfo | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as file:
            return EncryptionKeyInfo(file.read())
    except OSError as exc:
        raise CryptoError(f"cannot read the key file {path}: {exc.strerror}") from None


def _unsupported(name: str, exc: Exception) -> CryptoError:
    return CryptoError(
        f"key {name!r} cannot be used: {exc}. EC keys must be on a named curve (secp256r1, "
        "secp384r1, secp521r1, secp256k1); explicit parameters work only for the first three "
        "(make keys with `openssl ecparam -name secp521r1 -genkey -out private.pem`)"
    )


def load_public_key(name: str, info: EncryptionKeyInfo) -> PublicKey:
    """The RSA or EC public key in ``info`` (PEM: SubjectPublicKeyInfo, or PKCS#1 for RSA)."""
    try:
        key = serialization.load_pem_public_key(info.key)
    except UnsupportedAlgorithm as exc:
        raise _unsupported(name, exc) from None
    except ValueError as exc:
        raise CryptoError(f"key {name!r} is not a PEM public key: {exc}") from None
    if not isinstance(key, rsa.RSAPublicKey | ec.EllipticCurvePublicKey):
        raise CryptoError(f"key {name!r} is a {type(key).__name__}: only RSA and EC keys wrap")
    return key


def load_private_key(name: str, info: EncryptionKeyInfo) -> PrivateKey:
    """The RSA or EC private key in ``info`` (PEM, unencrypted: PKCS#8, PKCS#1 or SEC1, as
    ``openssl genrsa`` and ``openssl ecparam -genkey`` write them)."""
    try:
        key = serialization.load_pem_private_key(info.key, password=None)
    except UnsupportedAlgorithm as exc:
        raise _unsupported(name, exc) from None
    except (ValueError, TypeError) as exc:
        raise CryptoError(f"key {name!r} is not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey):
        raise CryptoError(f"key {name!r} is a {type(key).__name__}: only RSA and EC keys unwrap")
    return key


def _kek(shared: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=ECIES_INFO).derive(shared)


def _point_size(curve: ec.EllipticCurve) -> int:
    return 1 + 2 * ((curve.key_size + 7) // 8)


def wrap(
    public_key: PublicKey,
    data_key: bytes,
    ephemeral: ec.EllipticCurvePrivateKey | None = None,
    nonce: bytes | None = None,
) -> bytes:
    """``data_key`` encrypted for ``public_key``: RSA-OAEP, or ECIES (the module doc).

    ``ephemeral`` and ``nonce`` fix ECIES's random parts (the test vector only)."""
    if isinstance(public_key, rsa.RSAPublicKey):
        return public_key.encrypt(data_key, _OAEP)
    if ephemeral is None:
        ephemeral = ec.generate_private_key(public_key.curve)
    nonce = nonce if nonce is not None else os.urandom(NONCE_SIZE)
    kek = _kek(ephemeral.exchange(ec.ECDH(), public_key))
    point = ephemeral.public_key().public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return point + nonce + AESGCM(kek).encrypt(nonce, data_key, None)


def unwrap(private_key: PrivateKey, value: bytes) -> bytes:
    """The data key in ``value``; raises ValueError when ``private_key`` is not the one
    it was wrapped for (or ``value`` is malformed)."""
    if isinstance(private_key, rsa.RSAPrivateKey):
        data_key = private_key.decrypt(value, _OAEP)
    else:
        size = _point_size(private_key.curve)
        if len(value) != size + NONCE_SIZE + DATA_KEY_SIZE + 16:
            raise ValueError(f"an ECIES value on {private_key.curve.name} has another length")
        point = ec.EllipticCurvePublicKey.from_encoded_point(private_key.curve, value[:size])
        kek = _kek(private_key.exchange(ec.ECDH(), point))
        nonce, sealed = value[size : size + NONCE_SIZE], value[size + NONCE_SIZE :]
        try:
            data_key = AESGCM(kek).decrypt(nonce, sealed, None)
        except InvalidTag:
            raise ValueError("the ECIES tag does not verify: another key") from None
    if len(data_key) != DATA_KEY_SIZE:
        raise ValueError(f"the data key has {len(data_key)} bytes, not {DATA_KEY_SIZE}")
    return data_key
