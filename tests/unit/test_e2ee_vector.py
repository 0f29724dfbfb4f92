"""The test vector of docs/protocol.md ("End-to-end encryption"), read from the document
itself so that it cannot rot: the SDK reproduces the AES-GCM ciphertext, the ECIES wrapping
(with the fixed ephemeral key) and the whole ProduceRequest exactly, unwraps both wrapped data
keys with the committed private keys, and its consumer decrypts the request's batch."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from pulsar_grpc.client import CryptoKeyReader, EncryptionKeyInfo, _crypto
from pulsar_grpc.client._compression import CompressionType, compress_batch, decompress_entry
from pulsar_grpc.client._crypto import BatchEncryptor, EntryDecryptor
from pulsar_grpc.client._crypto_keys import load_private_key, load_public_key, unwrap, wrap
from pulsar_grpc.client._wire import frame_message
from pulsargrpc.v1 import pulsar_pb2 as pb

ROOT = Path(__file__).resolve().parents[2]
KEYS = ROOT / "tests" / "data" / "e2ee"


def vector() -> dict[str, bytes]:
    """The ```text block under "### Test vector": ``name: hex`` lines, hex continued on
    indented lines."""
    doc = (ROOT / "docs" / "protocol.md").read_text()
    section = doc.split("### Test vector", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, re.S)
    assert block is not None, "no test vector block in docs/protocol.md"
    values: dict[str, str] = {}
    name = ""
    for line in block.group(1).splitlines():
        if line.startswith(" "):
            values[name] += line.strip()
        else:
            name, value = line.split(":", 1)
            values[name] = value.strip()
    return {k: bytes.fromhex(v) for k, v in values.items()}


V = vector()


def key(file: str) -> EncryptionKeyInfo:
    return EncryptionKeyInfo((KEYS / file).read_bytes())


def test_the_vector_has_every_value() -> None:
    assert set(V) == {
        "data key",
        "nonce",
        "plaintext",
        "messages",
        "ecies ephemeral",
        "ecies nonce",
        "ec wrapped key",
        "rsa wrapped key",
        "produce request",
    }


def test_plaintext_is_the_framed_messages() -> None:
    framed = [frame_message(b"hello", "user-1"), frame_message(b"world", "user-1")]
    assert V["plaintext"] == b"".join(framed)


def test_the_producers_sealing_reproduces_the_aes_gcm_part_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the producer's own path (compress_batch, BatchEncryptor.seal), with its random
    data key and nonce replaced by the vector's."""
    randoms = {len(V["data key"]): V["data key"], len(V["nonce"]): V["nonce"]}
    monkeypatch.setattr(_crypto.os, "urandom", lambda size: randoms[size])
    sealer = BatchEncryptor(["k"], CryptoKeyReader(str(KEYS / "rsa_public.pem"), None))
    batch = compress_batch(CompressionType.NONE, V["plaintext"], 2, b"user-1", sealer)
    assert batch.messages == V["messages"]
    assert (batch.encryption.algorithm, batch.encryption.param) == ("AES-256-GCM", V["nonce"])
    assert batch.uncompressed_size == len(V["plaintext"])


def test_ecies_wrapping_is_reproduced_with_the_fixed_ephemeral_key() -> None:
    ephemeral = ec.derive_private_key(int.from_bytes(V["ecies ephemeral"]), ec.SECP256R1())
    public = load_public_key("ec", key("ec_public.pem"))
    assert wrap(public, V["data key"], ephemeral, V["ecies nonce"]) == V["ec wrapped key"]


@pytest.mark.parametrize(
    ("file", "wrapped"), [("ec", "ec wrapped key"), ("rsa", "rsa wrapped key")]
)
def test_both_wrapped_keys_unwrap_to_the_data_key(file: str, wrapped: str) -> None:
    private = load_private_key(file, key(f"{file}_private.pem"))
    assert unwrap(private, V[wrapped]) == V["data key"]


def test_the_produce_request_is_reproduced_and_decrypts() -> None:
    batch = pb.CompressedBatch(
        uncompressed_size=len(V["plaintext"]),
        num_messages=2,
        key=b"user-1",
        messages=V["messages"],
        encryption=pb.EncryptionContext(
            keys=[pb.EncryptionKey(key="ec", value=V["ec wrapped key"])],
            algorithm="AES-256-GCM",
            param=V["nonce"],
        ),
    )
    assert pb.ProduceRequest(compressed=batch).SerializeToString() == V["produce request"]
    entry = pb.DeliveredEntry(
        compressed=pb.ProduceRequest.FromString(V["produce request"]).compressed
    )
    reader = CryptoKeyReader(None, str(KEYS / "ec_private.pem"))
    assert EntryDecryptor(reader).decrypt(entry) is None
    decompress_entry(entry)
    assert [(m.payload, m.key) for m in entry.messages] == [
        (b"hello", "user-1"),
        (b"world", "user-1"),
    ]


class OnlyRsa:
    """Holds the RSA private key under the name "rsa" only."""

    def get_public_key(self, key_name: str, metadata: Mapping[str, str]) -> None:
        return None

    def get_private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        return key("rsa_private.pem") if key_name == "rsa" else None


def test_a_consumer_holding_the_second_key_only_decrypts() -> None:
    request = pb.ProduceRequest.FromString(V["produce request"])
    request.compressed.encryption.keys.add(key="rsa", value=V["rsa wrapped key"])
    entry = pb.DeliveredEntry(compressed=request.compressed)
    assert EntryDecryptor(OnlyRsa()).decrypt(entry) is None
    assert entry.compressed.messages == V["plaintext"]
