"""Fixtures: real brokers on free loopback ports, stopped after each test.

Every test also fails when an error escaped where its assertions cannot see it (see
``tests/escaped.py``): on a broker's event loop, on the test's own event loop, or logged with a
traceback by the broker. A test that provokes such a log on purpose says so with
``@pytest.mark.allow_broker_errors``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.escaped import LogErrors, LoopErrors, fail_if_any
from tests.support import BrokerThread, StandaloneProcess, broker_config

# The exception handler of every event loop pytest-asyncio creates for a test or fixture.
TEST_LOOP_ERRORS = LoopErrors("the test's event loop")


def recording_event_loop() -> asyncio.AbstractEventLoop:
    return TEST_LOOP_ERRORS.install(asyncio.new_event_loop())


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: its loops come from here, so they all record what escapes."""
    return {"asyncio": recording_event_loop}


@pytest.fixture(autouse=True)
def no_escaped_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test at teardown when something escaped on its event loop or was logged with
    a traceback by the broker. Set up before, so torn down after, the test's event loop and its
    brokers: their shutdown is checked too."""
    TEST_LOOP_ERRORS.take()  # late arrivals from an earlier test's loop are not this test's
    with LogErrors() as logged:
        yield
    logs = logged.take() if request.node.get_closest_marker("allow_broker_errors") is None else []
    remedy = " (mark the test allow_broker_errors if the broker logs on purpose)" if logs else ""
    fail_if_any(TEST_LOOP_ERRORS.take() + logs, remedy)


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[Callable[..., BrokerThread]]:
    started: list[BrokerThread] = []

    def make(**overrides: Any) -> BrokerThread:
        data = overrides.pop("data_dir", tmp_path / f"data{len(started)}")
        broker = BrokerThread(broker_config(data, **overrides)).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()
    fail_if_any([error for broker in started for error in broker.errors.take()])


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory()


@pytest.fixture
def standalone_factory(tmp_path: Path) -> Iterator[Callable[..., StandaloneProcess]]:
    started: list[StandaloneProcess] = []

    def make(data_dir: Path | None = None, *extra: str) -> StandaloneProcess:
        process = StandaloneProcess(data_dir or tmp_path / "standalone", tuple(extra)).start()
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()
        close_output(process)


def close_output(process: StandaloneProcess) -> None:
    """Close the pipe of the process's output once it has ended (else it is left to the garbage
    collector, which warns). Closing waits for the thread that drains it to reach the end."""
    if process.proc is not None and process.proc.stdout is not None:
        process.proc.stdout.close()
