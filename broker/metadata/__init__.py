"""Broker metadata: the MetadataStore API and its implementations (embedded SQLite for
`standalone`, in-memory for tests, ZooKeeper for clusters), chosen by metadataStoreUrl."""

from pulsar_grpc.broker.metadata.embedded import EmbeddedMetadataStore
from pulsar_grpc.broker.metadata.factory import open_metadata_store, parse_metadata_store_url
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    ConnectionState,
    CreateOption,
    GetResult,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    Notification,
    NotificationType,
    SessionEvent,
    release_at_close,
)
from pulsar_grpc.broker.metadata.zookeeper import ZooKeeperMetadataStore

__all__ = [
    "BadVersionError",
    "ConnectionState",
    "CreateOption",
    "EmbeddedMetadataStore",
    "GetResult",
    "MemoryMetadataStore",
    "MetadataNotFoundError",
    "MetadataStore",
    "MetadataStoreError",
    "Notification",
    "NotificationType",
    "SessionEvent",
    "ZooKeeperMetadataStore",
    "open_metadata_store",
    "parse_metadata_store_url",
    "release_at_close",
]
