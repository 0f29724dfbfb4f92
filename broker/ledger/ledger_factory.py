"""ManagedLedgerFactory: opens each managed ledger once, fencing the previous owner first, and
deletes and lists them (Pulsar's ManagedLedgerFactoryImpl)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from pulsar_grpc.broker.errors import PersistenceError
from pulsar_grpc.broker.ledger.cache import EntryCache
from pulsar_grpc.broker.ledger.id_pool import LedgerIdPool
from pulsar_grpc.broker.ledger.info import (
    LedgerInfo,
    ManagedLedgerConfig,
    cursor_name_from_node,
    decode_ledgers,
    decode_properties,
    encode_ledgers,
    ledger_path,
)
from pulsar_grpc.broker.ledger.managed_ledger import (
    ManagedLedger,
    MetadataLink,
    SharedResources,
    now_ms,
)
from pulsar_grpc.broker.ledger.store import LedgerStore
from pulsar_grpc.broker.metadata.store import (
    MetadataStore,
    MetadataStoreError,
    SessionEvent,
    validate_path,
)

__all__ = ["ManagedLedgerFactory"]

_MB = 1024 * 1024


class ManagedLedgerFactory:
    """Opens managed ledgers (one instance per name) over a store and a metadata store.

    The factory does not own the store or the metadata store: whoever created them closes them
    after the factory. `cache_size_bytes` is the broker-wide entry cache budget
    (managedLedgerCacheSizeMB).
    """

    def __init__(
        self,
        store: LedgerStore,
        metadata: MetadataStore,
        config: ManagedLedgerConfig | None = None,
        cache_size_bytes: int = 64 * _MB,
    ) -> None:
        self.config = config or ManagedLedgerConfig()
        self._shared = SharedResources(
            store, metadata, EntryCache(cache_size_bytes), LedgerIdPool(store), self._forget
        )
        self._ledgers: dict[str, ManagedLedger] = {}
        self._opening: dict[str, asyncio.Task[ManagedLedger]] = {}
        metadata.register_session_listener(self._on_session_event)

    def _on_session_event(self, event: SessionEvent) -> None:
        down = event in (SessionEvent.CONNECTION_LOST, SessionEvent.SESSION_LOST)
        self._shared.link = MetadataLink.DISCONNECTED if down else MetadataLink.CONNECTED

    @property
    def cache(self) -> EntryCache:
        return self._shared.cache

    async def open(self, name: str, config: ManagedLedgerConfig | None = None) -> ManagedLedger:
        """The managed ledger `name` ("tenant/ns/persistent/topic"), created if absent."""
        ml = self._ledgers.get(name)
        if ml is not None:
            return ml
        task = self._opening.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(
                self._open(name, config or replace(self.config))
            )
            self._opening[name] = task
            task.add_done_callback(lambda _: self._opening.pop(name, None))
        return await asyncio.shield(task)

    async def _open(self, name: str, config: ManagedLedgerConfig) -> ManagedLedger:
        path = ledger_path(name)
        validate_path(path)
        metadata, store = self._shared.metadata, self._shared.store
        # Fenced first: whatever the previous owner committed is visible from here on (so
        # the recount below sees it), and it cannot commit anything after.
        owner = await store.fence(name)
        got = await metadata.get(path)
        ledgers = decode_ledgers(got.value) if got is not None and got.value else []
        properties = decode_properties(got.value) if got is not None else {}
        version = got.version if got is not None else -1
        # The new ledger's id must follow every one before it, which other brokers may have
        # created (from their own blocks of ids).
        newest = max((info.ledger_id for info in ledgers), default=0)
        if ledgers:
            # The last ledger was open when the ledger stopped: its true size is in the store.
            last = ledgers[-1]
            stats = await store.ledger_stats(last.ledger_id)
            last.entries, last.size, last.timestamp = stats.entries, stats.size, now_ms()
            if last.entries == 0:
                ledgers.pop()
        await self._shared.ids.ensure(above=newest)
        ledgers.append(LedgerInfo(self._shared.ids.take()))
        try:
            version = await metadata.put(path, encode_ledgers(ledgers, properties), version)
        except MetadataStoreError as e:
            raise PersistenceError(f"cannot open managed ledger {name}: {e}") from e
        ml = ManagedLedger(self._shared, owner, config, ledgers, version, properties)
        await ml.recover_cursors()
        self._ledgers[name] = ml
        return ml

    async def exists(self, name: str) -> bool:
        got = await self._shared.metadata.get(ledger_path(name))
        return got is not None and bool(got.value)

    async def delete(self, name: str) -> None:
        """Delete the managed ledger, its cursors and its metadata (absent is fine)."""
        ml = self._ledgers.get(name)
        if ml is not None:
            await ml.close()
        metadata, store = self._shared.metadata, self._shared.store
        path = ledger_path(name)
        got = await metadata.get(path)
        if got is None:
            return
        ledgers = decode_ledgers(got.value) if got.value else []
        nodes = await metadata.get_children(path)
        cursor_names = {cursor_name_from_node(n) for n in nodes}
        cursor_names |= set(await store.get_cursor_states(name))
        if cursor_names:
            owner = await store.fence(name)  # whoever had it open elsewhere stops writing
            await store.append(owner, (), {c: None for c in cursor_names})
        for node in nodes:
            await metadata.delete_recursive(f"{path}/{node}")
        await metadata.delete(path)
        for info in ledgers:
            await store.delete_ledger(info.ledger_id)
        self._shared.cache.invalidate({i.ledger_id for i in ledgers})

    async def list_names(self, prefix: str = "") -> list[str]:
        """Names of the managed ledgers at or under the path prefix ("public/default")."""
        metadata = self._shared.metadata
        root = ledger_path(prefix.strip("/")) if prefix.strip("/") else "/managed-ledgers"
        names: list[str] = []
        todo = [root]
        while todo:
            path = todo.pop()
            got = await metadata.get(path)
            if got is None:
                continue
            if got.value:
                names.append(path[len("/managed-ledgers/") :])
                continue
            todo.extend(f"{path}/{child}" for child in await metadata.get_children(path))
        return sorted(names)

    def _forget(self, ml: ManagedLedger) -> None:
        if self._ledgers.get(ml.name) is ml:
            del self._ledgers[ml.name]

    async def close(self) -> None:
        """Close every open managed ledger (not the stores)."""
        for ml in list(self._ledgers.values()):
            await ml.close()
