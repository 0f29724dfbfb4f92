"""Pulsar's naming rules: the cases mirror Pulsar's TopicNameTest / NamespaceBundlesTest."""

from __future__ import annotations

import zlib

import pytest

from pulsar_grpc.broker.errors import InvalidArgumentError, InvalidTopicNameError
from pulsar_grpc.broker.naming import (
    DEFAULT_NAMESPACE,
    FULL_UPPER_BOUND,
    NamespaceBundle,
    NamespaceBundles,
    NamespaceName,
    TopicDomain,
    TopicName,
    topic_hash,
)

# --- topic names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "full_name"),
    [
        ("my-topic", "persistent://public/default/my-topic"),
        ("tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("persistent://tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("non-persistent://tenant/ns/topic", "non-persistent://tenant/ns/topic"),
        ("PERSISTENT://tenant/ns/topic", "persistent://tenant/ns/topic"),
        ("Non-Persistent://tenant/ns/topic", "non-persistent://tenant/ns/topic"),
        # Pulsar's StringUtils.split drops empty tokens in short names.
        ("/my-topic", "persistent://public/default/my-topic"),
        ("my-topic/", "persistent://public/default/my-topic"),
        # Local names are not restricted to NamedEntity characters in Pulsar.
        ("my topic?#~", "persistent://public/default/my topic?#~"),
        # Every printable ASCII character but '/' is allowed in a local name.
        (
            "t/ns/" + "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("/")),
            "persistent://t/ns/" + "".join(chr(c) for c in range(0x20, 0x7F) if c != ord("/")),
        ),
        ("t=1/n:s.x/a_b", "persistent://t=1/n:s.x/a_b"),
    ],
)
def test_topic_name_forms(given: str, full_name: str) -> None:
    topic = TopicName.get(given)
    assert topic.full_name == full_name
    assert str(topic) == full_name
    assert TopicName.get(full_name) == topic


def test_topic_name_parts() -> None:
    topic = TopicName.get("non-persistent://acme/orders/created")
    assert topic.domain is TopicDomain.NON_PERSISTENT
    assert topic.tenant == "acme"
    assert topic.namespace == NamespaceName("acme", "orders")
    assert str(topic.namespace) == "acme/orders"
    assert topic.local_name == "created"
    assert not topic.is_persistent
    assert TopicName.get("my-topic").namespace == DEFAULT_NAMESPACE


@pytest.mark.parametrize(
    ("given", "rule"),
    [
        ("", "expected <tenant>/<namespace>/<topic> or <topic>"),
        ("/", "expected <tenant>/<namespace>/<topic> or <topic>"),
        ("tenant/topic", "expected <tenant>/<namespace>/<topic> or <topic>"),
        ("a/b/c/d", "expected <tenant>/<namespace>/<topic> or <topic>"),
        ("persistent://", "expected <domain>://<tenant>/<namespace>/<topic>"),
        ("persistent://tenant/ns", "expected <domain>://<tenant>/<namespace>/<topic>"),
        ("persistent://tenant/ns/", "empty topic"),
        ("persistent://tenant//topic", "namespace name must not be empty"),
        ("persistent:///ns/topic", "tenant name must not be empty"),
        ("persistent://tenant/cluster/ns/topic", "legacy form with a cluster"),
        ("persistent://tenant/ns/a/b", "must not contain '/'"),
        ("volatile://tenant/ns/topic", "invalid topic domain 'volatile'"),
        ("://tenant/ns/topic", "invalid topic domain ''"),
        ("persistent://ten ant/ns/topic", "invalid tenant name 'ten ant'"),
        ("persistent://tenant/n$/topic", "invalid namespace name 'n$'"),
        ("persistent://tenänt/ns/topic", "invalid tenant name"),  # Java's \w is ASCII
        ("persistent://tenant/nś/topic", "invalid namespace name"),
        # gRPC metadata values carry printable ASCII only, and Produce names its topic there.
        ("persistent://tenant/ns/tópico", "only printable ASCII characters"),
        ("persistent://t/ns/emoji-\U0001f600", "only printable ASCII characters"),
        ("persistent://t/ns/tab\tin", "only printable ASCII characters"),
        ("persistent://t/ns/nul\x00", "only printable ASCII characters"),
        ("persistent://t/ns/del\x7f", "only printable ASCII characters"),
        # A non-ASCII digit: a case of getPartitionIndex in Pulsar, no name at all here.
        ("persistent://t/ns/my-topic-partition-\u0663", "only printable ASCII characters"),
        # Dot segments would address another metadata node or ledger directory.
        ("persistent://./ns/topic", "invalid tenant name '.'"),
        ("persistent://../ns/topic", "invalid tenant name '..'"),
        ("persistent://tenant/./topic", "invalid namespace name '.'"),
        ("persistent://tenant/../topic", "invalid namespace name '..'"),
        ("persistent://tenant/ns/.", "'.' and '..' are reserved"),
        ("..", "'.' and '..' are reserved"),
    ],
)
def test_invalid_topic_names(given: str, rule: str) -> None:
    with pytest.raises(InvalidTopicNameError) as info:
        TopicName.get(given)
    assert rule in info.value.message
    assert repr(given) in info.value.message


def test_topic_name_direct_construction_validates() -> None:
    with pytest.raises(InvalidTopicNameError, match="must not contain '/'"):
        TopicName(TopicDomain.PERSISTENT, DEFAULT_NAMESPACE, "a/b")
    with pytest.raises(InvalidTopicNameError, match="empty topic"):
        TopicName(TopicDomain.PERSISTENT, DEFAULT_NAMESPACE, "")


def test_topic_name_is_hashable_value() -> None:
    a, b = TopicName.get("my-topic"), TopicName.get("persistent://public/default/my-topic")
    assert a == b
    assert len({a, b}) == 1
    assert a != TopicName.get("non-persistent://public/default/my-topic")


# --- partitions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "index", "base"),
    [
        ("my-topic", -1, "persistent://public/default/my-topic"),
        ("my-topic-partition-0", 0, "persistent://public/default/my-topic"),
        ("my-topic-partition-12", 12, "persistent://public/default/my-topic"),
        ("a-partition-1-partition-2", 2, "persistent://public/default/a-partition-1"),
        ("my-topic-partition-2147483647", 2147483647, "persistent://public/default/my-topic"),
        # Not partitions, exactly as Pulsar's getPartitionIndex decides.
        ("my-topic-partition-", -1, "persistent://public/default/my-topic-partition-"),
        ("my-topic-partition--1", -1, "persistent://public/default/my-topic-partition--1"),
        ("my-topic-partition-01", -1, "persistent://public/default/my-topic-partition-01"),
        ("my-topic-partition-+1", -1, "persistent://public/default/my-topic-partition-+1"),
        ("my-topic-partition-1a", -1, "persistent://public/default/my-topic-partition-1a"),
        (
            "my-topic-partition-2147483648",
            -1,
            "persistent://public/default/my-topic-partition-2147483648",
        ),
    ],
)
def test_partition_index(given: str, index: int, base: str) -> None:
    topic = TopicName.get(given)
    assert topic.partition_index == index
    assert topic.is_partitioned == (index != -1)
    assert topic.partitioned_topic_name == base
    assert topic.partitioned_topic == TopicName.get(base)


def test_get_partition() -> None:
    topic = TopicName.get("tenant/ns/orders")
    partition = topic.get_partition(3)
    assert partition.full_name == "persistent://tenant/ns/orders-partition-3"
    assert partition.partition_index == 3
    assert partition.partitioned_topic == topic
    assert topic.get_partition(-1) is topic
    assert partition.get_partition(3) is partition
    with pytest.raises(ValueError, match="partition index must be >= -1"):
        topic.get_partition(-2)


# --- encodings -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "encoding", "rest_path"),
    [
        (
            "my-topic",
            "public/default/persistent/my-topic",
            "persistent/public/default/my-topic",
        ),
        (
            "non-persistent://t/ns/a_b.c*d",
            "t/ns/non-persistent/a_b.c*d",
            "non-persistent/t/ns/a_b.c*d",
        ),
        # java.net.URLEncoder: space -> '+', '~' and ':' encoded, uppercase hex, UTF-8 bytes.
        ("t/ns/a b~:", "t/ns/persistent/a+b%7E%3A", "persistent/t/ns/a+b%7E%3A"),
        ("t/ns/100%", "t/ns/persistent/100%25", "persistent/t/ns/100%25"),
    ],
)
def test_persistence_naming_encoding(given: str, encoding: str, rest_path: str) -> None:
    topic = TopicName.get(given)
    assert topic.persistence_naming_encoding == encoding
    assert topic.rest_path == rest_path


# --- namespaces ----------------------------------------------------------------------------


@pytest.mark.parametrize("given", ["public/default", "a-b/c=d", "t:1/n.s", "T_1/N_2"])
def test_namespace_names(given: str) -> None:
    ns = NamespaceName.get(given)
    assert str(ns) == given
    assert ns == NamespaceName(*given.split("/"))


@pytest.mark.parametrize(
    ("given", "rule"),
    [
        ("", "expected the form <tenant>/<namespace>"),
        ("public", "expected the form <tenant>/<namespace>"),
        ("a/b/c/d", "expected the form <tenant>/<namespace>"),
        ("tenant/cluster/ns", "legacy <tenant>/<cluster>/<namespace> form"),
        ("/ns", "tenant name must not be empty"),
        ("tenant/", "namespace name must not be empty"),
        ("ten ant/ns", "invalid tenant name 'ten ant'"),
        ("tenant/n#s", "invalid namespace name 'n#s'"),
        ("../ns", "invalid tenant name '..'"),
        ("tenant/.", "invalid namespace name '.'"),
    ],
)
def test_invalid_namespace_names(given: str, rule: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        NamespaceName.get(given)
    assert rule in info.value.message
    assert repr(given) in info.value.message


# --- bundles -------------------------------------------------------------------------------


def test_bundle_of_my_topic_is_the_documented_one() -> None:
    topic = TopicName.get("my-topic")
    assert topic_hash(topic) == 0x2BAD45F7
    bundle = NamespaceBundles.with_count(DEFAULT_NAMESPACE).bundle_for(topic)
    assert bundle.range_str == "0x00000000_0x40000000"
    assert str(bundle) == "public/default/0x00000000_0x40000000"
    assert bundle.includes(topic)


def test_topic_hash_is_unsigned_crc32_of_full_name() -> None:
    topic = TopicName.get("tenant/ns/t-partition-3")
    expected = zlib.crc32(b"persistent://tenant/ns/t-partition-3")
    assert topic_hash(topic) == expected
    assert 0 <= topic_hash(topic) <= FULL_UPPER_BOUND


@pytest.mark.parametrize(
    ("count", "boundaries"),
    [
        (1, ["0x00000000", "0xffffffff"]),
        (2, ["0x00000000", "0x80000000", "0xffffffff"]),
        (3, ["0x00000000", "0x55555555", "0xaaaaaaaa", "0xffffffff"]),
        (4, ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"]),
    ],
)
def test_bundle_boundaries(count: int, boundaries: list[str]) -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE, count)
    assert len(bundles) == count
    assert bundles.boundary_strings == boundaries
    assert NamespaceBundles.parse(DEFAULT_NAMESPACE, boundaries) == bundles


def test_default_is_four_bundles() -> None:
    assert len(NamespaceBundles.with_count(DEFAULT_NAMESPACE)) == 4


@pytest.mark.parametrize(
    ("hash_value", "range_str"),
    [
        (0x00000000, "0x00000000_0x40000000"),
        (0x3FFFFFFF, "0x00000000_0x40000000"),
        (0x40000000, "0x40000000_0x80000000"),
        (0xBFFFFFFF, "0x80000000_0xc0000000"),
        (0xC0000000, "0xc0000000_0xffffffff"),
        (0xFFFFFFFF, "0xc0000000_0xffffffff"),  # the last bundle is closed
    ],
)
def test_bundle_for_hash(hash_value: int, range_str: str) -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE)
    bundle = bundles.bundle_for_hash(hash_value)
    assert bundle.range_str == range_str
    assert bundle.contains(hash_value)
    assert sum(b.contains(hash_value) for b in bundles) == 1


def test_bundle_upper_bound_is_open_except_the_last() -> None:
    first = NamespaceBundle(DEFAULT_NAMESPACE, 0, 0x40000000)
    last = NamespaceBundle(DEFAULT_NAMESPACE, 0xC0000000, FULL_UPPER_BOUND)
    assert not first.contains(0x40000000)
    assert last.contains(FULL_UPPER_BOUND)


def test_bundle_for_other_namespace_is_refused() -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE)
    with pytest.raises(InvalidArgumentError, match="not in namespace public/default"):
        bundles.bundle_for(TopicName.get("tenant/ns/topic"))


@pytest.mark.parametrize(
    ("range_str", "lower", "upper"),
    [
        ("0x00000000_0x40000000", 0, 0x40000000),
        ("0xc0000000_0xffffffff", 0xC0000000, 0xFFFFFFFF),
        ("0X10_0x20", 0x10, 0x20),
    ],
)
def test_parse_bundle_range(range_str: str, lower: int, upper: int) -> None:
    bundle = NamespaceBundle.parse(DEFAULT_NAMESPACE, range_str)
    assert (bundle.lower, bundle.upper) == (lower, upper)


@pytest.mark.parametrize(
    ("range_str", "rule"),
    [
        ("0x00000000", "expected <lower>_<upper>"),
        ("0xzz_0x10", "not a number"),
        ("0x00_0x100000000", "outside 0x00000000..0xffffffff"),
        ("0x40000000_0x00000000", "lower < upper"),
        ("0x40000000_0x40000000", "lower < upper"),
    ],
)
def test_invalid_bundle_range(range_str: str, rule: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rule):
        NamespaceBundle.parse(DEFAULT_NAMESPACE, range_str)


@pytest.mark.parametrize(
    ("boundaries", "rule"),
    [
        ([0], "at least 2 boundaries"),
        ([1, FULL_UPPER_BOUND], "must start at 0x00000000"),
        ([0, 0xFFFFFFFE], "end at 0xffffffff"),
        ([0, 0x80000000, 0x40000000, FULL_UPPER_BOUND], "strictly increasing"),
        ([0, 0x80000000, 0x80000000, FULL_UPPER_BOUND], "strictly increasing"),
    ],
)
def test_invalid_bundle_boundaries(boundaries: list[int], rule: str) -> None:
    with pytest.raises(InvalidArgumentError, match=rule):
        NamespaceBundles(DEFAULT_NAMESPACE, boundaries)


@pytest.mark.parametrize("count", [0, -1, 2**32])
def test_invalid_bundle_count(count: int) -> None:
    with pytest.raises(InvalidArgumentError, match="invalid number of bundles"):
        NamespaceBundles.with_count(DEFAULT_NAMESPACE, count)


def test_split_at_given_boundaries_and_refusals() -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE)
    split = bundles.split_at(bundles.bundles[3], [0xD0000000, 0xE0000000, 0xD0000000])
    assert split.boundary_strings == [
        "0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xd0000000", "0xe0000000",
        "0xffffffff",
    ]  # fmt: skip
    one = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 1)
    halves = one.split_at(one.bundles[0], [0x10])
    assert [b.range_str for b in halves] == ["0x00000000_0x00000010", "0x00000010_0xffffffff"]
    with pytest.raises(InvalidArgumentError, match="must be inside bundle"):
        one.split_at(one.bundles[0], [0])
    with pytest.raises(InvalidArgumentError, match="no boundary"):
        one.split_at(one.bundles[0], [])
    with pytest.raises(InvalidArgumentError, match="is not one of the bundles"):
        halves.split_at(one.bundles[0], [0x20])
    tiny = NamespaceBundles(DEFAULT_NAMESPACE, [0, 1, FULL_UPPER_BOUND])
    with pytest.raises(InvalidArgumentError, match="can't be split further"):
        tiny.split_at(tiny.bundles[0], [0])


def test_topics_spread_over_all_bundles() -> None:
    bundles = NamespaceBundles.with_count(DEFAULT_NAMESPACE)
    hit = {bundles.bundle_for(TopicName.get(f"t-{i}")) for i in range(200)}
    assert hit == set(bundles)


def test_reserved_subscription_name_is_the_deduplication_cursor() -> None:
    from pulsar_grpc.broker.naming import DEDUPLICATION_CURSOR, check_subscription_name

    for name in ("", ".", "..", DEDUPLICATION_CURSOR):
        with pytest.raises(InvalidArgumentError):
            check_subscription_name(name)
    check_subscription_name("a/b")  # encoded in its cursor's path, as Pulsar does
