"""Where a bundle is split (Pulsar's NamespaceBundleSplitAlgorithm), and the namespace's
bundles after a split at one or several boundaries."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.cluster.split import SplitAlgorithm, split_boundaries
from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.naming import (
    DEFAULT_NAMESPACE,
    FULL_UPPER_BOUND,
    NamespaceBundle,
    NamespaceBundles,
    TopicName,
    topic_hash,
)

FIRST = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[0]  # 0x00000000_0x40000000
LAST = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[3]  # 0xc0000000_0xffffffff


def topics_in(bundle: NamespaceBundle, n: int) -> list[TopicName]:
    found = []
    i = 0
    while len(found) < n:
        topic = TopicName.get(f"split-{i}")
        if bundle.includes(topic):
            found.append(topic)
        i += 1
    return found


def test_range_equally_divide_is_the_middle() -> None:
    assert split_boundaries(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, FIRST) == [0x20000000]
    # (0xffffffff - 0xc0000000) // 2 = 0x1fffffff, as Pulsar's.
    assert split_boundaries(SplitAlgorithm.RANGE_EQUALLY_DIVIDE, LAST) == [0xDFFFFFFF]


@pytest.mark.parametrize("count", [2, 3, 10, 11])
def test_topic_count_equally_divide_puts_half_the_topics_each_side(count: int) -> None:
    topics = topics_in(FIRST, count)
    others = topics_in(LAST, 5)  # outside the bundle: ignored
    [boundary] = split_boundaries(
        SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, FIRST, [*topics, *others]
    )
    below = sum(topic_hash(t) < boundary for t in topics)
    assert below == count // 2 if count % 2 == 0 else below in (count // 2, count // 2 + 1)
    hashes = sorted(topic_hash(t) for t in topics)
    start, end = hashes[max(count // 2 - 1, 0)], hashes[count // 2]
    assert boundary == start + (end - start) // 2  # Pulsar's: midway between the middle two


@pytest.mark.parametrize("count", [0, 1])
def test_topic_count_equally_divide_needs_two_topics(count: int) -> None:
    with pytest.raises(InvalidArgumentError, match="needs at least 2"):
        split_boundaries(SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE, FIRST, topics_in(FIRST, count))


def test_specified_positions_keeps_those_inside_the_bundle() -> None:
    positions = [0x30000000, 0x10000000, 0x10000000, 0x50000000, 0]
    assert split_boundaries(SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE, FIRST, (), positions) == [
        0x10000000,
        0x30000000,
    ]
    with pytest.raises(InvalidArgumentError, match="no valid boundary"):
        split_boundaries(SplitAlgorithm.SPECIFIED_POSITIONS_DIVIDE, FIRST, (), [0x50000000])


def test_a_bundle_of_one_hash_cannot_be_split() -> None:
    tiny = NamespaceBundle(DEFAULT_NAMESPACE, 5, 6)
    for algorithm in SplitAlgorithm:
        with pytest.raises(InvalidArgumentError, match="can't be split further"):
            split_boundaries(algorithm, tiny, (), [5])


def test_unknown_algorithm_names_the_valid_ones() -> None:
    assert SplitAlgorithm.parse("topic_count_equally_divide") is (
        SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE
    )
    with pytest.raises(InvalidArgumentError) as refused:
        SplitAlgorithm.parse("flow_or_qps_equally_divide")
    for algorithm in SplitAlgorithm:
        assert algorithm.value in refused.value.message


def test_split_at_several_boundaries() -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
    split = bundles.split_at(bundles.bundles[0], [0x30000000, 0x10000000])
    assert split.boundary_strings == [
        "0x00000000",
        "0x10000000",
        "0x30000000",
        "0x40000000",
        "0x80000000",
        "0xc0000000",
        "0xffffffff",
    ]
    with pytest.raises(InvalidArgumentError, match="no boundary"):
        bundles.split_at(bundles.bundles[0], [])
    with pytest.raises(InvalidArgumentError, match="must be inside bundle"):
        bundles.split_at(bundles.bundles[0], [0x10000000, FULL_UPPER_BOUND])
