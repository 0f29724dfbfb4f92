"""Fixtures: real brokers on free loopback ports, stopped after each test.

Every test also fails when an error escaped where its assertions cannot see it (see
``tests/escaped.py``): on a broker's event loop, on the test's own event loop, or logged with a
traceback by the broker. A test that provokes such a log on purpose says so with
``@pytest.mark.allow_broker_errors``.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.escaped import LATE, LogErrors, LoopErrors, fail_if_any
from tests.support import BrokerThread, StandaloneProcess, broker_config


class CurrentTestLoops:
    """The recorders of the event loops pytest-asyncio creates for the test in progress."""

    def __init__(self) -> None:
        self.test = "no test"
        self._recorders: list[LoopErrors] = []

    def begin(self, test: str) -> None:
        self.test = test

    def new_loop(self) -> asyncio.AbstractEventLoop:
        recorder = LoopErrors(f"the event loop of {self.test}")
        self._recorders.append(recorder)
        return recorder.install(asyncio.new_event_loop())

    def check(self) -> list[str]:
        recorders, self._recorders = self._recorders, []
        return [error for recorder in recorders for error in recorder.check()]


TEST_LOOPS = CurrentTestLoops()


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """pytest-asyncio's hook: its loops come from here, so they all record what escapes."""
    return {"asyncio": TEST_LOOPS.new_loop}


@pytest.fixture(autouse=True)
def no_escaped_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test at teardown when something escaped on its event loop or was logged with
    a traceback by the broker. Set up before, so torn down after, the test's event loop and its
    brokers: their shutdown is checked too."""
    TEST_LOOPS.begin(request.node.nodeid)
    with LogErrors() as logged:
        yield
    logs = logged.take() if request.node.get_closest_marker("allow_broker_errors") is None else []
    remedy = " (mark the test allow_broker_errors if the broker logs on purpose)" if logs else ""
    fail_if_any(TEST_LOOPS.check() + logs, remedy)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Errors that reached a loop after its test was checked fail the session."""
    gc.collect()  # frees what still holds a failed task, whose loop then reports it
    if LATE:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.section("errors that escaped after their test ended", red=True)
            for error in LATE:
                reporter.write_line(error)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
    fail_if_any([error for broker in started for error in broker.errors.check()])


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
