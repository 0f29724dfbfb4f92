"""Managed-ledger configuration and the metadata it keeps in the MetadataStore.

Paths and encoding are Pulsar's: `/managed-ledgers/<name>` holds the ledger list as Pulsar's
ManagedLedgerInfo (MLDataFormats, protos/pulsargrpc/internal/v1/ml_data_formats.proto),
`/managed-ledgers/<name>/<cursor>` one ManagedCursorInfo per durable cursor
(broker/ledger/cursor_state.py; cursor names are URL-encoded, as Pulsar's Codec.encode does, so
any subscription name is a single path segment). Ledger lists written as JSON by earlier
versions still decode, and are rewritten in Pulsar's encoding at the next write (the open).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote, unquote

from pulsargrpc.internal.v1 import ml_data_formats_pb2 as ml

__all__ = [
    "LedgerInfo",
    "ManagedLedgerConfig",
    "cursor_name_from_node",
    "cursor_path",
    "decode_ledgers",
    "decode_properties",
    "encode_ledgers",
    "ledger_path",
]

ROOT = "/managed-ledgers"


@dataclass(slots=True)
class ManagedLedgerConfig:
    """Per managed ledger settings, named after Pulsar's broker.conf properties."""

    max_entries_per_ledger: int = 50000  # managedLedgerMaxEntriesPerLedger
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024  # managedLedgerMaxSizePerLedgerMbytes
    retention_time_minutes: int = 0  # defaultRetentionTimeInMinutes, -1 = infinite
    retention_size_mb: int = 0  # defaultRetentionSizeInMB, -1 = infinite


@dataclass(slots=True)
class LedgerInfo:
    """One ledger of a managed ledger: durable entry count, bytes, close time (ms, 0 = open)."""

    ledger_id: int
    entries: int = 0
    size: int = 0
    timestamp: int = 0


def ledger_path(name: str) -> str:
    return f"{ROOT}/{name}"


def cursor_path(name: str, cursor: str) -> str:
    return f"{ROOT}/{name}/{quote(cursor, safe='')}"


def cursor_name_from_node(node: str) -> str:
    return unquote(node)


def encode_ledgers(ledgers: list[LedgerInfo], properties: dict[str, str] | None = None) -> bytes:
    """The ManagedLedgerInfo of the ledger list (never empty: there is always a current ledger,
    and an empty node value means "no managed ledger here") and the managed ledger's
    properties (Pulsar's ManagedLedger.getProperties: the topic epoch lives there)."""
    info = ml.ManagedLedgerInfo()
    for i in ledgers:
        info.ledgerInfo.add(
            ledgerId=i.ledger_id, entries=i.entries, size=i.size, timestamp=i.timestamp
        )
    for key, value in sorted((properties or {}).items()):
        info.properties.add(key=key, value=value)
    return info.SerializeToString()


def decode_properties(value: bytes) -> dict[str, str]:
    """The properties of a ManagedLedgerInfo (none in the JSON that earlier versions wrote)."""
    if not value or value.startswith(b"{"):
        return {}
    return {p.key: p.value for p in ml.ManagedLedgerInfo.FromString(value).properties}


def decode_ledgers(value: bytes) -> list[LedgerInfo]:
    """The ledger list of a ManagedLedgerInfo, or of the JSON that earlier versions wrote."""
    if not value.startswith(b"{"):
        info = ml.ManagedLedgerInfo.FromString(value)
        return [LedgerInfo(i.ledgerId, i.entries, i.size, i.timestamp) for i in info.ledgerInfo]
    doc = json.loads(value)
    return [
        LedgerInfo(int(i["ledgerId"]), int(i["entries"]), int(i["size"]), int(i["timestamp"]))
        for i in doc["ledgers"]
    ]
