"""Key_Shared policy pieces a user relies on: pulsar-client's validation of
``ConsumerKeySharedPolicy`` (checked against the installed pulsar-client itself), Pulsar's key
hash, and the Sticky selector's ranges."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pulsar
import pytest

from pulsar_grpc.broker.errors import ConsumerAssignError
from pulsar_grpc.broker.topics.key_shared import sticky_key_hash
from pulsar_grpc.broker.topics.key_shared_policy import (
    KeySharedMode,
    KeySharedPolicy,
    StickySelector,
)
from pulsar_grpc.client import ConsumerKeySharedPolicy
from pulsar_grpc.client import KeySharedMode as SdkMode


@pytest.mark.parametrize(
    ("mode", "kwargs"),
    [
        ("Sticky", {}),
        ("Sticky", {"sticky_ranges": []}),
        ("Sticky", {"sticky_ranges": [(0, 65536)]}),
        ("Sticky", {"sticky_ranges": [(-1, 5)]}),
        ("Sticky", {"sticky_ranges": [(0, 10), (5, 20)]}),
        ("Sticky", {"sticky_ranges": [(0, 10), (10, 20)]}),
        ("Sticky", {"sticky_ranges": [(0, 10), (11, 20)]}),
        ("Sticky", {"sticky_ranges": [(5, 1)]}),  # left to the broker
        ("Sticky", {"sticky_ranges": [(0, 65535)], "allow_out_of_order_delivery": True}),
        ("AutoSplit", {}),
        ("AutoSplit", {"sticky_ranges": [(0, 5)]}),
        ("AutoSplit", {"sticky_ranges": []}),
    ],
)
def test_policy_accepts_and_refuses_what_pulsar_client_does(
    mode: str, kwargs: dict[str, Any]
) -> None:
    def outcome(policy_class: Any, mode_enum: Any) -> tuple[str, Any]:
        try:
            p = policy_class(getattr(mode_enum, mode), **kwargs)
        except (ValueError, TypeError) as exc:
            return type(exc).__name__, str(exc)
        return "ok", (p.key_shared_mode.name, p.allow_out_of_order_delivery, p.sticky_ranges)

    theirs = outcome(pulsar.ConsumerKeySharedPolicy, pulsar.KeySharedMode)
    assert outcome(ConsumerKeySharedPolicy, SdkMode) == theirs


def test_policy_refuses_a_mode_that_is_not_a_key_shared_mode() -> None:
    with pytest.raises(TypeError):
        ConsumerKeySharedPolicy("Sticky", sticky_ranges=[(0, 1)])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "murmur3_x86_32"),
    [  # MurmurHash3_x86_32, seed 0: Pulsar's Murmur3_32Hash before its sign bit is cleared
        (b"", 0x00000000),
        (b"foo", 0xF6A5C420),
        (b"hello", 0x248BFA47),
        (b"The quick brown fox jumps over the lazy dog", 0x2E4FF723),
    ],
)
def test_key_hash_is_pulsars_murmur3(key: bytes, murmur3_x86_32: int) -> None:
    """Sticky ranges select the same keys as on Pulsar: makeHash(key) % 65536."""
    assert sticky_key_hash(key) == (murmur3_x86_32 & 0x7FFFFFFF) % 65536


def consumer(name: str, *ranges: tuple[int, int]) -> Any:
    policy = KeySharedPolicy(KeySharedMode.STICKY, ranges=ranges)
    options = SimpleNamespace(key_shared=policy)
    return SimpleNamespace(
        options=options, name=name, subscription="t/s", consumer_id=0, client_address=""
    )


def test_sticky_selector_serves_declared_ranges_only() -> None:
    selector = StickySelector()
    a, b = consumer("a", (0, 9), (20, 29)), consumer("b", (10, 14))
    selector.add(a)
    selector.add(b)
    picked = {h: selector.select(h) for h in (0, 9, 10, 14, 15, 19, 20, 29, 30, 65535)}
    assert picked == {
        0: a,
        9: a,
        10: b,
        14: b,
        15: None,
        19: None,
        20: a,
        29: a,
        30: None,
        65535: None,
    }
    selector.remove(a)
    assert selector.select(5) is None and selector.select(12) is b


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ((), "Ranges for KeyShared policy must not be empty."),
        (((5, 1),), "Fixed hash range start > end for range: [5,1]"),
        (((0, 10), (10, 20)), "Consumer's own ranges conflict: [0,10] overlaps with [10,20]"),
        (((30, 40), (5, 15)), "Range conflict with consumer Consumer{subscription=t/s, "),
        (((0, 65535),), "Range conflict with consumer"),
    ],
)
def test_sticky_selector_refuses_as_pulsar_and_changes_nothing(
    ranges: tuple[tuple[int, int], ...], message: str
) -> None:
    selector = StickySelector()
    held = consumer("held", (10, 20))
    selector.add(held)
    with pytest.raises(ConsumerAssignError) as err:
        selector.add(consumer("new", *ranges))
    assert str(err.value).startswith(message)
    assert selector.select(35) is None and selector.select(15) is held
