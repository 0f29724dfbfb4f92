"""`pulsar-grpc inspect`: a topic's ledgers, cursors and entries read straight from storage,
read-only and without a broker (pulsar_grpc.inspector), on a running or stopped broker's data.

Where the data is: ``--data-dir DIR`` (a standalone's data directory), or a cluster's
``--metadata-store zk:host:port[/chroot]`` and ``--ledger-storage postgresql://...`` (the
broker's ``metadataStoreUrl`` and ``ledgerStorageUrl``), or ``--config broker.conf`` to read
all three from a broker's configuration. ``--json`` prints one JSON document, except for
``entries``, which prints JSON lines (one entry per line, so millions stream).

Errors are one line on stderr and exit code 1 (2 for bad usage, as argparse does).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pulsar_grpc.broker.ledger.position import Position
from pulsar_grpc.cli.receive import NULL_CONTENT
from pulsar_grpc.inspector import (
    DEFAULT_TIMEOUT_S,
    Bound,
    CursorRecord,
    EntryRecord,
    InspectError,
    Inspector,
    LedgerState,
    open_config,
    open_storage,
)

PAYLOAD_FORMATS = ("utf8", "hex", "none")
TOPIC_HELP = "the topic: my-topic, tenant/ns/my-topic or persistent://tenant/ns/my-topic"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "inspect",
        description="Read a topic's ledgers, cursors and entries from a standalone data "
        "directory or a cluster's ZooKeeper and PostgreSQL, without a broker and without "
        "writing anything. Topics are named as everywhere else (my-topic is "
        "persistent://public/default/my-topic); name a partitioned topic's partitions one by "
        "one (my-topic-partition-0), `inspect topics` lists them.",
    )
    common = argparse.ArgumentParser(add_help=False)
    where = common.add_argument_group("where the data is (one of)")
    where.add_argument("--data-dir", type=Path, help="a standalone broker's data directory")
    where.add_argument(
        "--metadata-store",
        metavar="URL",
        default="",
        help="metadataStoreUrl: zk:host:port[,host:port...][/chroot] (empty: --data-dir's)",
    )
    where.add_argument(
        "--ledger-storage",
        metavar="URL",
        default="",
        help="ledgerStorageUrl: postgresql://user@host:port/db (empty: --data-dir's)",
    )
    where.add_argument(
        "--config",
        type=Path,
        help="a broker's configuration file: dataDirectory, metadataStoreUrl, "
        "ledgerStorageUrl from it (read as the broker reads it)",
    )
    common.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="SECONDS",
        help=f"how long ZooKeeper and PostgreSQL get to answer (default {DEFAULT_TIMEOUT_S:g})",
    )
    common.add_argument(
        "--json",
        action="store_true",
        help="JSON: one document (entries: one JSON object per line)",
    )
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    topics = verbs.add_parser("topics", parents=[common], help="topics with a managed ledger")
    topics.add_argument("namespace", nargs="?", help="tenant/namespace (default: all)")
    topics.set_defaults(show=_show_topics)

    ledgers = verbs.add_parser("ledgers", parents=[common], help="a topic's ledgers")
    ledgers.add_argument("topic", help=TOPIC_HELP)
    ledgers.set_defaults(show=_show_ledgers)

    cursors = verbs.add_parser("cursors", parents=[common], help="a topic's cursors")
    cursors.add_argument("topic", help=TOPIC_HELP)
    cursors.set_defaults(show=_show_cursors)

    entries = verbs.add_parser("entries", parents=[common], help="a topic's stored entries")
    entries.add_argument("topic", help=TOPIC_HELP)
    entries.add_argument("--ledger", type=int, help="only this ledger")
    entries.add_argument(
        "--from",
        dest="start",
        type=_bound,
        metavar="E|L:E",
        help="first entry: an entry id (in each ledger listed) or a position ledger:entry",
    )
    entries.add_argument(
        "--to", dest="end", type=_bound, metavar="E|L:E", help="last entry (inclusive), as --from"
    )
    entries.add_argument("--limit", type=_non_negative, help="at most this many entries")
    entries.add_argument(
        "--payload",
        choices=PAYLOAD_FORMATS,
        default="utf8",
        help="how payloads are shown: utf8 (undecodable bytes escaped; the default), hex, none",
    )
    entries.add_argument(
        "--payload-dir",
        type=Path,
        help="also write each message's payload, raw, to DIR/<ledger>-<entry>-<index>.bin "
        "(an encrypted batch's ciphertext to DIR/<ledger>-<entry>.encrypted)",
    )
    entries.set_defaults(show=_show_entries)
    p.set_defaults(run=run)


def _bound(text: str) -> Bound:
    try:
        return Position.parse(text) if ":" in text else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an entry id or ledger:entry") from None


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number >= 0")
    return value


def _open(args: argparse.Namespace) -> Inspector:
    stores = bool(args.metadata_store or args.ledger_storage)
    if args.config is not None:
        if args.data_dir is not None or stores:
            raise InspectError("--config names the stores: give it alone")
        return open_config(args.config, timeout_s=args.timeout)
    if args.data_dir is None and not (args.metadata_store and args.ledger_storage):
        raise InspectError(
            "where is the data? give --data-dir DIR, --config FILE, or --metadata-store and "
            "--ledger-storage"
        )
    return open_storage(args.data_dir, args.metadata_store, args.ledger_storage, args.timeout)


def run(args: argparse.Namespace) -> int:
    show: Callable[[Inspector, argparse.Namespace], None] = args.show
    # kazoo logs each failed connection attempt; the one line below says what matters.
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        with _open(args) as inspector:
            show(inspector, args)
    except InspectError as e:
        print(f"pulsar-grpc inspect: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def _print_json(doc: Any) -> None:
    print(json.dumps(doc, indent=2))


# ---------------------------------------------------------------- topics, ledgers, cursors


def _show_topics(inspector: Inspector, args: argparse.Namespace) -> None:
    names = inspector.topics(args.namespace)
    if args.json:
        _print_json(names)
        return
    for name in names:
        print(name)


def _show_ledgers(inspector: Inspector, args: argparse.Namespace) -> None:
    ledgers = inspector.ledgers(args.topic)
    if args.json:
        _print_json({"ledgers": [r.to_json() for r in ledgers]})
        return
    for r in ledgers:
        print(
            f"ledgerId={r.ledger_id}, entries={r.entries}, size={r.size}, "
            f"timestamp={r.timestamp}{', open' if r.state is LedgerState.OPEN else ''}"
        )


def _time(ms: int | None) -> str:
    if not ms:
        return "-"
    stamp = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    return f"{ms} ({stamp.replace('+00:00', 'Z')})"


def _show_cursors(inspector: Inspector, args: argparse.Namespace) -> None:
    cursors = inspector.cursors(args.topic)
    if args.json:
        _print_json({"cursors": [c.to_json() for c in cursors]})
        return
    for c in cursors:
        _print_cursor(c)


def _print_cursor(c: CursorRecord) -> None:
    print(f"{c.name} (state from the {c.source.value.replace('-', ' ')})")
    print(f"  markDeletePosition: {c.mark_delete}")
    print(f"  individuallyDeletedMessages: {c.ranges_text()}")
    for b in c.batch_deletions:
        more = f" and every index from {b.unacked_from}" if b.unacked_from is not None else ""
        print(f"  batchDeletedIndexes: {b.position} unacked {list(b.unacked_indexes)}{more}")
    print(f"  lastActive: {_time(c.last_active)} (from the metadata node)")
    print(f"  properties: {json.dumps(c.properties)}")


# ---------------------------------------------------------------- entries


def _show_entries(inspector: Inspector, args: argparse.Namespace) -> None:
    if args.payload_dir is not None:
        try:
            args.payload_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InspectError(f"--payload-dir {args.payload_dir}: {e.strerror}") from None
    for entry in inspector.entries(args.topic, args.ledger, args.start, args.end, args.limit):
        doc = _entry_json(entry, args.payload, args.payload_dir)
        if args.json:
            print(json.dumps(doc), flush=False)
        else:
            _print_entry(doc)


def _bytes(data: bytes, form: str) -> str | None:
    if form == "none":
        return None
    return data.hex() if form == "hex" else data.decode("utf-8", "backslashreplace")


def _write(directory: Path, name: str, data: bytes) -> str:
    path = directory / name
    try:
        path.write_bytes(data)
    except OSError as e:
        raise InspectError(f"cannot write {path}: {e.strerror}") from None
    return str(path)


def _entry_json(entry: EntryRecord, form: str, payload_dir: Path | None) -> dict[str, Any]:
    stem = f"{entry.ledger_id}-{entry.entry_id}"
    doc: dict[str, Any] = {
        "ledgerId": entry.ledger_id,
        "entryId": entry.entry_id,
        "size": entry.size,
        "numMessages": entry.num_messages,
        "publishTime": entry.publish_time,
        "sequenceId": entry.sequence_id,
        "producerName": entry.producer_name,
        "schemaVersion": entry.schema_version.hex(),
        "compression": entry.compression,
        "messages": [],
    }
    for m in entry.messages:
        message: dict[str, Any] = {
            "index": m.index,
            "key": m.key,
            "orderingKey": m.ordering_key.decode("utf-8", "backslashreplace"),
            "properties": m.properties,
            "eventTime": m.event_time,
            "payloadSize": len(m.payload),
            "payload": _bytes(m.payload, form),
            "nullValue": m.null_value,
        }
        if payload_dir is not None:
            message["payloadFile"] = _write(payload_dir, f"{stem}-{m.index}.bin", m.payload)
        doc["messages"].append(message)
    if entry.encrypted is not None:
        e = entry.encrypted
        encrypted: dict[str, Any] = {
            "algorithm": e.algorithm,
            "param": e.param.hex(),
            "keys": [
                {"name": k.name, "metadata": k.metadata, "wrappedDataKey": k.wrapped_data_key.hex()}
                for k in e.keys
            ],
            "compression": e.compression,
            "uncompressedSize": e.uncompressed_size,
            "ciphertextSize": len(e.ciphertext),
            "ciphertext": None if form == "none" else e.ciphertext.hex(),
        }
        if payload_dir is not None:
            encrypted["ciphertextFile"] = _write(payload_dir, f"{stem}.encrypted", e.ciphertext)
        doc["encrypted"] = encrypted
    return doc


def _print_entry(doc: dict[str, Any]) -> None:
    print(
        f"ledgerId={doc['ledgerId']}, entryId={doc['entryId']}, size={doc['size']}, "
        f"numMessages={doc['numMessages']}, publishTime={doc['publishTime']}, "
        f"sequenceId={doc['sequenceId']}, producerName={doc['producerName']}, "
        f"schemaVersion={doc['schemaVersion'] or '-'}, compression={doc['compression']}"
    )
    for m in doc["messages"]:
        line = (
            f"  [{m['index']}] key={m['key']!r}, orderingKey={m['orderingKey']!r}, "
            f"properties={json.dumps(m['properties'])}, eventTime={m['eventTime']}"
        )
        if m["nullValue"]:
            line += f", payload={NULL_CONTENT}"
        elif m["payload"] is not None:
            line += f", payload={m['payload']!r}"
        if "payloadFile" in m:
            line += f", payloadFile={m['payloadFile']}"
        print(line)
    e = doc.get("encrypted")
    if e is not None:
        keys = ", ".join(f"{k['name']}{json.dumps(k['metadata'])}" for k in e["keys"])
        line = (
            f"  encrypted: algorithm={e['algorithm']}, keys=[{keys}], param={e['param']}, "
            f"compression={e['compression']}, uncompressedSize={e['uncompressedSize']}, "
            f"ciphertextSize={e['ciphertextSize']}"
        )
        if e["ciphertext"] is not None:
            line += f", ciphertext={e['ciphertext']}"
        if "ciphertextFile" in e:
            line += f", ciphertextFile={e['ciphertextFile']}"
        print(line)
