"""The broker service: the lifecycle root. It owns the configuration, listeners and bound ports,
the metadata store, the ledger storage, the web service, the protocol handlers and the load
report, and holds the broker's parts:

- ``resources`` (NamespaceResources): tenants, namespaces, partitioned-topic metadata;
- ``namespaces`` (NamespaceService): bundle ownership and lookups;
- ``topics`` (TopicRegistry): the loaded topics, loaded only where their bundle is owned;
- ``schemas`` (TopicSchemas): the schema registry and the namespaces' schema policies.

Protocol handlers see it only as a BrokerContext (broker/protocol.py); the web route groups
each through their own narrow port (broker/service_parts.py), the load report through a
LoadReportPort. It is the composition root: nothing else in broker/ imports this module.

Start-up order: metadata store, ledger storage, built-in namespace, web service, protocol
handlers (last, so nothing reaches a half-built broker), then a cluster member's bundle
ownership, load report (so the cluster sees the broker only once it serves) and its part in the
leader election (once its report is there for the leader's placement). Shutdown: new calls are
refused with ServiceNotReady at once, leadership is given up, the load report is removed (the
broker leaves the cluster), then topics close (each ends its producers' and consumers' streams with
ServiceNotReady, a status every client retries, once what it accepted is durable), then the
bundles are given up, the handlers' servers stop (their streams have ended: nothing is left for
gRPC to cancel), then the web service, the managed ledgers, the metadata store (the end of its
session gives whatever this broker still holds to the others at once) and the ledger store.

A stop takes at most brokerShutdownTimeoutMs whatever the stores do (Pulsar bounds its close the
same way): each step gets what is left of four fifths of it, the stores' own closing (which ends
the ZooKeeper session, so the other brokers take this broker's bundles at once) what is left of
the whole. A step that does not finish in time is left behind, and one line names what was
left; a step that fails is logged in one line and the next one runs.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from types import MappingProxyType

from pulsar_grpc.broker.cluster import broker_id, is_cluster_store
from pulsar_grpc.broker.cluster.id_generator import PRODUCER_NAME_PATH, DistributedIdGenerator
from pulsar_grpc.broker.cluster.leader import LeaderBroker, LeaderElection
from pulsar_grpc.broker.cluster.load_manager import LoadManager
from pulsar_grpc.broker.cluster.load_report import LoadReporter, LoadReportPort
from pulsar_grpc.broker.cluster.ownership import NamespaceEphemeralData
from pulsar_grpc.broker.cluster.ownership_watch import OwnershipWatchService
from pulsar_grpc.broker.cluster.placement import BundlePlacement
from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration
from pulsar_grpc.broker.data_lock import DataDirectoryLock
from pulsar_grpc.broker.dynamic_config import DynamicConfig
from pulsar_grpc.broker.errors import ServiceNotReadyError
from pulsar_grpc.broker.ledger import ManagedLedgerConfig, ManagedLedgerFactory
from pulsar_grpc.broker.ledger.factory import open_ledger_store
from pulsar_grpc.broker.ledger.store import LedgerStore
from pulsar_grpc.broker.listeners import WEB_SCHEMES, BindAddress, ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData, LookupResult, resolve_ports
from pulsar_grpc.broker.metadata import MetadataStore, open_metadata_store
from pulsar_grpc.broker.namespace_service import ClusterRole, NamespaceService
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.protocol import ProtocolHandler, load_protocol_handlers
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.schema import SchemaPolicies, SchemaRegistry, SchemaStorage, TopicSchemas
from pulsar_grpc.broker.security.authentication import AuthenticationService
from pulsar_grpc.broker.security.authorization import AuthorizationService
from pulsar_grpc.broker.security.permissions import PermissionStore
from pulsar_grpc.broker.service_parts import narrowed
from pulsar_grpc.broker.stalls import StallMonitor
from pulsar_grpc.broker.tls import read_tls_files
from pulsar_grpc.broker.topics import PersistentTopic
from pulsar_grpc.broker.topics.backlog_quota_check import BacklogQuotaCheck
from pulsar_grpc.broker.topics.registry import TopicRegistry
from pulsar_grpc.broker.topics.settings import TopicSettings
from pulsar_grpc.broker.topics.stats_task import StatsTask
from pulsar_grpc.broker.web.app import WebPort, WebService

log = logging.getLogger(__name__)

# The share of brokerShutdownTimeoutMs kept for closing the stores themselves.
_STORES_SHARE = 0.2

CloseStep = tuple[str, Callable[[], Awaitable[object]]]


class ServiceState(enum.Enum):
    OPEN = "open"
    CLOSING = "closing"  # close() has begun: every new request is refused with ServiceNotReady


class BrokerService:
    """One broker. ``async with BrokerService(config) as broker:`` starts and stops it.

    It implements BrokerContext (broker/protocol.py) for the protocol handlers by delegating
    to its parts; everything else reaches the parts directly.
    """

    def __init__(self, config: ServiceConfiguration) -> None:
        self.config = config
        try:
            self.listeners = ListenerConfig.from_config(config)
        except ValueError as exc:
            raise ConfigError(str(exc).splitlines()) from None
        # The port each server socket really got (a configured 0 is resolved at bind time).
        self._bound: dict[BindAddress, int] = {}
        self.handlers: list[ProtocolHandler] = load_protocol_handlers(config)
        # None while authenticationEnabled is false; built now so a bad provider setting
        # refuses to start before anything binds.
        self.authentication = AuthenticationService.from_config(config)
        self.metadata: MetadataStore | None = None
        # Tenants' admins and namespaces' grants (kept whether or not they are enforced), and
        # their enforcement: None while authorizationEnabled is false. Both need the metadata
        # store, so they are made once it is open.
        self._permissions: PermissionStore | None = None
        self.authorization: AuthorizationService | None = None
        self._store: LedgerStore | None = None
        self._ledgers: ManagedLedgerFactory | None = None
        self._resources: NamespaceResources | None = None
        self._namespaces: NamespaceService | None = None
        self._topics: TopicRegistry | None = None
        self._schemas: TopicSchemas | None = None
        # The rate properties' overrides from /admin/configuration (Pulsar's dynamic config).
        self.dynamic_config: DynamicConfig | None = None
        self.web: WebService | None = None
        self.load_reporter: LoadReporter | None = None
        self.stats_task: StatsTask | None = None
        self.backlog_quota_check: BacklogQuotaCheck | None = None
        self.stalls: StallMonitor | None = None
        self.election: LeaderElection | None = None
        # A cluster member's watches of topic ownership for clients (WatchTopicOwnership).
        self.ownership_watches: OwnershipWatchService | None = None
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
        metadata = self.metadata = await open_metadata_store(
            self.config.metadataStoreUrl,
            data_dir,
            session_timeout_s=self.config.metadataStoreSessionTimeoutMillis / 1000,
        )
        if self.authentication is not None:  # SCRAM's role-token keys live in the store
            self.authentication.use_metadata(metadata)
        permissions = self._permissions = PermissionStore(metadata)
        self.authorization = AuthorizationService.from_config(self.config, permissions)
        self._schemas = TopicSchemas(
            SchemaRegistry(SchemaStorage(metadata)),
            SchemaPolicies(self.config, permissions),
        )
        producer_names = await DistributedIdGenerator.create(
            metadata, PRODUCER_NAME_PATH, self.config.clusterName
        )
        self._store = await open_ledger_store(
            self.config.ledgerStorageUrl, data_dir, sync=self.config.journalSyncData
        )
        ledgers = self._ledgers = ManagedLedgerFactory(
            self._store,
            metadata,
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
        resources = self._resources = NamespaceResources(self.config, metadata, ledgers)
        namespaces = self._namespaces = NamespaceService(
            self.listeners,
            self.broker_data,
            resources,
            clustered=is_cluster_store(self.config.metadataStoreUrl),
        )
        topics = self._topics = TopicRegistry(
            TopicSettings.from_config(self.config),
            ledgers,
            resources,
            namespaces,
            producer_names,
            self.check_open,
            permissions.cache,
            self._schemas,
        )
        self.stats_task = StatsTask(topics, self.config.statsUpdateFrequencyInSecs)
        self.stats_task.start()
        if self.config.backlogQuotaCheckEnabled:
            self.backlog_quota_check = BacklogQuotaCheck(
                topics.loaded_topics, self.config.backlogQuotaCheckIntervalInSeconds
            )
            self.backlog_quota_check.start()
        self.stalls = StallMonitor(self.config.statsUpdateFrequencyInSecs)
        self.stalls.start()
        dynamic = self.dynamic_config = DynamicConfig(
            self.config,
            metadata,
            [
                lambda config: topics.apply(TopicSettings.from_config(config)),
                resources.apply,
                self._take_config,
            ],
        )
        await dynamic.start()
        await resources.ensure_namespace(NamespaceName.get("public/default"))
        if self.listeners.bind_addresses_for(WEB_SCHEMES):
            web = WebService(narrowed(self, WebPort))
            await web.start()
            self.web = web
        for handler in self.handlers:
            await handler.start(self)
        if namespaces.clustered:
            # After the handlers: the ownership data and the load report carry their bound
            # addresses and advertised data.
            await self._join_cluster(metadata, namespaces, topics)
        listeners = self.broker_data().listeners.values()
        log.info(
            "broker started: %s",
            "; ".join(
                f"{lst.name} {' '.join(filter(None, map(lst.url, lst.urls)))}" for lst in listeners
            ),
        )

    async def _join_cluster(
        self, metadata: MetadataStore, namespaces: NamespaceService, topics: TopicRegistry
    ) -> None:
        """Own bundles, publish the load report, then take part in the leader election (the
        leader's placement reads the reports, its own included)."""
        namespaces.start_ownership(metadata, topics.unload_bundles)
        self.ownership_watches = OwnershipWatchService(metadata)
        port = LoadReportPort(
            self.config, self.listeners, self.bound, self.broker_data, topics.loaded_topics
        )
        reporter = LoadReporter(port, metadata, bundles=namespaces.owned_bundles)
        await reporter.start()
        self.load_reporter = reporter
        election = self.election = LeaderElection(
            metadata, LeaderBroker(self.broker_id(), self.web_service_url())
        )
        placement = BundlePlacement(
            metadata, self.config.loadBalancerBrokerOverloadedThresholdPercentage
        )
        namespaces.start_placement(ClusterRole(self.broker_id(), election, placement))
        LoadManager(self.config, metadata, placement, self.resources).register(election)
        await election.start()

    async def close(self) -> None:
        """Stop in the order the module docstring gives, within brokerShutdownTimeoutMs; a
        second call does nothing."""
        if self.state is ServiceState.CLOSING:
            return
        self.state = ServiceState.CLOSING
        timeout_s = self.config.brokerShutdownTimeoutMs / 1000
        start = asyncio.get_running_loop().time()
        left: list[str] = []
        for name, step in self._serving_steps():
            await _bounded(name, step, start + timeout_s * (1 - _STORES_SHARE), left)
        for name, step in self._store_steps():
            await _bounded(name, step, start + timeout_s, left)
        self._lock.release()
        if left:
            log.warning(
                "shutdown reached brokerShutdownTimeoutMs=%d: stopping without finishing %s "
                "(what they held goes with the stores' sessions)",
                self.config.brokerShutdownTimeoutMs,
                ", ".join(left),
            )

    def _serving_steps(self) -> list[CloseStep]:
        """What stops serving, in order (those of the parts that were started)."""
        steps: list[CloseStep] = []
        for handler in self.handlers:
            # Load balancers stop sending new calls before any ends.
            steps.append((f"draining {handler.protocol_name()}", handler.drain))
        if self.ownership_watches is not None:
            # Clients watch through another broker from now on.
            steps.append(("ending the ownership watches", self.ownership_watches.close))
        if self.election is not None:
            steps.append(("leaving the election", self.election.close))  # another leads at once
        if self.load_reporter is not None:
            # Leave the cluster before serving stops.
            steps.append(("removing the load report", self.load_reporter.close))
        if self.dynamic_config is not None:
            steps.append(("dynamic configuration", self.dynamic_config.close))
        if self.stats_task is not None:
            steps.append(("stats", self.stats_task.close))
        if self.stalls is not None:
            steps.append(("stall monitor", self.stalls.close))
        if self.backlog_quota_check is not None:
            steps.append(("backlog quota check", self.backlog_quota_check.close))
        if self._topics is not None:
            steps.append(("closing the topics", self._topics.close_all))
        if self._namespaces is not None:
            steps.append(("giving up the bundles", self._namespaces.close))
        for handler in self.handlers:
            steps.append((f"closing {handler.protocol_name()}", handler.close))
        if self.web is not None:
            steps.append(("web service", self.web.close))
        if self._ledgers is not None:
            steps.append(("closing the managed ledgers", self._ledgers.close))
        return steps

    def _store_steps(self) -> list[CloseStep]:
        """The stores, the metadata store first: ending its session frees what this broker
        still holds (a step left unfinished may have kept bundles) even when the ledger store
        does not answer."""
        steps: list[CloseStep] = []
        if self.metadata is not None:
            steps.append(("closing the metadata store", self.metadata.close))
        if self._store is not None:
            steps.append(("closing the ledger store", self._store.close))
        return steps

    def _take_config(self, config: ServiceConfiguration) -> None:
        """A dynamic change: ``config`` is the configuration in effect now (a new object; the
        one it replaces is not written), which the web service's admin views answer with."""
        self.config = config

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

    def broker_data(self) -> BrokerData:
        """This broker's advertised addresses and protocol handlers' data (load-data shape)."""
        return BrokerData(
            resolve_ports(self.listeners, self.bound),
            {h.protocol_name(): h.protocol_data_to_advertise() for h in self.handlers},
        )

    @property
    def bound(self) -> Mapping[BindAddress, int]:
        """The port each server socket really got, by bind address (read-only)."""
        return MappingProxyType(self._bound)

    def record_bound(self, bind: BindAddress, port: int) -> None:
        """A handler or the web service bound ``bind``'s socket to ``port``."""
        self._bound[bind] = port

    def broker_id(self) -> str:
        """Pulsar's lookupServiceAddress (host:webport): the broker's name in the cluster."""
        return broker_id(self.config.advertisedAddress, self.listeners, self.bound)

    def web_service_url(self) -> str:
        """This broker's web address on the internal listener (http, else https)."""
        urls = self.namespaces.internal_urls()
        url = urls.http_url or urls.http_url_tls
        if url is None:
            raise ServiceNotReadyError("the internal listener advertises no web address")
        return url

    # ------------------------------------------------------------ the parts (once started)

    @property
    def ledgers(self) -> ManagedLedgerFactory:
        assert self._ledgers is not None, "broker not started"
        return self._ledgers

    @property
    def store(self) -> MetadataStore:
        assert self.metadata is not None, "broker not started"
        return self.metadata

    @property
    def permissions(self) -> PermissionStore:
        assert self._permissions is not None, "broker not started"
        return self._permissions

    @property
    def resources(self) -> NamespaceResources:
        assert self._resources is not None, "broker not started"
        return self._resources

    @property
    def namespaces(self) -> NamespaceService:
        assert self._namespaces is not None, "broker not started"
        return self._namespaces

    @property
    def topics(self) -> TopicRegistry:
        assert self._topics is not None, "broker not started"
        return self._topics

    @property
    def schemas(self) -> TopicSchemas:
        assert self._schemas is not None, "broker not started"
        return self._schemas

    # ------------------------------------------------------------ BrokerContext (handlers)

    async def get_topic(self, name: str | TopicName, create: bool = True) -> PersistentTopic:
        return await self.topics.get_topic(name, create)

    async def lookup_topic(
        self, topic: str, requested: str | None, via: str | None, authoritative: bool = False
    ) -> LookupResult:
        return await self.namespaces.lookup_topic(topic, requested, via, authoritative)

    def owner_lookup(
        self, owner: NamespaceEphemeralData, requested: str | None, via: str | None
    ) -> LookupResult:
        return self.namespaces.owner_lookup(owner, requested, via)

    async def get_partitioned_metadata(self, name: str) -> int:
        return await self.resources.get_partitioned_metadata(name)

    async def list_topics(self, namespace: str) -> list[str]:
        return await self.resources.list_topics(namespace)


async def _bounded(
    name: str, step: Callable[[], Awaitable[object]], deadline: float, left: list[str]
) -> None:
    """Run one close step until ``deadline`` (loop time); past it the step is cancelled and
    named in ``left``. A step that fails is logged in one line: the next one runs anyway."""
    bound = asyncio.timeout_at(deadline)
    try:
        async with bound:
            await step()
    except TimeoutError:
        if not bound.expired():
            log.warning("shutdown: %s failed: timed out", name)
        else:
            left.append(name)
    except Exception as exc:
        log.warning("shutdown: %s failed: %s", name, exc)
