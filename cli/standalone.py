"""`pulsar-grpc standalone`: one broker with everything embedded, until SIGINT or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

from pulsar_grpc.broker.config import (
    ConfigError,
    ServiceConfiguration,
    parse_set_flags,
    read_config,
)
from pulsar_grpc.broker.data_lock import LOCK_FILE, DataDirectoryInUseError, DataDirectoryLock
from pulsar_grpc.broker.errors import MetadataError, PersistenceError
from pulsar_grpc.cli.serving import add_server_options, serve_until_signalled

# Exit codes: 2 invalid configuration, 1 cannot start (port taken), 3 data directory in use.
EXIT_DATA_DIRECTORY_IN_USE = 3


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "standalone",
        description="Run one broker: metadata and ledgers in --data (default ./data), gRPC on "
        "127.0.0.1:50051, HTTP on 127.0.0.1:8080 unless configured otherwise.",
    )
    add_broker_options(p)
    p.add_argument(
        "--wipe-data", action="store_true",
        help="delete everything in the data directory first, as Pulsar's standalone does "
        "(refused while a broker runs on it, or when the metadata or ledgers live elsewhere)",
    )  # fmt: skip
    p.set_defaults(run=run)


def add_broker_options(p: argparse.ArgumentParser) -> None:
    """The options `standalone` and `broker` share."""
    add_server_options(
        p,
        "broker.conf or standalone.conf (Pulsar property names; Pulsar's properties of "
        "features this broker lacks are named in one warning and ignored)",
    )
    p.add_argument("--data", help="shortcut for --set dataDirectory=DIR")


def run(args: argparse.Namespace) -> int:
    return run_broker(args, "standalone", wipe_data_directory if args.wipe_data else _no_check)


def _no_check(config: ServiceConfiguration) -> None:
    """No requirement beyond the configuration's own validation."""


def wipe_data_directory(config: ServiceConfiguration) -> None:
    """``--wipe-data``: empty the data directory, holding its lock meanwhile so a broker that
    runs on it is never wiped under (DataDirectoryInUseError). Only the embedded stores live
    there: with an external metadata store or ledger storage, wiping half the state would
    leave the other half pointing at nothing, so that is refused."""
    external = [name for name in ("metadataStoreUrl", "ledgerStorageUrl") if getattr(config, name)]
    if external:
        raise ConfigError([
            f"--wipe-data: {' and '.join(external)} name stores outside the data directory; "
            "wipe them with their own tools"
        ])  # fmt: skip
    data = Path(config.dataDirectory)
    if not data.is_dir():
        return
    lock = DataDirectoryLock(data)
    try:
        lock.acquire()
        try:
            for entry in data.iterdir():
                if entry.name == LOCK_FILE:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        finally:
            lock.release()
    except OSError as exc:  # files it may not delete: nothing starts on half a wipe
        raise ConfigError([f"--wipe-data: {exc}"]) from None
    print(f"pulsar-grpc standalone: wiped data directory {data}", file=sys.stderr)


def run_broker(
    args: argparse.Namespace,
    command: str,
    check: Callable[[ServiceConfiguration], None] = _no_check,
) -> int:
    """Load the configuration, run `check` on it (a ConfigError refuses the start), then run
    the broker until SIGINT or SIGTERM; the exit codes are the module docstring's."""
    from pulsar_grpc.broker.service import BrokerService

    try:
        overrides = parse_set_flags(args.overrides)
        if args.data:
            overrides["dataDirectory"] = args.data
        if args.config is not None and not args.config.is_file():
            raise ConfigError([f"--config: {args.config}: no such file"])
        loaded = read_config(args.config, os.environ, overrides)
        if loaded.ignored:  # once, before anything else is logged
            print(f"pulsar-grpc {command}: warning: {loaded.ignored_warning()}", file=sys.stderr)
        config = loaded.config
        check(config)
        broker = BrokerService(config)
    except ConfigError as exc:
        print(invalid_configuration(command, exc), file=sys.stderr)
        return 2
    except DataDirectoryInUseError as exc:  # --wipe-data on a directory a broker runs on
        print(f"pulsar-grpc {command}: cannot start: {exc}", file=sys.stderr)
        return EXIT_DATA_DIRECTORY_IN_USE

    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    def ready_line() -> str:
        urls = broker.namespaces.internal_urls()
        return (
            f"pulsar-grpc {command} ready grpc={urls.grpc_url or urls.grpc_url_tls} "
            f"http={urls.http_url or urls.http_url_tls}"
        )

    try:
        serve_until_signalled(broker, ready_line)
    except ConfigError as exc:
        print(invalid_configuration(command, exc), file=sys.stderr)
        return 2
    except DataDirectoryInUseError as exc:
        print(f"pulsar-grpc {command}: cannot start: {exc}", file=sys.stderr)
        return EXIT_DATA_DIRECTORY_IN_USE
    # grpc reports a port it cannot bind as RuntimeError; an unreachable ledgerStorageUrl
    # database is a PersistenceError, an unreachable metadataStoreUrl ZooKeeper a MetadataError.
    except (OSError, RuntimeError, PersistenceError, MetadataError) as exc:
        print(f"pulsar-grpc {command}: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0


def invalid_configuration(command: str, exc: ConfigError) -> str:
    """One line for one problem (what scripts grep), else a header and a line each."""
    separator = " " if len(exc.errors) == 1 else "\n"
    return f"pulsar-grpc {command}: invalid configuration:{separator}{exc}"
