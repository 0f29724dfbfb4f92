"""The SDK's encryption without a broker: keys made by the openssl commands users run, data
key rotation, the bounded cache of unwrapped keys, and each reason a batch does not decrypt.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from pulsar_grpc.client import ConsumerCryptoFailureAction, CryptoError, CryptoKeyReader
from pulsar_grpc.client._compression import CompressionType, compress_batch, decompress_entry
from pulsar_grpc.client._crypto import (
    MAX_KEYS_TRIED,
    MISS_RETRY_S,
    BatchEncryptor,
    EntryDecryptor,
    producer_encryptor,
)
from pulsar_grpc.client._crypto_keys import EncryptionKeyInfo, load_private_key, load_public_key
from pulsar_grpc.client._wire import encode_message
from pulsargrpc.v1 import pulsar_pb2 as pb

KEYS = Path(__file__).resolve().parents[1] / "data" / "e2ee"
RSA = CryptoKeyReader(str(KEYS / "rsa_public.pem"), str(KEYS / "rsa_private.pem"))
EC = CryptoKeyReader(str(KEYS / "ec_public.pem"), str(KEYS / "ec_private.pem"))
FRAMED = b"".join(
    b"\x6a" + bytes([len(m)]) + m for m in (encode_message(b"m%d" % i, "k") for i in range(3))
)
needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")


def seal(
    encryptor: BatchEncryptor, codec: CompressionType = CompressionType.NONE
) -> pb.DeliveredEntry:
    """One batch of three messages as the producer sends it, as a consumer receives it."""
    return pb.DeliveredEntry(compressed=compress_batch(codec, FRAMED, 3, b"k", encryptor))


def payloads(entry: pb.DeliveredEntry) -> list[bytes]:
    decompress_entry(entry)
    return [m.payload for m in entry.messages]


def openssl(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True)


@needs_openssl
@pytest.mark.parametrize("curve", ["secp521r1", "prime256v1", "secp384r1"])
def test_ec_keys_made_by_the_documented_openssl_commands_work(tmp_path: Path, curve: str) -> None:
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    made = openssl("ecparam", "-name", curve, "-genkey", "-param_enc", "explicit", "-out", private)
    assert made.returncode == 0, made.stderr
    assert openssl("ec", "-in", private, "-pubout", "-out", public).returncode == 0
    encryptor = BatchEncryptor(["k"], CryptoKeyReader(str(public), None))
    entry = seal(encryptor, CompressionType.ZLIB)
    assert EntryDecryptor(CryptoKeyReader(None, str(private))).decrypt(entry) is None
    assert payloads(entry) == [b"m0", b"m1", b"m2"]


@needs_openssl
def test_rsa_keys_made_by_openssl_work(tmp_path: Path) -> None:
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    assert openssl("genrsa", "-out", private, "2048").returncode == 0
    assert openssl("rsa", "-in", private, "-pubout", "-out", public).returncode == 0
    entry = seal(BatchEncryptor(["k"], CryptoKeyReader(str(public), None)))
    assert EntryDecryptor(CryptoKeyReader(None, str(private))).decrypt(entry) is None
    assert payloads(entry) == [b"m0", b"m1", b"m2"]


@needs_openssl
def test_the_pkcs8_outform_some_guides_give_is_no_openssl_option(tmp_path: Path) -> None:
    private = tmp_path / "private.pem"
    assert openssl("ecparam", "-name", "secp521r1", "-genkey", "-out", private).returncode == 0
    done = openssl("ec", "-in", private, "-pubout", "-outform", "pkcs8", "-out", tmp_path / "p")
    assert done.returncode != 0  # docs/protocol.md says to leave it out


@needs_openssl
def test_an_explicit_secp256k1_key_is_a_clear_error(tmp_path: Path) -> None:
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    made = openssl(
        "ecparam", "-name", "secp256k1", "-genkey", "-param_enc", "explicit", "-out", private
    )
    assert made.returncode == 0, made.stderr
    assert openssl("ec", "-in", private, "-pubout", "-out", public).returncode == 0
    with pytest.raises(CryptoError, match="explicit parameters work only for"):
        BatchEncryptor(["k"], CryptoKeyReader(str(public), None))
    with pytest.raises(CryptoError, match="explicit parameters work only for"):
        load_private_key("k", EncryptionKeyInfo(private.read_bytes()))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_data_key_rotates_on_time_not_per_batch() -> None:
    clock = Clock()
    encryptor = BatchEncryptor(["k"], RSA, rotation_s=10, clock=clock)
    first, second = seal(encryptor), seal(encryptor)
    wrapped = first.compressed.encryption.keys[0].value
    assert second.compressed.encryption.keys[0].value == wrapped  # one data key
    assert first.compressed.encryption.param != second.compressed.encryption.param  # nonces
    clock.now = 10
    third = seal(encryptor)
    assert third.compressed.encryption.keys[0].value != wrapped
    assert encryptor.rotations == 2
    decryptor = EntryDecryptor(RSA)
    for entry in (first, second, third):
        assert decryptor.decrypt(entry) is None
        assert payloads(entry) == [b"m0", b"m1", b"m2"]


class Counting:
    """Counts the private keys asked for."""

    def __init__(self, inner: CryptoKeyReader) -> None:
        self.inner = inner
        self.asked = 0

    def get_public_key(self, name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo | None:
        return self.inner.get_public_key(name, metadata)

    def get_private_key(self, name: str, metadata: Mapping[str, str]) -> EncryptionKeyInfo | None:
        self.asked += 1
        return self.inner.get_private_key(name, metadata)


def test_unwrapped_keys_are_cached_and_the_cache_is_bounded() -> None:
    reader = Counting(EC)
    decryptor = EntryDecryptor(reader, cache_size=2)
    producers = [BatchEncryptor(["k"], EC) for _ in range(3)]  # three data keys
    for producer in producers[:2]:
        for _ in range(5):
            assert decryptor.decrypt(seal(producer)) is None
    assert reader.asked == 2  # once per data key, not per batch
    decryptor.decrypt(seal(producers[2]))  # evicts the first producer's key
    decryptor.decrypt(seal(producers[1]))
    assert reader.asked == 3
    decryptor.decrypt(seal(producers[0]))
    assert reader.asked == 4


def test_a_reader_failing_at_rotation_keeps_the_previous_public_keys() -> None:
    clock = Clock()
    reader = CryptoKeyReader(str(KEYS / "rsa_public.pem"), None)
    encryptor = BatchEncryptor(["k"], reader, rotation_s=1, clock=clock)
    reader.public_key_path = str(KEYS / "missing.pem")
    clock.now = 5
    entry = seal(encryptor)
    assert encryptor.rotations == 2
    assert EntryDecryptor(RSA).decrypt(entry) is None


@pytest.mark.parametrize(
    ("spoil", "reason"),
    [
        (lambda b: setattr(b, "messages", b.messages[:-1] + b"\0"), "tag does not verify"),
        (lambda b: setattr(b.encryption, "algorithm", "AES-128-CBC"), "'AES-128-CBC'"),
        (lambda b: setattr(b.encryption, "param", b"\0" * 16), "16-byte nonce"),
        (lambda b: setattr(b.encryption.keys[0], "value", b"\0" * 256), "no private key"),
    ],
    ids=["tampered", "algorithm", "nonce", "wrong-wrapping"],
)
def test_why_a_batch_does_not_decrypt(spoil: object, reason: str) -> None:
    entry = seal(BatchEncryptor(["k"], RSA))
    spoil(entry.compressed)  # type: ignore[operator]
    failure = EntryDecryptor(RSA, ConsumerCryptoFailureAction.CONSUME).decrypt(entry)
    assert failure is not None and reason in failure.reason
    assert failure.action is ConsumerCryptoFailureAction.CONSUME
    assert entry.compressed.HasField("encryption")  # left as it came


def test_a_consumer_without_a_reader_fails_and_a_plain_entry_passes() -> None:
    entry = seal(BatchEncryptor(["k"], RSA))
    failure = EntryDecryptor().decrypt(entry)
    assert failure is not None and "no crypto_key_reader" in failure.reason
    assert failure.action is ConsumerCryptoFailureAction.FAIL
    plain = pb.DeliveredEntry(messages=[pb.MessageData(payload=b"x")])
    assert EntryDecryptor().decrypt(plain) is None


def test_producer_settings() -> None:
    assert producer_encryptor(None, RSA) is None
    with pytest.raises(ValueError, match="needs a crypto_key_reader"):
        producer_encryptor("k", None)
    with pytest.raises(CryptoError, match="has no public key 'k'"):
        producer_encryptor(["k"], CryptoKeyReader(None, None))
    with pytest.raises(CryptoError, match="cannot read the key file"):
        producer_encryptor("k", CryptoKeyReader(str(KEYS / "missing.pem"), None))


def test_only_rsa_and_ec_keys_wrap() -> None:
    pem = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(CryptoError, match="only RSA and EC keys wrap"):
        load_public_key("k", EncryptionKeyInfo(pem))
    with pytest.raises(CryptoError, match="is not a PEM public key"):
        load_public_key("k", EncryptionKeyInfo(b"not a key"))


def test_a_consumer_without_the_key_asks_its_reader_once_per_data_key_until_retry() -> None:
    clock = Clock()
    reader = Counting(RSA)  # the batches are for the EC key: RSA's private key never fits
    decryptor = EntryDecryptor(reader, clock=clock)
    producer = BatchEncryptor(["k"], EC)
    for _ in range(5):
        assert decryptor.decrypt(seal(producer)) is not None
    assert reader.asked == 1
    clock.now = MISS_RETRY_S  # long enough: maybe the reader has the key by now
    reader.inner = EC
    entry = seal(producer)
    assert decryptor.decrypt(entry) is None and reader.asked == 2
    assert payloads(entry) == [b"m0", b"m1", b"m2"]


def test_a_batch_listing_thousands_of_keys_costs_a_bounded_number_of_tries() -> None:
    """Anyone who may produce can list many keys: the consumer tries MAX_KEYS_TRIED of them,
    loads its private key once, and names only a few in the failure."""
    reader = Counting(RSA)
    decryptor = EntryDecryptor(reader)
    entry = seal(BatchEncryptor(["k"], EC))  # for the EC key: RSA's never unwraps it
    real = entry.compressed.encryption.keys[0]
    bogus = [pb.EncryptionKey(key=f"bogus-{i}", value=real.value) for i in range(5000)]
    del entry.compressed.encryption.keys[:]
    entry.compressed.encryption.keys.extend(bogus)
    failure = decryptor.decrypt(entry)
    assert failure is not None
    assert reader.asked == MAX_KEYS_TRIED
    assert "'bogus-0'" in failure.reason and "and 4996 more" in failure.reason
    assert "'bogus-10'" not in failure.reason and len(failure.reason) < 400


def test_a_key_info_does_not_show_its_key() -> None:
    info = EncryptionKeyInfo(b"-----BEGIN PRIVATE KEY-----secret", {"v": "1"})
    assert "secret" not in repr(info) and "'v'" in repr(info)
