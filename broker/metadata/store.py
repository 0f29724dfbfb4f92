"""The MetadataStore contract: Pulsar's metadata-store API, async.

Semantics follow ZooKeeper so that a kazoo-backed store can sit behind the same interface:
absolute paths without a trailing slash, versions that start at 0 and grow by one per write,
expected_version -1 meaning "must not exist", parents created implicitly (as Pulsar's
metadata store does), and deleting a node that still has children refused.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from pulsar_grpc.broker.errors import MetadataError

__all__ = [
    "BadVersionError",
    "GetResult",
    "MetadataNotFoundError",
    "MetadataStore",
    "MetadataStoreError",
    "validate_path",
]


class MetadataStoreError(MetadataError):
    """Any failure of the metadata store (I/O, invalid path, node not empty)."""


class BadVersionError(MetadataStoreError):
    """The node's version is not the expected one (or it exists when -1 was expected)."""


class MetadataNotFoundError(MetadataStoreError):
    """The node does not exist (or it was expected to exist with a given version)."""


@dataclass(frozen=True, slots=True)
class GetResult:
    value: bytes
    version: int


def validate_path(path: str) -> None:
    """Reject paths ZooKeeper would reject, so both stores accept exactly the same names."""
    if not path.startswith("/"):
        raise MetadataStoreError(f"metadata path must start with '/': {path!r}")
    if path == "/":
        return
    if path.endswith("/") or "//" in path or "\0" in path:
        raise MetadataStoreError(f"invalid metadata path: {path!r}")
    for part in path.split("/")[1:]:
        if part in (".", ".."):
            raise MetadataStoreError(f"invalid metadata path: {path!r}")


def parent_of(path: str) -> str:
    """The parent path; '/' for top-level nodes."""
    head = path.rsplit("/", 1)[0]
    return head or "/"


class MetadataStore(ABC):
    """A hierarchical, versioned key-value store for broker metadata."""

    @abstractmethod
    async def get(self, path: str) -> GetResult | None:
        """The node's value and version, or None when it does not exist."""

    @abstractmethod
    async def put(self, path: str, value: bytes, expected_version: int | None = None) -> int:
        """Create or update a node; returns its new version.

        expected_version: None = unconditional, -1 = must not exist, N = must be at version N;
        otherwise BadVersionError. Missing parents are created with an empty value.
        """

    @abstractmethod
    async def delete(self, path: str, expected_version: int | None = None) -> None:
        """Delete a leaf node; MetadataNotFoundError when absent, BadVersionError on mismatch."""

    @abstractmethod
    async def get_children(self, path: str) -> list[str]:
        """Sorted names (not paths) of the node's children; [] when none or absent."""

    @abstractmethod
    async def exists(self, path: str) -> bool:
        """Whether the node exists."""

    @abstractmethod
    async def close(self) -> None:
        """Release resources; the store is unusable afterwards."""

    async def delete_recursive(self, path: str) -> None:
        """Delete a node and everything below it (Pulsar's deleteRecursive); absent is fine."""
        for child in await self.get_children(path):
            await self.delete_recursive(f"{path.rstrip('/')}/{child}")
        if path != "/":
            try:
                await self.delete(path)
            except MetadataNotFoundError:
                pass
