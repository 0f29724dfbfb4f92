"""Key_Shared with every hash range down to a single hash: the next consumer is refused with
Pulsar's ConsumerAssignError, and the selector is left as it was."""

from __future__ import annotations

import time
from typing import Any

import pytest

from pulsar_grpc.broker.errors import ConsumerAssignError, ServerError
from pulsar_grpc.broker.topics.key_shared import RANGE_SIZE, AutoSplitSelector


class FakeConsumer:
    def __init__(self, name: str) -> None:
        self.name = name


def fake(name: str) -> Any:
    """The selector only keeps consumers: any object stands in for one."""
    return FakeConsumer(name)


def full_selector() -> tuple[AutoSplitSelector, list[Any]]:
    selector = AutoSplitSelector()
    consumers = [fake(f"c{i}") for i in range(RANGE_SIZE)]
    for consumer in consumers:
        selector.add(consumer)
    return selector, consumers


def test_the_consumer_past_one_per_hash_is_refused_and_changes_nothing() -> None:
    started = time.monotonic()
    selector, consumers = full_selector()
    assert time.monotonic() - started < 20, "adding consumers must not be quadratic"
    before = [(r.start, r.end, r.consumer) for r in selector.ranges]
    assert all(start == end for start, end, _ in before)
    assert {c for _, _, c in before} == set(consumers)
    with pytest.raises(ConsumerAssignError) as err:
        selector.add(fake("one too many"))
    assert err.value.code is ServerError.ConsumerAssignError
    assert [(r.start, r.end, r.consumer) for r in selector.ranges] == before


def test_a_departure_makes_room_again() -> None:
    selector, _ = full_selector()
    leaving = selector.select(1000)
    assert leaving is not None
    selector.remove(leaving)
    # Its hash went to the neighbour above, which now owns two.
    assert selector.select(1000) is selector.select(1001)
    newcomer = fake("newcomer")
    selector.add(newcomer)
    assert selector.select(1001) is newcomer
    assert len(selector.ranges) == RANGE_SIZE
    with pytest.raises(ConsumerAssignError):
        selector.add(fake("again too many"))
