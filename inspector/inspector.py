"""The Inspector: a topic's ledgers, cursors and entries, read from storage, never a broker.

Open one on a standalone data directory, or on a cluster's ZooKeeper and PostgreSQL, or from a
broker's configuration file (the same properties the broker reads)::

    from pulsar_grpc.inspector import open_storage

    with open_storage(data_dir="./data") as inspector:
        for ledger in inspector.ledgers("my-topic"):
            print(ledger.ledger_id, ledger.entries, ledger.size, ledger.timestamp)
        for entry in inspector.entries("my-topic", limit=10):
            print(entry.position, [m.payload for m in entry.messages])

Everything is read-only (see sources.py) and decoded with the broker's own decoders
(broker/ledger/info.py, cursor_state.py, entry_format.py). Entries are read lazily, a page at a
time, so a topic of millions of entries costs one page of memory.

Topics are named as everywhere else: ``my-topic`` is ``persistent://public/default/my-topic``.
A partitioned topic is not one managed ledger but one per partition: naming it whole is an
error that says how many partitions it has and how to name one (``my-topic-partition-0``);
``topics()`` lists the partitions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote_plus

from google.protobuf.message import DecodeError

from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.ledger.cursor_state import (
    CursorState,
    decode_cursor_node,
    decode_position_info,
)
from pulsar_grpc.broker.ledger.info import (
    ROOT,
    LedgerInfo,
    cursor_name_from_node,
    cursor_path,
    decode_ledgers,
    ledger_path,
)
from pulsar_grpc.broker.ledger.position import Position
from pulsar_grpc.broker.ledger.storage_url import LedgerStorageKind, parse_ledger_storage_url
from pulsar_grpc.broker.metadata.factory import StoreKind, parse_metadata_store_url
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.resources import PARTITIONED_ROOT
from pulsar_grpc.inspector.entries import decode_entry
from pulsar_grpc.inspector.model import (
    BatchDeletion,
    CorruptDataError,
    CursorRecord,
    EntryRecord,
    InspectError,
    LedgerRecord,
    LedgerState,
    StateSource,
    StorageUnavailableError,
    TopicNotFoundError,
)
from pulsar_grpc.inspector.sources import (
    LedgerSource,
    MetadataSource,
    PostgresLedgerSource,
    SqliteLedgerSource,
    SqliteMetadataSource,
    ZooKeeperMetadataSource,
    iterate_pages,
)

__all__ = ["DEFAULT_TIMEOUT_S", "Bound", "Inspector", "open_config", "open_storage"]

DEFAULT_TIMEOUT_S = 5.0
# Entries read per query: a page of ~12 KB entries is under 1 MB, and a page is all the
# inspector holds at a time.
PAGE_SIZE = 64

Bound = Position | int
"""Where an entry range starts or ends: a position ``ledger:entry`` (across ledgers), or an
entry id (in every ledger listed, which is the usual use with ``ledger=``)."""


class Inspector:
    """A topic's storage, read-only. Build one with :func:`open_storage` or
    :func:`open_config`; close it (or use it as a context manager) to release the sources."""

    def __init__(self, metadata: MetadataSource, ledgers: LedgerSource) -> None:
        self._metadata = metadata
        self._store = ledgers

    def __enter__(self) -> Inspector:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._metadata.close()
        finally:
            self._store.close()

    # ------------------------------------------------------------ topics

    def topics(self, namespace: str | None = None) -> list[str]:
        """Full names of the topics (partitions included) that have a managed ledger, in
        ``namespace`` ("tenant/ns") or everywhere, sorted."""
        root = ROOT
        if namespace is not None:
            root = f"{ROOT}/{self._namespace(namespace)}"
        found: list[str] = []
        todo = [root]
        while todo:
            path = todo.pop()
            value = self._metadata.get(path)
            if value:  # a managed ledger: its children are its cursors
                found.append(path[len(ROOT) + 1 :])
                continue
            todo.extend(f"{path}/{child}" for child in self._metadata.children(path))
        return sorted(_topic_of(name) for name in found)

    @staticmethod
    def _namespace(namespace: str) -> str:
        try:
            return str(NamespaceName.get(namespace))
        except BrokerError as e:
            raise InspectError(f"invalid namespace {namespace!r}: {e.message}") from None

    # ------------------------------------------------------------ ledgers

    def managed_ledger_name(self, topic: str) -> str:
        """The managed ledger of ``topic`` (``tenant/ns/persistent/<encoded name>``), checked to
        exist; TopicNotFoundError otherwise."""
        name = _parse_topic(topic)
        ml = name.persistence_naming_encoding
        if self._metadata.get(ledger_path(ml)):
            return ml
        partitioned = self._metadata.get(f"{PARTITIONED_ROOT}/{ml}")
        if partitioned:
            try:
                partitions = int(json.loads(partitioned)["partitions"])
            except (ValueError, KeyError, TypeError):
                raise CorruptDataError(
                    f"{name} is a partitioned topic whose metadata does not decode"
                ) from None
            raise TopicNotFoundError(
                f"{name} is a partitioned topic with {partitions} partitions: name one, "
                f"e.g. {name.get_partition(0)}"
            )
        raise TopicNotFoundError(f"topic {name} not found (no managed ledger {ml})")

    def ledgers(self, topic: str) -> list[LedgerRecord]:
        """The managed ledger's ledgers, oldest first, as its metadata lists them; the open
        (last) ledger's count and size are the ledger store's, as the broker's recovery
        recounts them."""
        return self._ledgers(self.managed_ledger_name(topic))

    def _ledgers(self, ml: str) -> list[LedgerRecord]:
        value = self._metadata.get(ledger_path(ml)) or b""
        try:
            infos = decode_ledgers(value)
        except (DecodeError, ValueError, KeyError, TypeError) as e:
            raise CorruptDataError(
                f"the ledger list of {ml} ({ledger_path(ml)}) does not decode: {e}"
            ) from None
        return [self._record(info, i == len(infos) - 1) for i, info in enumerate(infos)]

    def _record(self, info: LedgerInfo, last: bool) -> LedgerRecord:
        if last and info.timestamp == 0:
            stats = self._store.ledger_stats(info.ledger_id)
            return LedgerRecord(info.ledger_id, stats.entries, stats.size, 0, LedgerState.OPEN)
        return LedgerRecord(
            info.ledger_id, info.entries, info.size, info.timestamp, LedgerState.CLOSED
        )

    # ------------------------------------------------------------ cursors

    def cursors(self, topic: str) -> list[CursorRecord]:
        """Every durable cursor (subscription) of the topic, from its newest stored state: the
        ledger store's row when there is one (rewritten on every ack), else the metadata node
        (``source`` says which). Sorted by name."""
        ml = self.managed_ledger_name(topic)
        rows = self._store.cursor_states(ml)
        out = []
        for node in self._metadata.children(ledger_path(ml)):
            name = cursor_name_from_node(node)
            node_value = self._metadata.get(cursor_path(ml, name))
            last_active: int | None = None
            where = cursor_path(ml, name)
            try:
                if node_value:
                    node_state, active = decode_cursor_node(node_value)
                    last_active = active or None
                row = rows.get(name)
                if row is not None:
                    where = f"the ledger store's row of {ml} / {name}"
                    state, source = decode_position_info(row), StateSource.LEDGER_STORE
                elif node_value:
                    state, source = node_state, StateSource.METADATA_NODE
                else:
                    continue  # created, never written: the broker skips it too
            except (DecodeError, ValueError, KeyError, TypeError) as e:
                raise CorruptDataError(f"cursor {name}: {where} does not decode: {e}") from None
            out.append(_cursor_record(name, state, last_active, source))
        return sorted(out, key=lambda c: c.name)

    # ------------------------------------------------------------ entries

    def entries(
        self,
        topic: str,
        ledger: int | None = None,
        start: Bound | None = None,
        end: Bound | None = None,
        limit: int | None = None,
    ) -> Iterator[EntryRecord]:
        """The topic's stored entries in order, read lazily: of one ``ledger`` or all, from
        ``start`` to ``end`` (inclusive; see :data:`Bound`), at most ``limit``. The ledgers and
        their counts are those of the call: entries a running broker adds later are not
        listed (call again for them).

        The topic and the ledger are checked now (TopicNotFoundError, InspectError); reading
        and decoding errors come up as the iteration reaches them (CorruptDataError for an
        entry that does not decode)."""
        ml = self.managed_ledger_name(topic)
        records = self._ledgers(ml)
        if ledger is not None:
            records = [r for r in records if r.ledger_id == ledger]
            if not records:
                raise InspectError(
                    f"ledger {ledger} is not a ledger of {_topic_of(ml)} "
                    f"(its ledgers: {', '.join(str(r.ledger_id) for r in self._ledgers(ml))})"
                )
        if limit is not None and limit < 0:
            raise InspectError(f"limit must be >= 0, got {limit}")
        return self._iterate(records, start, end, limit)

    def _iterate(
        self,
        records: list[LedgerRecord],
        start: Bound | None,
        end: Bound | None,
        limit: int | None,
    ) -> Iterator[EntryRecord]:
        left = limit
        for record in records:
            span = _span(record, start, end)
            if span is None:
                continue
            for entry_id, data in iterate_pages(self._store, record.ledger_id, *span, PAGE_SIZE):
                if left is not None:
                    if left == 0:
                        return
                    left -= 1
                yield decode_entry(record.ledger_id, entry_id, data)


def _span(record: LedgerRecord, start: Bound | None, end: Bound | None) -> tuple[int, int] | None:
    """The entry ids of ``record`` within [start, end], or None when none are."""
    lo, hi = 0, record.entries - 1
    lid = record.ledger_id
    if isinstance(start, Position):
        if start.ledger_id > lid:
            return None
        if start.ledger_id == lid:
            lo = max(lo, start.entry_id)
    elif start is not None:
        lo = max(lo, start)
    if isinstance(end, Position):
        if end.ledger_id < lid:
            return None
        if end.ledger_id == lid:
            hi = min(hi, end.entry_id)
    elif end is not None:
        hi = min(hi, end)
    return (lo, hi) if lo <= hi else None


def _parse_topic(topic: str) -> TopicName:
    try:
        name = TopicName.get(topic)
    except BrokerError as e:
        raise InspectError(e.message) from None
    if not name.is_persistent:
        raise InspectError(f"{name}: only persistent topics have stored ledgers")
    return name


def _topic_of(ml: str) -> str:
    """The topic a managed-ledger name stores: tenant/ns/persistent/<encoded> -> full name."""
    tenant, namespace, domain, local = ml.split("/", 3)
    return f"{domain}://{tenant}/{namespace}/{unquote_plus(local)}"


def _cursor_record(
    name: str, state: CursorState, last_active: int | None, source: StateSource
) -> CursorRecord:
    return CursorRecord(
        name=name,
        mark_delete=state.mark_delete,
        individually_deleted=tuple(state.deleted),
        batch_deletions=tuple(
            _batch_deletion(position, mask)
            for position, mask in sorted(
                state.batch_deleted.items(), key=lambda kv: (kv[0].ledger_id, kv[0].entry_id)
            )
        ),
        properties=dict(state.properties),
        last_active=last_active,
        source=source,
    )


def _batch_deletion(position: Position, mask: int) -> BatchDeletion:
    """A batch's unacked-index bitset; negative (batch size unknown, cursor_state.py) means
    every index above the highest acked one is unacked too."""
    if mask >= 0:
        return BatchDeletion(position, tuple(i for i in range(mask.bit_length()) if mask >> i & 1))
    highest = (~mask).bit_length()
    return BatchDeletion(
        position, tuple(i for i in range(highest) if mask >> i & 1), unacked_from=highest
    )


# ---------------------------------------------------------------- opening


def open_storage(
    data_dir: Path | str | None = None,
    metadata_store_url: str = "",
    ledger_storage_url: str = "",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Inspector:
    """An Inspector on the stores these broker properties name (``metadataStoreUrl``,
    ``ledgerStorageUrl``; an empty one is the embedded store in ``data_dir``, as for the
    broker). ZooKeeper and PostgreSQL are given ``timeout_s`` to answer.

    Raises :class:`StorageUnavailableError` when a store is missing or unreachable."""
    try:
        meta_url = parse_metadata_store_url(metadata_store_url)
        store_url = parse_ledger_storage_url(ledger_storage_url)
    except ValueError as e:
        raise InspectError(f"{e}") from None
    needs_dir = meta_url.kind is StoreKind.EMBEDDED or store_url.kind is LedgerStorageKind.EMBEDDED
    directory = Path(data_dir) if data_dir is not None else None
    if needs_dir:
        if directory is None:
            raise InspectError("name a data directory, or both a metadata store and a ledger store")
        if not directory.is_dir():
            raise StorageUnavailableError(f"data directory {directory} does not exist")
    if meta_url.kind is StoreKind.MEMORY:
        raise InspectError(
            f"metadataStoreUrl {metadata_store_url!r} is a broker's in-process memory: "
            "nothing outside it can read it"
        )
    metadata: MetadataSource
    if meta_url.kind is StoreKind.ZOOKEEPER:
        metadata = ZooKeeperMetadataSource(meta_url.address, meta_url.chroot, timeout_s)
    else:
        assert directory is not None
        metadata = SqliteMetadataSource(directory / "metadata.db")
    try:
        ledgers: LedgerSource
        if store_url.kind is LedgerStorageKind.POSTGRESQL:
            ledgers = PostgresLedgerSource(store_url.dsn, store_url.where, timeout_s)
        else:
            assert directory is not None
            ledgers = SqliteLedgerSource(directory / "ledgers.db")
    except BaseException:
        metadata.close()
        raise
    return Inspector(metadata, ledgers)


def open_config(
    path: Path | str, overrides: dict[str, str] | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> Inspector:
    """An Inspector on the stores a broker configuration names (``dataDirectory``,
    ``metadataStoreUrl``, ``ledgerStorageUrl``), read with the broker's own loader (so
    ``PULSAR_PREFIX_*`` variables apply as they do for the broker)."""
    import os

    from pulsar_grpc.broker.config import ConfigError, read_config

    file = Path(path)
    if not file.is_file():
        raise StorageUnavailableError(f"no configuration file {file}")
    try:
        config = read_config(file, os.environ, overrides or {}).config
    except ConfigError as e:
        raise InspectError(f"{file}: {'; '.join(e.errors)}") from None
    return open_storage(
        config.dataDirectory, config.metadataStoreUrl, config.ledgerStorageUrl, timeout_s
    )
