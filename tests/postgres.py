"""A real PostgreSQL server for tests: the product's (pulsar_grpc.cli.local_servers, what
`make cluster` runs), a temporary cluster on a free loopback port, run as the unprivileged
`postgres` user when the tests run as root.

One server serves the whole session (``postgres_server``; a test module imports it with
``postgres_url``); each test gets a database of its own (``postgres_url``), so tests never see
each other's tables.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from pulsar_grpc.cli.local_servers import PostgresServer, ServerNotInstalledError

__all__ = ["PostgresServer", "postgres_server", "postgres_url"]

_databases = itertools.count()


class _Shared:
    """The session's one server. Each test module imports the fixture, which gives pytest one
    session fixture per module: they share this server, and the last one stops it."""

    server: PostgresServer | None = None
    users = 0


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    if _Shared.server is None:
        try:
            _Shared.server = PostgresServer().start()
        except ServerNotInstalledError as exc:
            pytest.fail(str(exc))
    _Shared.users += 1
    try:
        yield _Shared.server
    finally:
        _Shared.users -= 1
        if _Shared.users == 0:
            _Shared.server.stop()
            _Shared.server = None


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    return postgres_server.create_database(f"test_{os.getpid()}_{next(_databases)}")
