"""EmbeddedMetadataStore: ZooKeeper-compatible semantics, persisted across reopen."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pulsar_grpc.broker.errors import MetadataError
from pulsar_grpc.broker.metadata import (
    BadVersionError,
    EmbeddedMetadataStore,
    GetResult,
    MetadataNotFoundError,
    MetadataStoreError,
)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedMetadataStore]:
    s = EmbeddedMetadataStore(tmp_path)
    yield s
    await s.close()


async def test_put_get_versions(store: EmbeddedMetadataStore) -> None:
    assert await store.get("/a/b") is None
    assert await store.put("/a/b", b"one") == 0
    assert await store.get("/a/b") == GetResult(b"one", 0)
    assert await store.put("/a/b", b"two") == 1
    assert await store.get("/a/b") == GetResult(b"two", 1)


async def test_parents_created_implicitly(store: EmbeddedMetadataStore) -> None:
    await store.put("/x/y/z", b"v")
    assert await store.exists("/x")
    assert await store.exists("/x/y")
    assert await store.get("/x/y") == GetResult(b"", 0)
    assert await store.get_children("/") == ["x"]
    assert await store.get_children("/x") == ["y"]


async def test_expected_version(store: EmbeddedMetadataStore) -> None:
    assert await store.put("/n", b"a", expected_version=-1) == 0
    with pytest.raises(BadVersionError):
        await store.put("/n", b"b", expected_version=-1)
    with pytest.raises(BadVersionError):
        await store.put("/n", b"b", expected_version=5)
    assert await store.put("/n", b"b", expected_version=0) == 1
    with pytest.raises(BadVersionError):
        await store.put("/missing", b"b", expected_version=0)
    assert await store.get("/n") == GetResult(b"b", 1)


async def test_delete(store: EmbeddedMetadataStore) -> None:
    with pytest.raises(MetadataNotFoundError):
        await store.delete("/nope")
    await store.put("/p/c", b"v")
    with pytest.raises(MetadataStoreError):
        await store.delete("/p")  # has children, as in ZooKeeper
    with pytest.raises(BadVersionError):
        await store.delete("/p/c", expected_version=3)
    await store.delete("/p/c", expected_version=0)
    assert not await store.exists("/p/c")
    assert await store.exists("/p")
    await store.delete("/p")
    assert await store.get_children("/") == []


async def test_delete_recursive(store: EmbeddedMetadataStore) -> None:
    await store.put("/r/a/1", b"")
    await store.put("/r/b", b"")
    await store.put("/rr", b"")
    await store.delete_recursive("/r")
    assert await store.get_children("/") == ["rr"]


async def test_children_sorted_and_not_grandchildren(store: EmbeddedMetadataStore) -> None:
    for name in ["c", "a", "b"]:
        await store.put(f"/p/{name}", b"")
    await store.put("/p/a/deep", b"")
    await store.put("/px", b"")
    assert await store.get_children("/p") == ["a", "b", "c"]
    assert await store.get_children("/nothing") == []


@pytest.mark.parametrize("path", ["a", "/a/", "//a", "/a//b", "/a/./b", ""])
async def test_invalid_paths(store: EmbeddedMetadataStore, path: str) -> None:
    with pytest.raises(MetadataStoreError):
        await store.put(path, b"")


def test_errors_are_metadata_errors() -> None:
    assert issubclass(BadVersionError, MetadataStoreError)
    assert issubclass(MetadataNotFoundError, MetadataStoreError)
    assert issubclass(MetadataStoreError, MetadataError)


async def test_persists_across_reopen(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(tmp_path)
    await s.put("/managed-ledgers/t", b"info")
    await s.put("/managed-ledgers/t", b"info2")
    await s.close()
    s = EmbeddedMetadataStore(tmp_path)
    assert await s.get("/managed-ledgers/t") == GetResult(b"info2", 1)
    await s.close()
    assert (tmp_path / "metadata.db").exists()


async def test_concurrent_cas_only_one_wins(store: EmbeddedMetadataStore) -> None:
    await store.put("/c", b"0")
    results = await asyncio.gather(
        *(store.put("/c", str(i).encode(), expected_version=0) for i in range(5)),
        return_exceptions=True,
    )
    assert sum(1 for r in results if r == 1) == 1
    assert sum(1 for r in results if isinstance(r, BadVersionError)) == 4


async def test_closed_store_refuses(tmp_path: Path) -> None:
    s = EmbeddedMetadataStore(tmp_path)
    await s.close()
    with pytest.raises(MetadataStoreError):
        await s.get("/a")
