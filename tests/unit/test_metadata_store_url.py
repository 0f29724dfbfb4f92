"""metadataStoreUrl: which store a broker opens, and a bad URL refused at start-up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_grpc.broker.config import ConfigError, load_config
from pulsar_grpc.broker.metadata import (
    EmbeddedMetadataStore,
    MemoryMetadataStore,
    ZooKeeperMetadataStore,
    open_metadata_store,
    parse_metadata_store_url,
)
from pulsar_grpc.broker.metadata.factory import MetadataStoreUrl, StoreKind
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found


@pytest.mark.parametrize(
    ("url", "parsed"),
    [
        ("", MetadataStoreUrl(StoreKind.EMBEDDED)),
        ("memory:local", MetadataStoreUrl(StoreKind.MEMORY, "local")),
        ("zk:localhost:2181", MetadataStoreUrl(StoreKind.ZOOKEEPER, "localhost:2181")),
        (
            "zk:zk1:2181,zk2.example.com:2182/pulsar/a",
            MetadataStoreUrl(StoreKind.ZOOKEEPER, "zk1:2181,zk2.example.com:2182", "/pulsar/a"),
        ),
        ("zk:[::1]:2181/p", MetadataStoreUrl(StoreKind.ZOOKEEPER, "[::1]:2181", "/p")),
    ],
)
def test_parse(url: str, parsed: MetadataStoreUrl) -> None:
    assert parse_metadata_store_url(url) == parsed


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("localhost:2181", "is not a metadata store URL"),
        ("zookeeper:localhost:2181", "is not a metadata store URL"),
        ("zk:", "host:port"),
        ("zk:localhost", "host:port"),
        ("zk:localhost:0", "host:port"),
        ("zk:localhost:99999", "host:port"),
        ("zk:a:1,,b:2", "host:port"),
        ("zk:localhost:2181/", "invalid chroot"),
        ("zk:localhost:2181/a//b", "invalid chroot"),
        ("memory:", "memory:<name>"),
        ("memory:a/b", "memory:<name>"),
    ],
)
def test_bad_urls(url: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        parse_metadata_store_url(url)


def test_bad_url_is_a_config_error_naming_the_property() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {}, {"metadataStoreUrl": "zk:nowhere"})
    assert "metadataStoreUrl" in str(caught.value)
    assert "'zk:nowhere'" in str(caught.value)


def test_standalone_with_a_bad_url_exits_2(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "pulsar_grpc.cli.main", "standalone"]
    result = subprocess.run(
        [*command, "--data", str(tmp_path), "--set", "metadataStoreUrl=zk:host-without-port"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2, result
    assert "metadataStoreUrl" in result.stderr


async def test_each_url_opens_its_store(
    tmp_path: Path, zookeeper: ZooKeeperServer, zk_chroot: str
) -> None:
    for url, kind in [
        ("", EmbeddedMetadataStore),
        ("memory:factory", MemoryMetadataStore),
        (f"zk:{zookeeper.hosts}{zk_chroot}", ZooKeeperMetadataStore),
    ]:
        store = await open_metadata_store(url, tmp_path)
        try:
            assert isinstance(store, kind)
            await store.put("/opened", url.encode())
        finally:
            await store.close()
    assert (tmp_path / "metadata.db").exists()


async def test_zookeeper_chroot_holds_the_nodes(zookeeper: ZooKeeperServer, zk_chroot: str) -> None:
    """Everything the store writes lands under the chroot (which it creates)."""
    outside = await open_metadata_store(f"zk:{zookeeper.hosts}", Path("."))
    inside = await open_metadata_store(f"zk:{zookeeper.hosts}{zk_chroot}/deeper", Path("."))
    try:
        await inside.put("/admin/policies/t", b"{}")
        assert await inside.get_children("/") == ["admin"]
        found = await outside.get(f"{zk_chroot}/deeper/admin/policies/t")
        assert found is not None and found.value == b"{}"
    finally:
        await inside.close()
        await outside.close()
