"""Broker metadata: the MetadataStore API and its embedded (SQLite) implementation."""

from broker.metadata.embedded import EmbeddedMetadataStore
from broker.metadata.store import (
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
