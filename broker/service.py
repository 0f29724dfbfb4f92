"""The broker service: lifecycle, the topic registry, namespaces and partitioned metadata.

Start-up order: metadata store, ledger storage, built-in namespace, web service, protocol
handlers (last, so nothing reaches a half-built broker), then a cluster member's load report (so
the cluster sees the broker only once it serves). Shutdown: new calls are refused with
ServiceNotReady at once, the load report is removed (the broker leaves the cluster), then topics
close (each ends its producers' and consumers' streams with
ServiceNotReady, a status every client retries, once what it accepted is durable), then the
handlers' servers stop (their streams have ended: nothing is left for gRPC to cancel), then the
web service and storage.
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
from pathlib import Path
from urllib.parse import unquote

from pulsar_grpc.broker.cluster import is_cluster_store
from pulsar_grpc.broker.cluster.id_generator import PRODUCER_NAME_PATH, DistributedIdGenerator
from pulsar_grpc.broker.cluster.load_report import LoadReporter
from pulsar_grpc.broker.cluster.ownership import (
    POLICIES_ROOT,
    NamespaceEphemeralData,
    OwnershipCache,
)
from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration
from pulsar_grpc.broker.data_lock import DataDirectoryLock
from pulsar_grpc.broker.errors import (
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    ServiceNotReadyError,
    TopicNotFoundError,
)
from pulsar_grpc.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from pulsar_grpc.broker.ledger.factory import open_ledger_store
from pulsar_grpc.broker.ledger.store import LedgerStore
from pulsar_grpc.broker.listeners import WEB_SCHEMES, BindAddress, ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData, LookupResult, lookup, resolve_ports
from pulsar_grpc.broker.metadata import MetadataStore, open_metadata_store
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceBundles, NamespaceName, TopicName
from pulsar_grpc.broker.protocol import ProtocolHandler, load_protocol_handlers
from pulsar_grpc.broker.tls import read_tls_files
from pulsar_grpc.broker.topics import PersistentTopic
from pulsar_grpc.broker.web import WebService

log = logging.getLogger(__name__)

PARTITIONED_ROOT = "/admin/partitioned-topics"


class ServiceState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # close() has begun: every new request is refused with ServiceNotReady


class BrokerService:
    """One broker. ``async with BrokerService(config) as broker:`` starts and stops it."""

    def __init__(self, config: ServiceConfiguration) -> None:
        self.config = config
        try:
            self.listeners = ListenerConfig.from_config(config)
        except ValueError as exc:
            raise ConfigError(str(exc).splitlines()) from None
        # The port each server socket really got (a configured 0 is resolved at bind time).
        self.bound: dict[BindAddress, int] = {}
        self.handlers: list[ProtocolHandler] = load_protocol_handlers(config)
        self.metadata: MetadataStore | None = None
        self._store: LedgerStore | None = None
        self._ledgers: ManagedLedgerFactory | None = None
        self.topics: dict[str, asyncio.Future[PersistentTopic]] = {}
        self.web: WebService | None = None
        self.producer_names: DistributedIdGenerator | None = None
        self.load_reporter: LoadReporter | None = None
        # Cluster mode only (a shared metadata store): which bundles this broker serves.
        # None in standalone, which owns every topic.
        self.ownership: OwnershipCache | None = None
        self.clustered = is_cluster_store(config.metadataStoreUrl)
        self._lock = DataDirectoryLock(Path(config.dataDirectory))
        self.state = ServiceState.OPEN

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start everything or nothing: a failure part-way closes what had started, and gives
        the data directory back for another broker (or a retry) in this process."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        if any(bind.tls for bind in self.listeners.bind_addresses):
            read_tls_files(self.config)  # unreadable TLS files: refuse before binding anything
        data_dir = Path(self.config.dataDirectory)
        await asyncio.to_thread(data_dir.mkdir, parents=True, exist_ok=True)
        self._lock.acquire()  # before opening anything in it: another broker may own it
        self.metadata = await open_metadata_store(
            self.config.metadataStoreUrl,
            data_dir,
            session_timeout_s=self.config.metadataStoreSessionTimeoutMillis / 1000,
        )
        self.producer_names = await DistributedIdGenerator.create(
            self.metadata, PRODUCER_NAME_PATH, self.config.clusterName
        )
        self._store = await open_ledger_store(
            self.config.ledgerStorageUrl, data_dir, sync=self.config.journalSyncData
        )
        self._ledgers = ManagedLedgerFactory(
            self._store,
            self.metadata,
            ManagedLedgerConfig(
                max_entries_per_ledger=self.config.managedLedgerMaxEntriesPerLedger,
                max_size_per_ledger_bytes=self.config.managedLedgerMaxSizePerLedgerMbytes
                * 1024
                * 1024,
                retention_time_minutes=self.config.defaultRetentionTimeInMinutes,
                retention_size_mb=self.config.defaultRetentionSizeInMB,
            ),
            cache_size_bytes=self.config.managedLedgerCacheSizeMB * 1024 * 1024,
        )
        await self._ensure_namespace(NamespaceName.get("public/default"))
        if self.listeners.bind_addresses_for(WEB_SCHEMES):
            web = WebService(self)
            await web.start()
            self.web = web
        for handler in self.handlers:
            await handler.start(self)
        if self.clustered:
            # After the handlers: the ownership data and the load report carry their bound
            # addresses and advertised data.
            me = NamespaceEphemeralData.of(
                self.broker_data(), self.listeners.internal_listener_name
            )
            ownership = self.ownership = OwnershipCache(self.store, me, self._unload_bundles)
            reporter = LoadReporter(
                self, self.metadata, bundles=lambda: [str(b) for b in ownership.owned()]
            )
            await reporter.start()
            self.load_reporter = reporter
        listeners = self.broker_data().listeners.values()
        log.info(
            "broker started: %s",
            "; ".join(
                f"{lst.name} {' '.join(filter(None, map(lst.url, lst.urls)))}" for lst in listeners
            ),
        )

    async def close(self) -> None:
        """Stop in the order the module docstring gives; a second call does nothing."""
        if self.state is ServiceState.CLOSING:
            return
        self.state = ServiceState.CLOSING
        if self.load_reporter is not None:
            await self.load_reporter.close()  # leave the cluster before serving stops
        await self._close_topics()
        if self.ownership is not None:
            await self.ownership.close()
        for handler in self.handlers:
            await handler.close()
        if self.web is not None:
            await self.web.close()
        if self._ledgers is not None:
            await self._ledgers.close()
        if self._store is not None:
            await self._store.close()
        if self.metadata is not None:
            await self.metadata.close()
        self._lock.release()

    async def _close_topics(self) -> None:
        """Close every topic, those still loading too (once loaded): a topic left open would
        keep its streams open until the server cancels them."""
        while self.topics:
            futures = list(self.topics.values())
            self.topics.clear()
            await _close_when_loaded(futures)

    def check_open(self) -> None:
        """Refuse a request once the broker is closing, with a status clients retry (on this
        broker after its restart, or wherever a lookup sends them)."""
        if self.state is ServiceState.CLOSING:
            raise ServiceNotReadyError("broker is shutting down")

    async def __aenter__(self) -> BrokerService:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------ listeners and lookup

    def broker_data(self) -> BrokerData:
        """This broker's advertised addresses and protocol handlers' data (load-data shape)."""
        return BrokerData(
            resolve_ports(self.listeners, self.bound),
            {h.protocol_name(): h.protocol_data_to_advertise() for h in self.handlers},
        )

    async def lookup_topic(
        self, topic: str, requested: str | None, via: str | None
    ) -> LookupResult:
        """The owner's addresses for the chosen listener. Standalone owns every topic; in a
        cluster the bundle's owner answers, and an unowned bundle is taken by this broker
        (first come, as Pulsar without a leader's assignment)."""
        name = TopicName.get(topic)
        if not self.clustered:
            return lookup(self.listeners, self.broker_data(), requested, via)
        ownership = self._ownership()
        await self.check_topic_can_exist(name)
        owner = await ownership.owner(await ownership.bundle_of(name))
        return self.owner_lookup(owner, requested, via)

    def owner_lookup(
        self, owner: NamespaceEphemeralData, requested: str | None, via: str | None
    ) -> LookupResult:
        """A lookup answer with ``owner``'s addresses (this broker's when it is the owner)."""
        assert self.ownership is not None
        if owner is self.ownership.me:
            return lookup(self.listeners, self.broker_data(), requested, via)
        return lookup(self.listeners, owner.broker_data(), requested, via)

    def _ownership(self) -> OwnershipCache:
        if self.ownership is None:
            raise ServiceNotReadyError("broker is starting")
        return self.ownership

    async def _unload_bundles(self, bundles: list[NamespaceBundle]) -> None:
        """Stop serving ``bundles`` at once: their topics close, and their producers and
        consumers end with ServiceNotReady, which clients retry after a fresh lookup."""
        closing = [
            self.topics.pop(key)
            for key in list(self.topics)
            if any(b.includes(TopicName.get(key)) for b in bundles)
        ]
        if closing:
            log.info("unloading %d topics of %d lost bundles", len(closing), len(bundles))
            await _close_when_loaded(closing)

    def internal_urls(self) -> LookupResult:
        """This broker's addresses on the internal listener (what `standalone` prints)."""
        return lookup(
            self.listeners, self.broker_data(), self.listeners.internal_listener_name, None
        )

    @property
    def ledgers(self) -> ManagedLedgerFactory:
        assert self._ledgers is not None, "broker not started"
        return self._ledgers

    @property
    def store(self) -> MetadataStore:
        assert self.metadata is not None, "broker not started"
        return self.metadata

    # ------------------------------------------------------------ tenants and namespaces

    async def _ensure_namespace(self, ns: NamespaceName) -> None:
        tenant_path = f"{POLICIES_ROOT}/{ns.tenant}"
        if not await self.store.exists(tenant_path):
            await self.store.put(tenant_path, json.dumps({"allowedClusters": []}).encode())
        await self.create_namespace(ns, exist_ok=True)

    async def create_tenant(self, tenant: str) -> None:
        NamespaceName.get(f"{tenant}/x")  # validates the tenant part
        await self.store.put(f"{POLICIES_ROOT}/{tenant}", json.dumps({}).encode(), -1)

    async def create_namespace(self, ns: NamespaceName, exist_ok: bool = False) -> None:
        if not await self.store.exists(f"{POLICIES_ROOT}/{ns.tenant}"):
            raise NotFoundError(f"tenant {ns.tenant} does not exist")
        path = f"{POLICIES_ROOT}/{ns}"
        if await self.store.exists(path):
            if exist_ok:
                return
            raise NotAllowedError(f"namespace {ns} already exists")
        bundles = NamespaceBundles.with_count(ns, self.config.defaultNumberOfNamespaceBundles)
        policies = {"bundles": {"boundaries": bundles.boundary_strings, "numBundles": len(bundles)}}
        await self.store.put(path, json.dumps(policies).encode())

    async def list_namespaces(self, tenant: str) -> list[str]:
        return [f"{tenant}/{n}" for n in await self.store.get_children(f"{POLICIES_ROOT}/{tenant}")]

    async def _check_namespace(self, ns: NamespaceName) -> None:
        if not await self.store.exists(f"{POLICIES_ROOT}/{ns}"):
            raise TopicNotFoundError(f"namespace {ns} does not exist")

    # ------------------------------------------------------------ partitioned topics

    def _partitioned_path(self, topic: TopicName) -> str:
        return f"{PARTITIONED_ROOT}/{topic.persistence_naming_encoding}"

    async def get_partitioned_metadata(self, name: str, auto_create: bool = True) -> int:
        """Partitions of a topic (0 = not partitioned); like Pulsar, this may auto-create a
        partitioned topic when allowAutoTopicCreationType is ``partitioned``."""
        topic = TopicName.get(name)
        if topic.is_partitioned:
            return 0
        found = await self.store.get(self._partitioned_path(topic))
        if found is not None:
            return int(json.loads(found.value)["partitions"])
        if (
            auto_create
            and self.config.allowAutoTopicCreation
            and self.config.allowAutoTopicCreationType == "partitioned"
            and not await self.ledgers.exists(topic.persistence_naming_encoding)
        ):
            await self.create_partitioned_topic(name, self.config.defaultNumPartitions)
            return self.config.defaultNumPartitions
        return 0

    async def create_partitioned_topic(self, name: str, partitions: int) -> None:
        topic = TopicName.get(name)
        if partitions < 1:
            raise InvalidArgumentError(f"number of partitions must be at least 1, got {partitions}")
        if topic.is_partitioned:
            raise InvalidArgumentError(
                f"{topic} is a partition name; a partitioned topic's name has no -partition- suffix"
            )
        await self._check_namespace(topic.namespace)
        if await self.ledgers.exists(topic.persistence_naming_encoding):
            raise NotAllowedError(f"a non-partitioned topic {topic} already exists")
        path = self._partitioned_path(topic)
        if await self.store.exists(path):
            raise NotAllowedError(f"partitioned topic {topic} already exists")
        await self.store.put(path, json.dumps({"partitions": partitions}).encode())

    # ------------------------------------------------------------ topics

    async def get_topic(
        self, name: str | TopicName, create: bool = True, explicit: bool = False
    ) -> PersistentTopic:
        """The loaded topic, loading (and, when allowed, creating) it first.

        ``explicit`` is an admin's create: allowAutoTopicCreation does not apply to it.
        """
        self.check_open()
        topic_name = name if isinstance(name, TopicName) else TopicName.get(name)
        key = topic_name.full_name
        while (future := self.topics.get(key)) is not None:
            try:
                return await asyncio.shield(future)
            except TopicNotFoundError:
                # Someone else's load did not create it (e.g. a stats request); we may.
                if not (create or explicit):
                    raise
        future = asyncio.get_running_loop().create_future()
        self.topics[key] = future
        try:
            future.set_result(await self._load_topic(topic_name, create, explicit))
        except BaseException as exc:
            if self.topics.get(key) is future:  # close() may have taken it already
                del self.topics[key]
            future.set_exception(exc)
            future.exception()  # retrieved: waiting callers get it from their own await
            raise
        return future.result()

    async def check_topic_can_exist(self, topic: TopicName) -> None:
        """Refuse a topic whose name alone rules it out: another domain than persistent, or a
        namespace that does not exist."""
        if topic.domain.value != "persistent":
            raise NotAllowedError(f"{topic}: only persistent topics are supported")
        await self._check_namespace(topic.namespace)

    async def _load_topic(self, topic: TopicName, create: bool, explicit: bool) -> PersistentTopic:
        await self.check_topic_can_exist(topic)
        if self.clustered:
            await self._ownership().check_owner(topic)  # NotOwnerError names the owner
        ledger_name = topic.persistence_naming_encoding
        if topic.is_partitioned:
            base = TopicName.get(topic.partitioned_topic_name)
            partitions = await self.get_partitioned_metadata(str(base), auto_create=False)
            if partitions and topic.partition_index >= partitions:
                raise TopicNotFoundError(
                    f"{topic}: partitioned topic {base} has only {partitions} partitions"
                )
            known = partitions > 0
        else:
            partitions = await self.get_partitioned_metadata(str(topic), auto_create=False)
            if partitions:
                raise NotAllowedError(
                    f"{topic} is a partitioned topic with {partitions} partitions: "
                    f"use {topic}-partition-<0..{partitions - 1}>"
                )
            known = False
        if not known and not await self.ledgers.exists(ledger_name):
            if not (explicit or (create and self.config.allowAutoTopicCreation)):
                raise TopicNotFoundError(f"topic {topic} does not exist")
        ledger = await self.ledgers.open(ledger_name)
        return await PersistentTopic.load(self, topic, ledger)

    async def list_topics(self, namespace: str) -> list[str]:
        ns = NamespaceName.get(namespace)
        await self._check_namespace(ns)
        prefix = f"{ns}/persistent/"
        # Listed as stored, not parsed again: a name that an older version accepted and the
        # naming rules refuse now is still listed rather than failing the whole listing.
        names = [
            f"persistent://{ns}/{unquote(n[len(prefix) :])}"
            for n in await self.ledgers.list_names(prefix)
        ]
        partitioned = await self.store.get_children(f"{PARTITIONED_ROOT}/{ns}/persistent")
        names += [f"persistent://{ns}/{unquote(n)}" for n in partitioned]
        return sorted(set(names))

    async def delete_topic(self, name: str) -> None:
        topic = TopicName.get(name)
        future = self.topics.pop(topic.full_name, None)
        if future is not None and future.done() and not future.exception():
            await future.result().close()
        if not await self.ledgers.exists(topic.persistence_naming_encoding):
            raise TopicNotFoundError(f"topic {topic} does not exist")
        await self.ledgers.delete(topic.persistence_naming_encoding)

    def forget_topic(self, topic: PersistentTopic) -> None:
        """Drop ``topic`` from the loaded topics if it is still the loaded one (its ledger was
        fenced: another broker owns it now), so the next request loads it again, which the
        ownership check sends to the owner."""
        future = self.topics.get(topic.name)
        if future is not None and future.done() and future.exception() is None:
            if future.result() is topic:
                del self.topics[topic.name]

    def loaded_topics(self) -> list[PersistentTopic]:
        return [f.result() for f in self.topics.values() if f.done() and f.exception() is None]


async def _close_when_loaded(futures: list[asyncio.Future[PersistentTopic]]) -> None:
    """Close the topics of ``futures`` (not empty) once they have loaded; those that failed to
    load have nothing to close."""
    await asyncio.wait(futures)
    for future in futures:
        if not future.cancelled() and future.exception() is None:
            await future.result().close()
