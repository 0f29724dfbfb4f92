"""Serving until a signal: what `standalone`, `broker` and `proxy` share once they are
configured — start, print one ready line, wait for SIGINT or SIGTERM, close."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from pulsar_grpc.broker.stalls import freeze_startup_heap

log = logging.getLogger("pulsar_grpc.serving")


def add_server_options(p: argparse.ArgumentParser, config_help: str) -> None:
    """The options every serving command shares: its configuration file, ``--set`` overrides
    of single properties, and the log level."""
    p.add_argument("--config", "-c", type=Path, help=config_help)
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="PROPERTY=VALUE",
        help="override one property, e.g. --set grpcServicePort=6650 (repeatable)",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="the least severe log records printed (default INFO)",
    )


class Served(Protocol):
    """A server the command runs: a broker or a proxy."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


def serve_until_signalled(service: Served, ready_line: Callable[[], str]) -> None:
    """Run ``service`` on uvloop until SIGINT or SIGTERM. ``ready_line`` is printed once it
    has started: one parseable line that tests and scripts wait for. A start that fails closes
    what it opened before the error goes up."""

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await service.start()
        except BaseException:
            await service.close()
            raise
        log.debug("%d start-up objects frozen", freeze_startup_heap())
        print(ready_line(), flush=True)
        try:
            await stop.wait()
        finally:
            log.info("shutting down")
            await service.close()

    import uvloop

    uvloop.run(main())
