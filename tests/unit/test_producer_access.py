"""ExclusiveAccess (broker/topics/producer_access.py) without a broker: the topic epoch, the
waiting line, and what happens when the ledger node cannot be written (issue 26)."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from pulsar_grpc.broker.errors import (
    PersistenceError,
    ProducerBusyError,
    ProducerFencedError,
    ServiceNotReadyError,
)
from pulsar_grpc.broker.ledger import ManagedLedger
from pulsar_grpc.broker.topics.producer_access import (
    TOPIC_EPOCH_PROPERTY,
    ExclusiveAccess,
    ProducerAccessMode,
)

Mode = ProducerAccessMode


class FakeLedger:
    def __init__(self, properties: dict[str, str] | None = None) -> None:
        self.properties = dict(properties or {})
        self.failing = False

    async def set_property(self, key: str, value: str) -> None:
        await asyncio.sleep(0)
        if self.failing:
            raise PersistenceError("metadata store down")
        self.properties[key] = value


def access(
    ledger: FakeLedger, producers: set[str] | None = None
) -> tuple[ExclusiveAccess, set[str], list[str]]:
    registered = producers if producers is not None else set()
    fenced: list[str] = []

    def fence(name: str, _: ProducerFencedError) -> None:
        registered.discard(name)
        fenced.append(name)

    return (
        ExclusiveAccess("t", cast(ManagedLedger, ledger), lambda: registered, fence),
        registered,
        fenced,
    )


async def test_the_epoch_is_read_back_and_moves_on_with_each_exclusive_admission() -> None:
    ledger = FakeLedger({TOPIC_EPOCH_PROPERTY: "4"})
    gate, _, _ = access(ledger)
    assert await gate.admit("a", Mode.SHARED, None) == 4
    assert await gate.admit("x", Mode.EXCLUSIVE, None) == 5
    assert ledger.properties[TOPIC_EPOCH_PROPERTY] == "5"
    with pytest.raises(ProducerBusyError):
        await gate.admit("b", Mode.SHARED, None)
    gate.released("x")
    with pytest.raises(ProducerFencedError, match="epoch"):
        await gate.admit("x", Mode.EXCLUSIVE, 4)
    assert await gate.admit("x", Mode.EXCLUSIVE, 5) == 5  # a reconnect keeps its epoch


async def test_a_failed_store_leaves_the_topic_free() -> None:
    ledger = FakeLedger()
    gate, _, _ = access(ledger)
    ledger.failing = True
    with pytest.raises(PersistenceError):
        await gate.admit("x", Mode.EXCLUSIVE, None)
    assert gate.holder is None and gate.epoch is None
    ledger.failing = False
    assert await gate.admit("y", Mode.EXCLUSIVE, None) == 0


async def test_a_waiter_that_leaves_is_skipped_and_one_promoted_in_vain_releases() -> None:
    gate, registered, _ = access(FakeLedger())
    assert await gate.admit("x", Mode.EXCLUSIVE, None) == 0
    registered.add("x")
    gone = asyncio.ensure_future(gate.admit("gone", Mode.WAIT_FOR_EXCLUSIVE, None))
    kept = asyncio.ensure_future(gate.admit("kept", Mode.WAIT_FOR_EXCLUSIVE, None))
    await asyncio.sleep(0)
    assert gate.waiting == 2
    gone.cancel()
    await asyncio.sleep(0)
    assert gate.waiting == 1
    registered.discard("x")
    gate.released("x")
    assert await kept == 1 and gate.holder == "kept"


async def test_fencing_fails_the_waiters_and_ends_the_others_and_close_fails_waiters() -> None:
    gate, registered, fenced = access(FakeLedger())
    registered.update({"s1", "s2"})
    waiting = asyncio.ensure_future(gate.admit("w", Mode.WAIT_FOR_EXCLUSIVE, None))
    await asyncio.sleep(0)
    assert await gate.admit("f", Mode.EXCLUSIVE_WITH_FENCING, None) == 0
    assert sorted(fenced) == ["s1", "s2"]
    with pytest.raises(ProducerFencedError):
        await waiting
    late = asyncio.ensure_future(gate.admit("late", Mode.WAIT_FOR_EXCLUSIVE, None))
    await asyncio.sleep(0)
    gate.close(ServiceNotReadyError("unloaded"))
    with pytest.raises(ServiceNotReadyError):
        await late
