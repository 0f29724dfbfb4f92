"""Fixtures: real brokers on free loopback ports, stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import BrokerThread, StandaloneProcess, broker_config


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
