"""The end-to-end encryption flags of `produce`, `consume` and `read`, with pulsar-client's
names (CmdProduce, CmdConsume, CmdRead):

    produce TOPIC -ekn NAME [-ekn NAME...] -ekv PUBLIC_KEY
    consume|read TOPIC -ekv PRIVATE_KEY [-ca FAIL|DISCARD|CONSUME]

A key is what pulsar-client's ``--encryption-key-value`` takes, a URI
(``file:///path/to/key.pem`` or ``data:application/x-pem-file;base64,...``), or a plain path.
It is read once, when the command starts: a missing file is a usage error, not a failure on
the first message. Without ``-ekv``, a consumer applies ``-ca`` to every encrypted batch
(FAIL by default: the command stops with one line naming the entry, the batch unacknowledged).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pulsar_grpc.cli.client_cmd import UsageError
from pulsar_grpc.client import ConsumerCryptoFailureAction, EncryptionKeyInfo
from pulsar_grpc.client._crypto_message import log as sdk_crypto_log  # where it logs a failure

KEY_HELP = (
    "file:///path/key.pem, data:application/x-pem-file;base64,... or a path (PEM: RSA, or EC "
    "as `openssl ecparam -name secp521r1 -genkey` makes)"
)


class PemKeys:
    """A CryptoKeyReader holding the key the flags named, whatever the key's name (as
    pulsar-client's DefaultCryptoKeyReader given one key value)."""

    def __init__(self, public: bytes | None = None, private: bytes | None = None) -> None:
        self._public = public
        self._private = private

    def get_public_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        return None if self._public is None else EncryptionKeyInfo(self._public)

    def get_private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        return None if self._private is None else EncryptionKeyInfo(self._private)


def _failure_action(text: str) -> ConsumerCryptoFailureAction:
    pulsars = [a for a in ConsumerCryptoFailureAction if a is not ConsumerCryptoFailureAction.RAISE]
    try:
        action = ConsumerCryptoFailureAction[text.upper()]
        if action not in pulsars:  # the SDK's RAISE is how the command's FAIL reads
            raise KeyError(text)
        return action
    except KeyError:
        names = ", ".join(a.name for a in pulsars)
        raise argparse.ArgumentTypeError(f"{text!r} is not one of {names}") from None


_failure_action.__name__ = "ConsumerCryptoFailureAction"  # argparse names the type


def add_produce_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-ekn", "--encryption-key-name", action="append", default=[], metavar="NAME",
        help="encrypt every message end to end for this key name (repeatable; needs -ekv)",
    )  # fmt: skip
    parser.add_argument(
        "-ekv", "--encryption-key-value", metavar="PUBLIC_KEY",
        help=f"the public key that -ekn names: {KEY_HELP}",
    )  # fmt: skip


def add_receive_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-ekv", "--encryption-key-value", metavar="PRIVATE_KEY",
        help=f"the private key that decrypts encrypted messages: {KEY_HELP}",
    )  # fmt: skip
    parser.add_argument(
        "-ca", "--crypto-failure-action", type=_failure_action,
        default=ConsumerCryptoFailureAction.FAIL, metavar="ACTION",
        help="for a message that cannot be decrypted: FAIL (stop, leave it unacknowledged), "
        "DISCARD (acknowledge and skip it) or CONSUME (print its encrypted bytes); "
        "default FAIL",
    )  # fmt: skip


def producer_encryption(args: argparse.Namespace) -> dict[str, Any]:
    """create_producer's encryption keywords from the flags (none without them)."""
    names, value = args.encryption_key_name, args.encryption_key_value
    if not names and value is None:
        return {}
    if not names or value is None:
        raise UsageError("-ekn/--encryption-key-name and -ekv/--encryption-key-value go together")
    public = key_bytes("-ekv/--encryption-key-value", value)
    return {"encryption_key": list(names), "crypto_key_reader": PemKeys(public=public)}


def receiver_decryption(args: argparse.Namespace) -> dict[str, Any]:
    """subscribe's and create_reader's decryption keywords from the flags.

    With FAIL the command stops on the SDK's CryptoError and prints it as its one line; the
    SDK's own log record of that failure would print it twice, so it is silenced (DISCARD's
    warnings, one per dropped batch, stay)."""
    action = args.crypto_failure_action
    if action is ConsumerCryptoFailureAction.FAIL:
        sdk_crypto_log.setLevel(logging.CRITICAL)
        # The SDK's RAISE: the command's FAIL stops with the error (the SDK's FAIL, as
        # pulsar-client's, would hold the batch back and let the command time out).
        action = ConsumerCryptoFailureAction.RAISE
    value = args.encryption_key_value
    reader = None if value is None else PemKeys(private=key_bytes("-ekv", value))
    return {"crypto_key_reader": reader, "crypto_failure_action": action}


def key_bytes(flag: str, value: str) -> bytes:
    """The key a flag names: a data: URI's bytes, or a file's (file: URI or path)."""
    if value.startswith("data:"):
        header, comma, data = value[len("data:") :].partition(",")
        if not comma or not header.endswith(";base64"):
            raise UsageError(f"{flag}: a data: URI must be data:<type>;base64,<key>")
        try:
            return base64.b64decode(data, validate=True)
        except binascii.Error:
            raise UsageError(f"{flag}: the data: URI is not valid base64") from None
    path = Path(unquote(urlparse(value).path)) if value.startswith("file:") else Path(value)
    try:
        return path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror or exc}") from None
