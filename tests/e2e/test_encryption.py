"""End-to-end encryption through a real broker: RSA and EC keys round-trip, batched or not,
compressed or not; several keys with consumers holding one each; each crypto_failure_action
for a consumer without the key; a data key rotation while producing; Key_Shared order; a
Reader; and the broker's stored bytes hold no plaintext.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from pulsar_grpc import (
    BatchingType,
    Client,
    CompressionType,
    ConsumerCryptoFailureAction,
    ConsumerType,
    CryptoError,
    CryptoKeyReader,
    EncryptionKeyInfo,
    Message,
    SyncClient,
    Timeout,
)
from pulsar_grpc.client import _crypto
from pulsar_grpc.client._compression import decompress_entry
from pulsar_grpc.client._crypto import decrypt_payload
from pulsar_grpc.client._crypto_keys import load_private_key, unwrap
from pulsar_grpc.inspector import EntryRecord, open_storage
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more, receive_n
from tests.e2e.test_partitioned_and_dedup import create_partitioned
from tests.support import BrokerThread

KEYS = Path(__file__).resolve().parents[1] / "data" / "e2ee"
RSA = CryptoKeyReader(str(KEYS / "rsa_public.pem"), str(KEYS / "rsa_private.pem"))
EC = CryptoKeyReader(str(KEYS / "ec_public.pem"), str(KEYS / "ec_private.pem"))
PAYLOADS = [b"secret record %03d: the broker must never read this" % i for i in range(60)]


class NamedKeys:
    """A CryptoKeyReader holding several keys by name (a consumer may hold only some)."""

    def __init__(self, **pairs: tuple[str | None, str | None]) -> None:
        self.pairs = pairs

    def _read(self, name: str, which: int) -> EncryptionKeyInfo | None:
        pair = self.pairs.get(name)
        if pair is None or pair[which] is None:
            return None
        return EncryptionKeyInfo(Path(str(pair[which])).read_bytes(), {"version": name})

    def get_public_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        return self._read(key_name, 0)

    def get_private_key(
        self, key_name: str, metadata: Mapping[str, str]
    ) -> EncryptionKeyInfo | None:
        return self._read(key_name, 1)


def public_only(reader: CryptoKeyReader) -> CryptoKeyReader:
    return CryptoKeyReader(reader.public_key_path, None)


def private_only(reader: CryptoKeyReader) -> CryptoKeyReader:
    return CryptoKeyReader(None, reader.private_key_path)


async def publish(client: Client, topic: str, keys: object, **options: object) -> None:
    """PAYLOADS in batches of 20 (unless options say otherwise), with keys and properties."""
    settings: dict[str, object] = {
        "batching_max_messages": 20,
        "batching_max_publish_delay_ms": 1000,
        "encryption_key": "k",
        "crypto_key_reader": keys,
        **options,
    }
    producer = await client.create_producer(topic, **settings)  # type: ignore[arg-type]
    futures = [
        await producer.enqueue(p, {"i": str(i)}, f"key-{i % 3}") for i, p in enumerate(PAYLOADS)
    ]
    await producer.flush()
    await asyncio.gather(*futures)
    await producer.close()


def stored_entries(broker: BrokerThread, topic: str) -> list[EntryRecord]:
    """The topic's entries as `pulsar-grpc inspect` reads them from the standalone's storage,
    beside the running broker (not through it)."""
    with open_storage(data_dir=broker.config.dataDirectory) as storage:
        return list(storage.entries(topic))


@pytest.mark.parametrize("codec", [CompressionType.NONE, CompressionType.LZ4], ids=["plain", "lz4"])
@pytest.mark.parametrize("batched", [True, False], ids=["batched", "one-per-entry"])
@pytest.mark.parametrize("keys", [RSA, EC], ids=["rsa", "ec"])
async def test_round_trip(
    broker: BrokerThread, keys: CryptoKeyReader, batched: bool, codec: CompressionType
) -> None:
    topic = f"enc-{id(keys) % 1000}-{int(batched)}-{codec.value}"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            topic, "s", initial_position="Earliest", crypto_key_reader=private_only(keys)
        )
        await publish(
            client,
            topic,
            public_only(keys),
            batching_enabled=batched,
            compression_type=codec,
        )
        got = await receive_n(consumer, len(PAYLOADS))
        assert [m.data() for m in got] == PAYLOADS
        assert [m.properties() for m in got] == [{"i": str(i)} for i in range(len(PAYLOADS))]
        assert [m.partition_key() for m in got] == [f"key-{i % 3}" for i in range(len(PAYLOADS))]
        assert all(m.encryption_context() is None for m in got)
        entries = {(m.message_id().ledger_id(), m.message_id().entry_id()) for m in got}
        assert len(entries) == (3 if batched else len(PAYLOADS))
        for message in got:
            await consumer.acknowledge(message)
        await assert_nothing_more(consumer)
    stored = stored_entries(broker, topic)
    assert len(stored) == len(entries)
    for entry in stored:  # the broker stored only the envelope and the ciphertext
        assert entry.encrypted is not None and not entry.messages
        assert [k.name for k in entry.encrypted.keys] == ["k"]
        assert b"secret record" not in entry.encrypted.ciphertext
    assert sum(e.num_messages for e in stored) == len(PAYLOADS)


async def test_several_keys_each_consumer_holds_one(broker: BrokerThread) -> None:
    both = NamedKeys(a=(str(KEYS / "rsa_public.pem"), None), b=(str(KEYS / "ec_public.pem"), None))
    only_a = NamedKeys(a=(None, str(KEYS / "rsa_private.pem")))
    only_b = NamedKeys(b=(None, str(KEYS / "ec_private.pem")))
    async with Client(broker.service_url) as client:
        holders = [
            await client.subscribe(
                "enc-many", name, initial_position="Earliest", crypto_key_reader=reader
            )
            for name, reader in (("a", only_a), ("b", only_b))
        ]
        peek = await client.subscribe(
            "enc-many",
            "peek",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
        await publish(client, "enc-many", both, encryption_key=["a", "b"])
        for consumer in holders:
            assert [m.data() for m in await receive_n(consumer, len(PAYLOADS))] == PAYLOADS
        context = (await peek.receive(5000)).encryption_context()
        assert context is not None
        assert [(k.key, dict(k.metadata)) for k in context.keys] == [
            ("a", {"version": "a"}),
            ("b", {"version": "b"}),
        ]


async def test_fail_holds_the_batch_back_and_receive_times_out_as_pulsar_clients(
    broker: BrokerThread,
) -> None:
    """pulsar-client's FAIL: the batch is not delivered, receive() times out, and the batch,
    unacknowledged, goes to a consumer with the key once this one closes (issue 26)."""
    async with Client(broker.service_url) as client:
        keyless = await client.subscribe(
            "enc-held", "s", ConsumerType.Shared, initial_position="Earliest"
        )
        await publish(client, "enc-held", public_only(RSA))
        with pytest.raises(Timeout):
            await keyless.receive(2000)
        assert await keyless.batch_receive() == []
        await keyless.close()
        keyed = await client.subscribe(
            "enc-held", "s", ConsumerType.Shared, crypto_key_reader=private_only(RSA)
        )
        got = await receive_n(keyed, len(PAYLOADS))
        assert sorted(m.data() for m in got) == PAYLOADS


async def test_raise_raises_and_leaves_the_batch_to_a_consumer_with_the_key(
    broker: BrokerThread,
) -> None:
    async with Client(broker.service_url) as client:
        keyless = await client.subscribe(
            "enc-fail",
            "s",
            ConsumerType.Shared,
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.RAISE,
        )
        await publish(client, "enc-fail", public_only(RSA))
        for _ in range(3):  # one error per batch, each naming its entry
            with pytest.raises(CryptoError, match=r"entry \d+:\d+ is encrypted .*no crypto_key"):
                await keyless.receive(5000)
        await assert_nothing_more(keyless)
        await keyless.close()  # its unacknowledged batches go back to the subscription
        keyed = await client.subscribe(
            "enc-fail", "s", ConsumerType.Shared, crypto_key_reader=private_only(RSA)
        )
        got = await receive_n(keyed, len(PAYLOADS))
        assert sorted(m.data() for m in got) == PAYLOADS


async def test_raise_with_the_wrong_key_names_the_keys(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        wrong = await client.subscribe(
            "enc-wrong",
            "s",
            initial_position="Earliest",
            crypto_key_reader=private_only(EC),
            crypto_failure_action=ConsumerCryptoFailureAction.RAISE,
        )
        await publish(client, "enc-wrong", public_only(RSA), batching_enabled=False)
        for _ in range(2):  # every entry: one per message here
            with pytest.raises(CryptoError, match="keys 'k': the crypto_key_reader has no priv"):
                await wrong.receive(5000)


async def test_discard_acknowledges_and_drops(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        discarding = await client.subscribe(
            "enc-discard",
            "s",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.DISCARD,
        )
        await publish(client, "enc-discard", public_only(RSA))
        await assert_nothing_more(discarding, within_ms=1500)
        await discarding.close()
        keyed = await client.subscribe("enc-discard", "s", crypto_key_reader=private_only(RSA))
        await assert_nothing_more(keyed, within_ms=1500)  # acknowledged: never redelivered


async def test_consume_gives_the_encrypted_batch_and_its_context(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        raw = await client.subscribe(
            "enc-consume",
            "s",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
        await publish(client, "enc-consume", public_only(EC), compression_type="zstd")
        batches = await receive_n(raw, 3)
        await assert_nothing_more(raw)
        private = load_private_key("k", EncryptionKeyInfo((KEYS / "ec_private.pem").read_bytes()))
        decrypted: list[bytes] = []
        for message in batches:
            context = message.encryption_context()
            assert context is not None
            assert message.message_id().batch_index() == -1
            assert context.algorithm == "AES-256-GCM" and len(context.param) == 12
            assert context.compression_type is CompressionType.ZSTD
            assert context.batch_size == 20
            assert b"secret record" not in message.data()
            # The context is all an application needs to decrypt the batch itself.
            data_key = unwrap(private, context.keys[0].value)
            entry = pb.DeliveredEntry(
                compressed=pb.CompressedBatch(
                    compression=int(context.compression_type),
                    uncompressed_size=context.uncompressed_message_size,
                    num_messages=context.batch_size,
                    messages=decrypt_payload(data_key, context.param, message.data()),
                )
            )
            decompress_entry(entry)
            decrypted += [m.payload for m in entry.messages]
            await raw.acknowledge(message)
        assert decrypted == PAYLOADS
        await raw.close()
        again = await client.subscribe("enc-consume", "s", crypto_key_reader=private_only(EC))
        await assert_nothing_more(again)  # acknowledging each batch message acked the batch


async def test_data_key_rotation_while_producing(
    broker: BrokerThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_crypto, "DATA_KEY_ROTATION_S", 0.2)
    async with Client(broker.service_url) as client:
        keyed = await client.subscribe(
            "enc-rotate", "s", initial_position="Earliest", crypto_key_reader=private_only(RSA)
        )
        raw = await client.subscribe(
            "enc-rotate",
            "raw",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
        producer = await client.create_producer(
            "enc-rotate", encryption_key="k", crypto_key_reader=public_only(RSA)
        )
        sent: list[bytes] = []
        wrapped: set[bytes] = set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(wrapped) < 3:  # until the consumer saw three data keys
            assert loop.time() < deadline, f"{len(wrapped)} data keys after {len(sent)} sends"
            sent.append(b"rotating %d" % len(sent))
            await producer.send(sent[-1])
            context = (await raw.receive(5000)).encryption_context()
            assert context is not None
            wrapped.add(context.keys[0].value)
            await asyncio.sleep(0.05)
        assert [m.data() for m in await receive_n(keyed, len(sent))] == sent


async def test_key_shared_keeps_per_key_order(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        consumers = [
            await client.subscribe(
                "enc-ks",
                "s",
                ConsumerType.KeyShared,
                initial_position="Earliest",
                crypto_key_reader=private_only(EC),
            )
            for _ in range(2)
        ]
        await publish(client, "enc-ks", public_only(EC), batching_type=BatchingType.KeyBased)
        by_key: dict[str, list[bytes]] = {}
        owners: dict[str, set[int]] = {}
        received = 0
        while received < len(PAYLOADS):
            for index, consumer in enumerate(consumers):
                for message in await consumer.batch_receive():
                    by_key.setdefault(message.partition_key(), []).append(message.data())
                    owners.setdefault(message.partition_key(), set()).add(index)
                    received += 1
        for key, payloads in by_key.items():
            assert payloads == [p for i, p in enumerate(PAYLOADS) if f"key-{i % 3}" == key]
            assert len(owners[key]) == 1, f"{key} went to both consumers"


async def test_reader_decrypts_and_consume_reader_sees_ciphertext(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        await publish(client, "enc-reader", public_only(RSA))
        reader = await client.create_reader(
            "enc-reader", "earliest", crypto_key_reader=private_only(RSA)
        )
        assert [m.data() for m in await receive_n(reader, len(PAYLOADS))] == PAYLOADS
        raw = await client.create_reader(
            "enc-reader",
            "earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
        batches = await receive_n(raw, 3)
        assert all(m.encryption_context() is not None for m in batches)
        assert not await raw.has_message_available()  # the last batch ends the topic
        await assert_nothing_more(raw)
        held = await client.create_reader("enc-reader", "earliest")  # FAIL, no key
        with pytest.raises(Timeout):  # held back, as pulsar-client's, and counted as read
            await held.read_next(timeout_millis=2000)
        assert not await held.has_message_available()
        failing = await client.create_reader(
            "enc-reader", "earliest", crypto_failure_action=ConsumerCryptoFailureAction.RAISE
        )
        errors = 0
        while await failing.has_message_available():  # ends: each failed batch counts as read
            with pytest.raises(CryptoError, match="no crypto_key_reader"):
                await failing.read_next(timeout_millis=5000)
            errors += 1
        assert errors == 3


async def test_a_zero_queue_consumer_goes_on_after_a_discarded_batch(
    broker: BrokerThread,
) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "enc-zero",
            "s",
            initial_position="Earliest",
            receiver_queue_size=0,
            crypto_failure_action=ConsumerCryptoFailureAction.DISCARD,
        )
        await publish(client, "enc-zero", public_only(RSA), batching_max_messages=1)
        producer = await client.create_producer("enc-zero")
        await producer.send(b"plain after the encrypted ones")
        received = await asyncio.wait_for(consumer.receive(), 20)  # not a hang
        assert received.data() == b"plain after the encrypted ones"


async def test_producer_errors(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        with pytest.raises(ValueError, match="needs a crypto_key_reader"):
            await client.create_producer("enc-err", encryption_key="k")
        with pytest.raises(CryptoError, match="no public key 'missing'"):
            await client.create_producer(
                "enc-err", encryption_key="missing", crypto_key_reader=NamedKeys()
            )


def test_sync_facade(broker: BrokerThread) -> None:
    client = SyncClient(broker.service_url)
    try:
        consumer = client.subscribe(
            "enc-sync", "s", initial_position="Earliest", crypto_key_reader=private_only(EC)
        )
        producer = client.create_producer(
            "enc-sync", encryption_key="k", crypto_key_reader=public_only(EC)
        )
        producer.send(b"hello encrypted")
        assert consumer.receive(5000).data() == b"hello encrypted"
    finally:
        client.close()


@pytest.fixture
def notebook_keys(tmp_path: Path) -> CryptoKeyReader:
    """An EC pair made by Pulsar's documented commands: secp521r1, explicit parameters."""
    private, public = tmp_path / "private.pem", tmp_path / "public.pem"
    for command in (
        ["ecparam", "-name", "secp521r1", "-genkey", "-param_enc", "explicit", "-out", private],
        ["ec", "-in", private, "-pubout", "-out", public],
    ):
        subprocess.run(["openssl", *map(str, command)], check=True, capture_output=True)
    return CryptoKeyReader(str(public), str(private))


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl")
async def test_keys_from_the_openssl_commands_round_trip(
    broker: BrokerThread, notebook_keys: CryptoKeyReader
) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "enc-openssl", "s", initial_position="Earliest", crypto_key_reader=notebook_keys
        )
        await publish(client, "enc-openssl", notebook_keys, compression_type="snappy")
        assert [m.data() for m in await receive_n(consumer, len(PAYLOADS))] == PAYLOADS


async def test_a_partitioned_topic_and_a_multi_topic_consumer(broker: BrokerThread) -> None:
    await create_partitioned(broker.http_url, "enc-parts", 3)
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "enc-parts", "s", initial_position="Earliest", crypto_key_reader=private_only(RSA)
        )
        raw = await client.subscribe(
            ["enc-parts-partition-0", "enc-parts-partition-1", "enc-parts-partition-2"],
            "raw",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.CONSUME,
        )
        await publish(client, "enc-parts", public_only(RSA))
        got = await receive_n(consumer, len(PAYLOADS))
        assert sorted(m.data() for m in got) == PAYLOADS
        assert len({m.partition for m in got}) > 1  # the producer's partitions share its keys
        sealed: list[Message] = []
        counted = 0
        while counted < len(PAYLOADS):
            sealed.append(await raw.receive(5000))
            context = sealed[-1].encryption_context()
            assert context is not None and sealed[-1].message_id().batch_index() == -1
            counted += context.batch_size
        for message in sealed:  # each id names its topic: the acks go to the right partition
            await raw.acknowledge(message)
        await raw.close()
        again = await client.subscribe(
            ["enc-parts-partition-0", "enc-parts-partition-1", "enc-parts-partition-2"],
            "raw",
            crypto_key_reader=private_only(RSA),
        )
        await assert_nothing_more(again)


async def test_a_listener_goes_on_after_a_batch_it_cannot_decrypt(broker: BrokerThread) -> None:
    received: list[bytes] = []
    done = asyncio.Event()

    def listener(consumer: object, message: Message) -> None:
        received.append(message.data())
        if len(received) == 1:
            done.set()

    async with Client(broker.service_url) as client:
        await client.subscribe(
            "enc-listener",
            "s",
            initial_position="Earliest",
            message_listener=listener,
            crypto_key_reader=private_only(EC),
        )
        producer = await client.create_producer("enc-listener", batching_enabled=False)
        other = await client.create_producer(
            "enc-listener", encryption_key="k", crypto_key_reader=public_only(RSA)
        )
        await other.send(b"for someone else")  # FAIL: held back, not given to the listener
        await producer.send(b"plain")
        await asyncio.wait_for(done.wait(), 5)
        assert received == [b"plain"]


async def send_plain_sealed_plain(client: Client, topic: str) -> None:
    """Three entries: b"a" in clear, b"b" encrypted for a key the consumer lacks, b"c" in clear."""
    plain = await client.create_producer(topic, batching_enabled=False)
    sealed = await client.create_producer(
        topic, encryption_key="k", crypto_key_reader=public_only(EC)
    )
    await plain.send(b"a")
    await sealed.send(b"b")
    await plain.send(b"c")


async def test_batch_receive_stops_before_a_batch_it_cannot_decrypt(broker: BrokerThread) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(
            "enc-batch",
            "s",
            initial_position="Earliest",
            crypto_failure_action=ConsumerCryptoFailureAction.RAISE,
        )
        await send_plain_sealed_plain(client, "enc-batch")
        got: list[bytes] = []
        while not got:
            got = [m.data() for m in await consumer.batch_receive()]
        assert got == [b"a"]
        with pytest.raises(CryptoError):
            await consumer.batch_receive()
        assert [m.data() for m in await consumer.batch_receive()] == [b"c"]


async def test_batch_receive_under_fail_leaves_out_a_batch_it_cannot_decrypt(
    broker: BrokerThread,
) -> None:
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe("enc-batch-fail", "s", initial_position="Earliest")
        await send_plain_sealed_plain(client, "enc-batch-fail")
        got: list[bytes] = []
        for _ in range(50):
            got += [m.data() for m in await consumer.batch_receive()]
            if len(got) >= 2:
                break
        assert got == [b"a", b"c"]
