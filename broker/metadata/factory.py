"""Choosing the metadata store from Pulsar's `metadataStoreUrl` property.

- empty: the embedded store in the data directory (`standalone`'s default);
- `memory:<name>`: the in-memory store; stores with the same name in a process share a tree;
- `zk:host:port[,host:port...][/chroot]`: ZooKeeper, every path under the chroot if one is given.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from pulsar_grpc.broker.metadata.embedded import EmbeddedMetadataStore
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from pulsar_grpc.broker.metadata.store import MetadataStore, MetadataStoreError, validate_path
from pulsar_grpc.broker.metadata.zookeeper import DEFAULT_SESSION_TIMEOUT_S, ZooKeeperMetadataStore

__all__ = ["MetadataStoreUrl", "StoreKind", "open_metadata_store", "parse_metadata_store_url"]

_HOST_PORT = re.compile(r"(?P<host>[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})")
_MEMORY_NAME = re.compile(r"[A-Za-z0-9._-]+")


class StoreKind(enum.Enum):
    EMBEDDED = "embedded"
    MEMORY = "memory"
    ZOOKEEPER = "zk"


@dataclass(frozen=True, slots=True)
class MetadataStoreUrl:
    kind: StoreKind
    # memory: the tree's name; zk: "host:port,host:port".
    address: str = ""
    chroot: str = ""  # zk only: "" or an absolute path such as "/pulsar"


def parse_metadata_store_url(url: str) -> MetadataStoreUrl:
    """The parsed URL; ValueError with the reason (the text completes "'<url>' ...")."""
    url = url.strip()
    if not url:
        return MetadataStoreUrl(StoreKind.EMBEDDED)
    scheme, sep, rest = url.partition(":")
    if sep and scheme == "memory":
        if not _MEMORY_NAME.fullmatch(rest):
            raise ValueError("is not memory:<name> (a name of letters, digits, '.', '_', '-')")
        return MetadataStoreUrl(StoreKind.MEMORY, rest)
    if sep and scheme == "zk":
        hosts, slash, chroot = rest.partition("/")
        for entry in hosts.split(","):
            match = _HOST_PORT.fullmatch(entry)
            if match is None or not 0 < int(match["port"]) <= 65535:
                raise ValueError(
                    f"has {entry!r} where host:port is expected "
                    "(zk:host:port[,host:port...][/chroot])"
                )
        chroot = slash + chroot
        if chroot and not _valid_chroot(chroot):
            raise ValueError(f"has an invalid chroot {chroot!r}")
        return MetadataStoreUrl(StoreKind.ZOOKEEPER, hosts, chroot)
    raise ValueError(
        "is not a metadata store URL: expected zk:host:port[,host:port...][/chroot], "
        "memory:<name>, or nothing for the embedded store"
    )


def _valid_chroot(chroot: str) -> bool:
    try:
        validate_path(chroot)
    except MetadataStoreError:
        return False
    return chroot != "/"


async def open_metadata_store(
    url: str, data_dir: Path, session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S
) -> MetadataStore:
    """Open the store `url` names (the embedded one in `data_dir` when empty); a ZooKeeper
    session lasts `session_timeout_s` past the broker's last heartbeat."""
    parsed = parse_metadata_store_url(url)
    if parsed.kind is StoreKind.MEMORY:
        return MemoryMetadataStore(parsed.address)
    if parsed.kind is StoreKind.ZOOKEEPER:
        return await ZooKeeperMetadataStore.connect(
            parsed.address, parsed.chroot, session_timeout_s
        )
    return EmbeddedMetadataStore(data_dir)
