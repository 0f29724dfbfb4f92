"""Partition choice: Pulsar-compatible key hash, round robin per batching window, single."""

import itertools

import pytest

from pulsar_grpc.client._routing import PartitionsRoutingMode, Router, murmur3_32, partition_for_key


@pytest.mark.parametrize(
    ("data", "seed", "expected"),
    [
        # Reference values of MurmurHash3_x86_32 (SMHasher / mmh3 / Guava).
        (b"", 0, 0),
        (b"", 1, 0x514E28B7),
        (b"hello", 0, 0x248BFA47),
        (b"foo", 0, 4138058784),
        (b"The quick brown fox jumps over the lazy dog", 0, 0x2E4FF723),
    ],
)
def test_murmur3_reference_values(data, seed, expected):
    assert murmur3_32(data, seed) == expected


@pytest.mark.parametrize(
    ("key", "hashed", "partitions"),
    [
        # Each tail length (0-3 bytes after the 4-byte blocks) and multi-byte UTF-8; values of
        # the pure-Python MurmurHash3 this client had before mmh3, checked against Pulsar's.
        ("a", 1009084850, [2, 4, 2]),
        ("ab", 2613040991, [0, 6, 15]),
        ("abc", 3017643002, [0, 1, 10]),
        ("abcd", 1139631978, [0, 2, 10]),
        ("abcde", 3902511862, [2, 2, 6]),
        ("key-1234567", 1919577977, [2, 2, 9]),
        ("user-\u00e9\u4e2d", 696669202, [1, 5, 2]),
        ("\U0001f600-emoji", 697204780, [1, 6, 12]),
    ],
)
def test_key_partition_vectors(key: str, hashed: int, partitions: list[int]) -> None:
    assert murmur3_32(key.encode()) == hashed
    assert [partition_for_key(key, n) for n in (3, 7, 16)] == partitions


def test_key_partition_is_pulsars_formula_and_stable():
    # Pulsar: signSafeMod(murmur3_32(key) & Integer.MAX_VALUE, n)
    assert partition_for_key("foo", 7) == (4138058784 & 0x7FFFFFFF) % 7
    assert partition_for_key("foo", 7) == partition_for_key("foo", 7)


def test_keys_spread_over_partitions():
    hits = {partition_for_key(f"key-{i}", 4) for i in range(200)}
    assert hits == {0, 1, 2, 3}


def test_keyed_messages_ignore_the_mode():
    for mode in (
        PartitionsRoutingMode.RoundRobinDistribution,
        PartitionsRoutingMode.UseSinglePartition,
    ):
        router = Router(5, mode, clock=lambda: 0.0)
        assert router.choose("user-42") == partition_for_key("user-42", 5)


def test_round_robin_moves_one_partition_per_batching_window():
    now = [0.0]
    router = Router(3, "round_robin", batching_delay_ms=10, clock=lambda: now[0])
    seen = []
    for t in range(0, 60, 5):  # two sends per 10 ms window
        now[0] = float(t)
        seen.append(router.choose(None))
    assert seen[0::2] == seen[1::2]  # a window's messages share a partition (one batch)
    windows = seen[0::2]
    assert [(b - a) % 3 for a, b in itertools.pairwise(windows)] == [1] * 5


def test_round_robin_window_is_at_least_one_ms():
    now = [0.0]
    router = Router(2, "round_robin", batching_delay_ms=0, clock=lambda: now[0])
    first = router.choose("")
    now[0] = 0.5
    assert router.choose("") == first
    now[0] = 1.0
    assert router.choose("") != first


def test_single_mode_sticks_to_one_partition():
    now = [0.0]
    router = Router(8, PartitionsRoutingMode.UseSinglePartition, clock=lambda: now[0])
    first = router.choose(None)
    for t in range(100):
        now[0] = t * 7.0
        assert router.choose(None) == first


def test_router_validates():
    with pytest.raises(ValueError):
        Router(0)
    with pytest.raises(ValueError):
        Router(2, "key_hash_everything")


def test_custom_partition_needs_a_router_and_a_router_means_custom_partition():
    with pytest.raises(ValueError, match="needs a message_router"):
        Router(3, PartitionsRoutingMode.CustomPartition)
    router = Router(3, "round_robin", custom=lambda message, n: n - 1)
    assert router.mode is PartitionsRoutingMode.CustomPartition
