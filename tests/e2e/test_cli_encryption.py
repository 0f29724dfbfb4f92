"""`pulsar-grpc produce` and `consume`/`read` with pulsar-client's encryption flags, as child
processes: `produce -ekn NAME -ekv PUBLIC_KEY` encrypts, `consume -ekv PRIVATE_KEY` decrypts
(the key as a file: URI, a data: URI or a path); without the key a consume stops with one line
naming the entry (FAIL) and leaves it for a consumer that has it, `-ca DISCARD` drops it,
`-ca CONSUME` prints the encrypted bytes; an encrypted produce is accepted on a namespace whose
encryption_required is set."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path

import pytest

from pulsar_grpc.client import Client, ConsumerCryptoFailureAction
from tests.e2e.test_cli import assert_one_line_error, cli, unique
from tests.support import BrokerThread

KEYS = Path(__file__).resolve().parents[1] / "data" / "e2ee"
SECRET = "the-plaintext-payload"


def contents(stdout: str) -> list[str]:
    return re.findall(r"content:(.*)", stdout)


def produce_encrypted(broker: BrokerThread, topic: str, kind: str, count: int = 3) -> None:
    public = KEYS / f"{kind}_public.pem"
    produced = cli(
        "produce", topic, "-m", SECRET, "-n", str(count), "-ekn", "app-key",
        "-ekv", public.as_uri(), "--service-url", broker.service_url,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert f"{count} messages successfully produced" in produced.stdout


async def stored_plaintext(broker: BrokerThread, topic: str) -> bool:
    """Whether the broker's copy of the topic holds the plaintext anywhere (a reader without a
    key, CONSUME: the bytes as stored)."""
    async with Client(broker.service_url) as client:
        reader = await client.create_reader(
            topic, "earliest", crypto_failure_action=ConsumerCryptoFailureAction.CONSUME
        )
        message = await reader.read_next(10_000)
        await reader.close()
    assert message.encryption_context() is not None
    return SECRET.encode() in message.data()


@pytest.mark.parametrize("kind", ["rsa", "ec"])
def test_produce_encrypted_then_consume_with_the_private_key(
    broker: BrokerThread, kind: str
) -> None:
    topic = unique(f"cli-e2ee-{kind}")
    produce_encrypted(broker, topic, kind)
    assert not asyncio.run(stored_plaintext(broker, topic))
    private = KEYS / f"{kind}_private.pem"
    consumed = cli(
        "consume", topic, "-s", "sub", "-p", "earliest", "-n", "3", "--timeout", "20",
        "-ekv", private.as_uri(), "--service-url", broker.service_url,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert contents(consumed.stdout) == [SECRET] * 3
    key = base64.b64encode(private.read_bytes()).decode()
    read = cli(
        "read", topic, "-m", "earliest", "-n", "3", "--timeout", "20",
        "-ekv", f"data:application/x-pem-file;base64,{key}", "--service-url", broker.service_url,
    )  # fmt: skip
    assert read.returncode == 0, read.stderr
    assert contents(read.stdout) == [SECRET] * 3


def test_consume_without_the_key_fails_in_one_line_and_leaves_the_messages(
    broker: BrokerThread,
) -> None:
    topic = unique("cli-e2ee-nokey")
    produce_encrypted(broker, topic, "rsa")
    url = broker.service_url
    failed = cli(
        "consume", topic, "-s", "sub", "-p", "earliest", "-n", "3", "--timeout", "20",
        "--service-url", url,
    )  # fmt: skip
    assert failed.returncode == 1, failed.stderr
    line = assert_one_line_error(failed)
    assert "CryptoError" in line and "encrypted" in line, line
    private = str(KEYS / "rsa_private.pem")  # a plain path works too
    consumed = cli(
        "consume", topic, "-s", "sub", "-n", "3", "--timeout", "20", "-ekv", private,
        "--service-url", url,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert contents(consumed.stdout) == [SECRET] * 3


def test_crypto_failure_actions(broker: BrokerThread) -> None:
    topic = unique("cli-e2ee-actions")
    produce_encrypted(broker, topic, "ec", count=1)
    url = broker.service_url
    consumed = cli(
        "consume", topic, "-s", "raw", "-p", "earliest", "-n", "1", "--timeout", "20",
        "-ca", "consume", "--hex", "--service-url", url,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert SECRET not in consumed.stdout and "00000000" in consumed.stdout
    discarded = cli(
        "consume", topic, "-s", "drop", "-p", "earliest", "-n", "1", "--timeout", "3",
        "-ca", "DISCARD", "--service-url", url,
    )  # fmt: skip
    assert discarded.returncode == 0, discarded.stderr
    assert contents(discarded.stdout) == []
    assert "no message within 3 s; 0 messages successfully consumed" in discarded.stderr
    again = cli(
        "consume", topic, "-s", "drop", "-n", "1", "--timeout", "3",
        "-ekv", str(KEYS / "ec_private.pem"), "--service-url", url,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert contents(again.stdout) == []  # acknowledged when discarded
    assert "no message within 3 s; 0 messages successfully consumed" in again.stderr


def test_bad_encryption_flags_are_usage_errors(broker: BrokerThread, tmp_path: Path) -> None:
    url = broker.service_url
    alone = cli("produce", "t", "-m", "x", "-ekn", "app-key", "--service-url", url)
    assert alone.returncode == 2
    assert "-ekn/--encryption-key-name and -ekv" in assert_one_line_error(alone)
    missing = tmp_path / "absent.pem"
    unreadable = cli("consume", "t", "-s", "s", "-ekv", missing.as_uri(), "--service-url", url)
    assert unreadable.returncode == 2
    assert f"cannot read {missing}" in assert_one_line_error(unreadable)
    action = cli("consume", "t", "-s", "s", "-ca", "IGNORE", "--service-url", url)
    assert action.returncode == 2 and "'IGNORE' is not one of FAIL, DISCARD, CONSUME" in (
        action.stderr
    )


def test_an_encrypted_produce_passes_encryption_required(broker: BrokerThread) -> None:
    url = broker.http_url
    enabled = cli(
        "admin", "--admin-url", url, "namespaces", "set-encryption-required", "public/default", "-e"
    )
    assert enabled.returncode == 0, enabled.stderr
    topic = unique("cli-e2ee-required")
    produce_encrypted(broker, topic, "rsa", count=2)
    consumed = cli(
        "consume", topic, "-s", "sub", "-p", "earliest", "-n", "2", "--timeout", "20",
        "-ekv", str(KEYS / "rsa_private.pem"), "--service-url", broker.service_url,
    )  # fmt: skip
    assert contents(consumed.stdout) == [SECRET] * 2
