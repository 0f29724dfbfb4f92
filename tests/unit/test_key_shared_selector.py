"""Key_Shared auto-split hash ranges: the rules a user relies on for key stickiness."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pulsar_grpc.broker.entry_format import EntryInfo
from pulsar_grpc.broker.topics.key_shared import (
    RANGE_SIZE,
    AutoSplitSelector,
    sticky_key,
    sticky_key_hash,
)


class FakeConsumer:
    def __init__(self, name: str) -> None:
        self.name = name


def consumers(n: int) -> list[Any]:
    return [FakeConsumer(f"c{i}") for i in range(n)]


def covered(selector: AutoSplitSelector) -> list[tuple[int, int]]:
    return [(r.start, r.end) for r in selector.ranges]


def test_first_consumer_owns_the_whole_range() -> None:
    selector = AutoSplitSelector()
    (c0,) = consumers(1)
    selector.add(c0)
    assert covered(selector) == [(0, RANGE_SIZE - 1)]
    assert selector.select(0) is c0 and selector.select(RANGE_SIZE - 1) is c0


def test_new_consumer_takes_upper_half_of_largest_range() -> None:
    selector = AutoSplitSelector()
    c0, c1, c2 = consumers(3)
    selector.add(c0)
    selector.add(c1)
    assert covered(selector) == [(0, 32767), (32768, 65535)]
    selector.add(c2)
    assert covered(selector) == [(0, 16383), (16384, 32767), (32768, 65535)]
    assert selector.select(20000) is c2


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13])
def test_ranges_always_cover_the_hash_space_without_gaps(n: int) -> None:
    selector = AutoSplitSelector()
    cs = consumers(n)
    for c in cs:
        selector.add(c)
    for victim in cs[::2][:-1] if n > 1 else []:
        selector.remove(victim)
    ranges = covered(selector)
    assert ranges[0][0] == 0 and ranges[-1][1] == RANGE_SIZE - 1
    for (_, end), (start, _) in itertools.pairwise(ranges):
        assert start == end + 1


def test_departed_consumer_range_goes_to_a_neighbour() -> None:
    selector = AutoSplitSelector()
    c0, c1, c2 = consumers(3)
    for c in (c0, c1, c2):
        selector.add(c)
    selector.remove(c2)  # owned 16384..32767, merges into the range above it
    assert selector.select(20000) is c1
    selector.remove(c1)  # the last range merges into the one below
    assert covered(selector) == [(0, RANGE_SIZE - 1)]
    assert selector.select(65535) is c0


def test_same_key_same_hash_and_in_range() -> None:
    assert sticky_key_hash(b"user-42") == sticky_key_hash(b"user-42")
    assert all(0 <= sticky_key_hash(f"k{i}".encode()) < RANGE_SIZE for i in range(1000))


def info(key: bytes, producer: str = "p", sequence_id: int = 7) -> EntryInfo:
    return EntryInfo(
        num_messages=1,
        publish_time=0,
        producer_name=producer,
        sequence_id=sequence_id,
        sticky_key=key,
    )


def test_sticky_key_is_the_message_key_else_producer_and_sequence_id() -> None:
    """Pulsar's resolveStickyKey: a keyless entry is routed by "<producer>-<sequence id>", so
    keyless messages spread over the hash ranges instead of all sharing one key."""
    assert sticky_key(info(b"user-42")) == b"user-42"
    assert sticky_key(info(b"", "prod", 12)) == b"prod-12"
    hashes = {sticky_key_hash(sticky_key(info(b"", "prod", s))) for s in range(100)}
    assert len(hashes) > 90 and min(hashes) < RANGE_SIZE // 2 <= max(hashes)
