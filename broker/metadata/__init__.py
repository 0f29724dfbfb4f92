"""Broker metadata: the MetadataStore API and its embedded (SQLite) implementation."""

from pulsar_grpc.broker.metadata.embedded import EmbeddedMetadataStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    GetResult,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
)

__all__ = [
    "BadVersionError",
    "EmbeddedMetadataStore",
    "GetResult",
    "MetadataNotFoundError",
    "MetadataStore",
    "MetadataStoreError",
]
