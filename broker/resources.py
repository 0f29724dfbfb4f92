"""Namespace resources (Pulsar's PulsarResources / NamespaceResources): tenants, namespaces and
partitioned-topic metadata, kept on the metadata store.

Nothing here loads a topic or knows who owns one: this is what every broker of a cluster reads
alike. Topic existence (a managed ledger) is asked of the ledger factory, because a partitioned
topic and a non-partitioned one of the same name must not both exist.
"""

from __future__ import annotations

import json
from urllib.parse import unquote_plus

from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT, policies_bundles
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import (
    InvalidArgumentError,
    NotAllowedError,
    NotFoundError,
    TopicNotFoundError,
)
from pulsar_grpc.broker.ledger import ManagedLedgerFactory
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.metadata.store import BadVersionError
from pulsar_grpc.broker.naming import NamespaceBundles, NamespaceName, TopicName
from pulsar_grpc.broker.partition_limits import check_partitions, max_partitions

PARTITIONED_ROOT = "/admin/partitioned-topics"


class NamespaceResources:
    """Tenants, namespaces (created with their bundles), partitioned-topic metadata and the
    listing of a namespace's topics."""

    def __init__(
        self, config: ServiceConfiguration, store: MetadataStore, ledgers: ManagedLedgerFactory
    ) -> None:
        self.config = config
        self.store = store
        self.ledgers = ledgers
        # maxNumPartitionsPerPartitionedTopic is dynamic: kept here, replaced by apply().
        self.max_partitions = max_partitions(config)

    def apply(self, config: ServiceConfiguration) -> None:
        """A dynamic configuration change: its partitions' limit holds from the next create
        or update of a partitioned topic, as in Pulsar."""
        self.max_partitions = max_partitions(config)

    # ------------------------------------------------------------ tenants and namespaces

    async def ensure_namespace(self, ns: NamespaceName) -> None:
        """Create ``ns`` and its tenant unless they exist (the built-in public/default)."""
        tenant_path = f"{POLICIES_ROOT}/{ns.tenant}"
        if not await self.store.exists(tenant_path):
            tenant_info = {"adminRoles": [], "allowedClusters": [self.config.clusterName]}
            await self.store.put(tenant_path, json.dumps(tenant_info).encode())
        await self.create_namespace(ns, exist_ok=True)

    async def create_namespace(
        self,
        ns: NamespaceName,
        exist_ok: bool = False,
        bundles: NamespaceBundles | None = None,
    ) -> None:
        """Create ``ns`` with ``bundles`` (defaultNumberOfNamespaceBundles when None)."""
        if not await self.store.exists(f"{POLICIES_ROOT}/{ns.tenant}"):
            raise NotFoundError(f"tenant {ns.tenant} does not exist")
        path = f"{POLICIES_ROOT}/{ns}"
        if await self.store.exists(path):
            if exist_ok:
                return
            raise NotAllowedError(f"namespace {ns} already exists")
        if bundles is None:
            bundles = NamespaceBundles.with_count(ns, self.config.defaultNumberOfNamespaceBundles)
        policies = {"bundles": {"boundaries": bundles.boundary_strings, "numBundles": len(bundles)}}
        await self.store.put(path, json.dumps(policies).encode())

    async def delete_namespace(self, ns: NamespaceName) -> None:
        """Remove the namespace's policies and its (empty) partitioned-topic folder; its
        topics must be gone already (the caller refuses or deletes them)."""
        path = f"{POLICIES_ROOT}/{ns}"
        if not await self.store.exists(path):
            raise NotFoundError(f"Namespace {ns} does not exist")
        await self.store.delete_recursive(f"{PARTITIONED_ROOT}/{ns}")
        await self.store.delete_recursive(path)

    async def get_bundles(self, ns: NamespaceName) -> tuple[NamespaceBundles, int]:
        """The namespace's bundles (its policies' BundlesData) and the policies' version, for
        a compare-and-set :meth:`set_bundles`."""
        found = await self.store.get(f"{POLICIES_ROOT}/{ns}")
        if found is None:
            raise NotFoundError(f"Namespace {ns} does not exist")
        return policies_bundles(ns, found.value), found.version

    async def set_bundles(self, bundles: NamespaceBundles, version: int) -> bool:
        """Write ``bundles`` into the namespace's policies if they are still at ``version``
        (False when another writer came first: read again and retry)."""
        path = f"{POLICIES_ROOT}/{bundles.namespace}"
        found = await self.store.get(path)
        if found is None:
            raise NotFoundError(f"Namespace {bundles.namespace} does not exist")
        if found.version != version:
            return False
        policies = json.loads(found.value)
        policies["bundles"] = {"boundaries": bundles.boundary_strings, "numBundles": len(bundles)}
        try:
            await self.store.put(path, json.dumps(policies).encode(), version)
        except BadVersionError:
            return False
        return True

    async def list_namespaces(self, tenant: str) -> list[str]:
        return [f"{tenant}/{n}" for n in await self.store.get_children(f"{POLICIES_ROOT}/{tenant}")]

    async def check_namespace(self, ns: NamespaceName) -> None:
        if not await self.store.exists(f"{POLICIES_ROOT}/{ns}"):
            raise TopicNotFoundError(f"namespace {ns} does not exist")

    async def check_topic_can_exist(self, topic: TopicName) -> None:
        """Refuse a topic whose name alone rules it out: another domain than persistent, or a
        namespace that does not exist."""
        if topic.domain.value != "persistent":
            raise NotAllowedError(f"{topic}: only persistent topics are supported")
        await self.check_namespace(topic.namespace)

    async def list_topics(self, namespace: str) -> list[str]:
        """Every stored topic of ``namespace``: non-partitioned topics and partitions (their
        managed ledgers) and partitioned topics (their metadata), loaded here or not."""
        ns = NamespaceName.get(namespace)
        await self.check_namespace(ns)
        prefix = f"{ns}/persistent/"
        # Decoded as Pulsar's Codec.decode (URLDecoder: '+' is a space, as _url_encode wrote it).
        # Listed as stored, not parsed again: a name that an older version accepted and the
        # naming rules refuse now is still listed rather than failing the whole listing.
        names = [
            f"persistent://{ns}/{unquote_plus(n[len(prefix) :])}"
            for n in await self.ledgers.list_names(prefix)
        ]
        partitioned = await self.store.get_children(f"{PARTITIONED_ROOT}/{ns}/persistent")
        names += [f"persistent://{ns}/{unquote_plus(n)}" for n in partitioned]
        return sorted(set(names))

    # ------------------------------------------------------------ partitioned topics

    async def list_partitioned_topics(self, namespace: NamespaceName) -> list[str]:
        """The namespace's partitioned topics (their metadata), full names, sorted."""
        await self.check_namespace(namespace)
        found = await self.store.get_children(f"{PARTITIONED_ROOT}/{namespace}/persistent")
        return sorted(f"persistent://{namespace}/{unquote_plus(n)}" for n in found)

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
        check_partitions(self.max_partitions, partitions)
        if topic.is_partitioned:
            raise InvalidArgumentError(
                f"{topic} is a partition name; a partitioned topic's name has no -partition- suffix"
            )
        await self.check_namespace(topic.namespace)
        if await self.ledgers.exists(topic.persistence_naming_encoding):
            raise NotAllowedError(f"a non-partitioned topic {topic} already exists")
        path = self._partitioned_path(topic)
        if await self.store.exists(path):
            raise NotAllowedError(f"partitioned topic {topic} already exists")
        await self.store.put(path, json.dumps({"partitions": partitions}).encode())

    async def update_partitioned_topic(self, name: str, partitions: int) -> None:
        """More partitions for a partitioned topic (compare-and-set): Pulsar's 409 when it is
        not partitioned or the count does not grow."""
        topic = TopicName.get(name)
        path = self._partitioned_path(topic)
        check_partitions(self.max_partitions, partitions)
        found = await self.store.get(path)
        if found is None:
            raise NotAllowedError(f"Topic {topic} is not partitioned topic")
        metadata = json.loads(found.value)
        current = int(metadata["partitions"])
        if partitions <= current:
            raise NotAllowedError(f"number of partitions must be more than existing {current}")
        try:
            await self.store.put(
                path, json.dumps({**metadata, "partitions": partitions}).encode(), found.version
            )
        except BadVersionError:
            raise NotAllowedError(f"partitioned topic {topic} changed meanwhile: retry") from None

    async def mark_partitioned_deleted(self, name: str) -> None:
        """Mark ``name``'s metadata as being deleted (Pulsar's markPartitionedTopicDeleted),
        before its partitions are: none of them is loaded or created again meanwhile, and
        the metadata stays until every partition is gone, so a failed delete can be retried."""
        path = self._partitioned_path(TopicName.get(name))
        found = await self.store.get(path)
        if found is None:
            raise TopicNotFoundError(f"Partitioned topic {name} does not exist")
        marked = {**json.loads(found.value), "deleted": True}
        try:
            await self.store.put(path, json.dumps(marked).encode(), found.version)
        except BadVersionError:
            raise NotAllowedError(f"partitioned topic {name} changed meanwhile: retry") from None

    async def is_partitioned_deleted(self, name: str) -> bool:
        """Whether ``name``'s partitioned metadata is marked as being deleted."""
        found = await self.store.get(self._partitioned_path(TopicName.get(name)))
        return found is not None and bool(json.loads(found.value).get("deleted", False))

    async def delete_partitioned_metadata(self, name: str) -> None:
        """Forget that ``name`` is partitioned (its partitions are the caller's to delete)."""
        path = self._partitioned_path(TopicName.get(name))
        if not await self.store.exists(path):
            raise TopicNotFoundError(f"Partitioned topic {name} does not exist")
        await self.store.delete(path)
