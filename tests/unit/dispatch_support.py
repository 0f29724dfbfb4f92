"""Scaffolding for the dispatcher unit tests (tests/unit/test_dispatch_*.py).

A real topic over a real managed ledger in memory (MemoryLedgerStore, MemoryMetadataStore)
with real subscriptions, consumers and dispatchers; the only fake is the consumer's transport,
which records what the broker sent it and can be made unwritable, as a handler's stream that
the client stopped reading is. Nothing here sleeps: a test waits on a condition
(``tests.waiting.eventually``) or for the dispatcher to go idle (:meth:`DispatchEnv.settle`).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from pulsar_grpc.broker.cluster.id_generator import DistributedIdGenerator
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.ledger import ManagedLedgerFactory, Position
from pulsar_grpc.broker.ledger.memory_store import MemoryLedgerStore
from pulsar_grpc.broker.listeners import ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from pulsar_grpc.broker.namespace_service import NamespaceService
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.schema.policies import SchemaPolicies
from pulsar_grpc.broker.schema.registry import SchemaRegistry
from pulsar_grpc.broker.schema.service import TopicSchemas
from pulsar_grpc.broker.schema.storage import SchemaStorage
from pulsar_grpc.broker.security.permissions import PermissionStore
from pulsar_grpc.broker.topics.consumer import Consumer, ConsumerOptions
from pulsar_grpc.broker.topics.dispatcher import Dispatcher
from pulsar_grpc.broker.topics.producer import Producer
from pulsar_grpc.broker.topics.registry import TopicRegistry
from pulsar_grpc.broker.topics.settings import TopicSettings
from pulsar_grpc.broker.topics.subscription import Subscription, SubType
from pulsar_grpc.broker.topics.topic import PersistentTopic
from pulsar_grpc.broker.topics.transport import Delivery
from pulsargrpc.internal.v1 import entry_pb2
from pulsargrpc.v1 import pulsar_pb2 as pb

TOPIC = "persistent://public/default/dispatch"
SUBSCRIPTION = "sub"
# Loop iterations the dispatcher must stay idle before a test takes it as settled: a read
# from the memory store resolves within a couple of them.
_QUIET_ITERATIONS = 5
_MAX_ITERATIONS = 10_000


class Writability(enum.Enum):
    WRITABLE = "writable"
    FULL = "full"  # what was sent is not written out yet: the dispatcher must hold off


@dataclass(eq=False)
class FakeTransport:
    """A ConsumerTransport that records what the broker sent through it."""

    name: str
    sent: list[Delivery] = field(default_factory=list)
    active_changes: list[bool] = field(default_factory=list)
    closed_with: list[BrokerError | None] = field(default_factory=list)
    state: Writability = Writability.WRITABLE
    _drained: list[Callable[[], None]] = field(default_factory=list)

    def send_messages(self, deliveries: list[Delivery]) -> None:
        assert self.state is Writability.WRITABLE, f"{self.name}: sent to while full"
        self.sent.extend(deliveries)

    def send_active_change(self, is_active: bool) -> None:
        self.active_changes.append(is_active)

    def close(self, error: BrokerError | None = None) -> None:
        self.closed_with.append(error)

    def writable(self) -> bool:
        return self.state is Writability.WRITABLE

    def on_writable(self, callback: Callable[[], None]) -> None:
        self._drained.append(callback)

    def fill(self) -> None:
        self.state = Writability.FULL

    def drain(self) -> None:
        """Written out: writable again, and the callbacks hear of it (as a handler's would)."""
        self.state = Writability.WRITABLE
        for callback in self._drained:
            callback()

    @property
    def positions(self) -> list[Position]:
        return [d.position for d in self.sent]

    @property
    def keyed(self) -> list[tuple[str, bytes]]:
        """(key, payload) of each delivered entry's first message, in delivery order (the
        messages of an entry share its key)."""
        firsts = (entry_pb2.StoredEntry.FromString(d.data).messages[0] for d in self.sent)
        return [(m.key, m.payload) for m in firsts]

    @property
    def payloads(self) -> list[bytes]:
        return [payload for _, payload in self.keyed]

    @property
    def keys(self) -> list[str]:
        return [key for key, _ in self.keyed]


@dataclass(eq=False)
class DispatchEnv:
    """One topic of a broker's topic layer, without a broker around it."""

    topic: PersistentTopic
    producer: Producer
    _sequence: int = 0

    async def publish(self, payload: bytes, key: str = "", batch: int = 1) -> Position:
        """Store one entry of ``batch`` messages (payloads ``payload``, ``payload``.1 ...)."""
        messages = [
            pb.MessageData(payload=payload if i == 0 else payload + f".{i}".encode(), key=key)
            for i in range(batch)
        ]
        first, self._sequence = self._sequence, self._sequence + batch
        data = entry_pb2.StoredEntry(sequence_id=first, messages=messages)
        receipt = await self.producer.publish(data.SerializeToString(), first, batch)
        assert receipt.position is not None
        return receipt.position

    async def publish_numbered(self, count: int) -> list[Position]:
        """Store ``count`` entries of one message each: m0, m1..."""
        return [await self.publish(f"m{i}".encode()) for i in range(count)]

    async def subscribe(
        self, name: str, sub_type: SubType, priority_level: int = 0
    ) -> tuple[Consumer, FakeTransport]:
        transport = FakeTransport(name)
        consumer = await self.topic.subscribe(
            SUBSCRIPTION,
            sub_type,
            ConsumerOptions(name=name, priority_level=priority_level),
            transport,
            initial_position="earliest",
        )
        return consumer, transport

    async def subscribe_each(
        self, sub_type: SubType, permits: dict[str, int]
    ) -> list[tuple[Consumer, FakeTransport]]:
        """A consumer for each name, subscribed in order; then each is granted its permits
        (0: none), all before the dispatcher runs."""
        subscribed = [await self.subscribe(name, sub_type) for name in permits]
        for (consumer, _), granted in zip(subscribed, permits.values(), strict=True):
            if granted:
                consumer.flow(granted)
        return subscribed

    @property
    def subscription(self) -> Subscription:
        return self.topic.get_subscription(SUBSCRIPTION)

    @property
    def dispatcher(self) -> Dispatcher:
        dispatcher = self.subscription.dispatcher
        assert dispatcher is not None
        return dispatcher

    def flow(self, consumer: Consumer, permits: int) -> None:
        consumer.flow(permits)

    async def ack(self, consumer: Consumer, *ids: tuple[Position, int]) -> None:
        """Ack message ids ((position, batch index); -1: the whole entry), durably."""
        durable = await self.subscription.acknowledge(consumer, ids, cumulative=False)
        await durable

    async def settle(self) -> None:
        """Wait until the dispatcher has no read in flight and starts none: whatever it was
        going to send has been sent, so a test may assert that something was not."""
        quiet = 0
        for _ in range(_MAX_ITERATIONS):
            await asyncio.sleep(0)
            # The read loop's task, kept only while it runs (Dispatcher._read_loop).
            quiet = quiet + 1 if self.dispatcher._task is None else 0
            if quiet >= _QUIET_ITERATIONS:
                return
        raise AssertionError("the dispatcher never went idle")


@asynccontextmanager
async def dispatch_env(topic: str = TOPIC, **config: object) -> AsyncIterator[DispatchEnv]:
    """``topic`` loaded with a producer, over stores in memory; ``config``: broker settings
    (a Failover switch waits no delay unless one is given)."""
    settings = ServiceConfiguration(
        **{"activeConsumerFailoverDelayTimeMillis": 0, **config}  # type: ignore[arg-type]
    )
    metadata = MemoryMetadataStore("dispatch")
    store = MemoryLedgerStore()
    ledgers = ManagedLedgerFactory(store, metadata)
    resources = NamespaceResources(settings, metadata, ledgers)
    permissions = PermissionStore(metadata)
    registry = TopicRegistry(
        TopicSettings.from_config(settings),
        ledgers,
        resources,
        NamespaceService(
            ListenerConfig.from_config(settings), _no_lookups, resources, clustered=False
        ),
        DistributedIdGenerator(settings.clusterName, 0),
        lambda: None,
        permissions.cache,
        TopicSchemas(
            SchemaRegistry(SchemaStorage(metadata)), SchemaPolicies(settings, permissions)
        ),
    )
    name = TopicName.get(topic)
    ledger = await ledgers.open(name.persistence_naming_encoding)
    loaded = await PersistentTopic.load(registry, name, ledger)
    producer = await loaded.add_producer("producer")
    try:
        yield DispatchEnv(loaded, producer)
    finally:
        await loaded.close()
        await ledgers.close()
        await store.close()
        await metadata.close()


def _no_lookups() -> BrokerData:
    raise AssertionError("the dispatch tests make no lookups: no broker data is needed")
