"""Topic and namespace names, and namespace bundles, following Apache Pulsar's rules exactly.

Clients written against Pulsar send Pulsar's names, and ownership paths, managed-ledger names and
bundle ranges end up in ZooKeeper where Pulsar tooling may read them; so the parsing, the
canonical forms, the hash and the bundle boundaries mirror Pulsar's ``TopicName``,
``NamespaceName``, ``NamedEntity``, ``NamespaceBundles`` and ``NamespaceBundleFactory``.

Only V2 names (``<domain>://<tenant>/<namespace>/<topic>``) are supported: the legacy V1 form
with a cluster segment is rejected with a message that says so.

One deliberate difference: a topic's local name must be printable ASCII (0x20-0x7E), where
Pulsar allows any character. Produce and Consume carry the topic in gRPC call metadata, and
gRPC refuses any other byte in a metadata value, so such a topic could be created and looked up
but never produced to or consumed from; every entry point refuses it alike instead.
"""

from __future__ import annotations

import re
import zlib
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from itertools import pairwise

from pulsar_grpc.broker.errors import InvalidArgumentError, InvalidTopicNameError

PUBLIC_TENANT = "public"
DEFAULT_NAMESPACE_NAME = "default"
PARTITIONED_TOPIC_SUFFIX = "-partition-"

# NamedEntity: tenant, namespace (and cluster) names. Java's \w is ASCII-only.
_NAMED_ENTITY = re.compile(r"[-=:.\w]*", re.ASCII)
# TopicName.getPartitionIndex: Integer.parseInt, then reject negatives and non-canonical forms
# ("+1", "01", "-0"), so only canonical non-negative ints that fit a Java int count.
_PARTITION_INDEX = re.compile(r"0|[1-9][0-9]*")
_JAVA_INT_MAX = 2**31 - 1
# Names become segments of metadata paths and managed-ledger names, where "." and ".." would
# point at another node (or none): no part of a name may be either.
_DOT_SEGMENTS = frozenset({".", ".."})
# What a gRPC metadata value can carry (printable ASCII): Produce and Consume name their topic
# in the x-pulsar-topic header, so a topic outside it could be looked up but never used.
_METADATA_VALUE = re.compile(r"[\x20-\x7e]*")
# java.net.URLEncoder keeps these bytes as they are; everything else is %XX (space is '+').
_URL_SAFE = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-*_")


class TopicDomain(StrEnum):
    """Pulsar's topic domains; the value is the scheme written in full topic names."""

    PERSISTENT = "persistent"
    NON_PERSISTENT = "non-persistent"

    @classmethod
    def parse(cls, value: str) -> TopicDomain:
        """Case-insensitive, as Pulsar's ``TopicDomain.getEnum``."""
        for domain in cls:
            if domain.value == value.lower():
                return domain
        raise InvalidArgumentError(
            f"invalid topic domain {value!r}: expected 'persistent' or 'non-persistent'"
        )


def check_named_entity(kind: str, name: str) -> None:
    """Pulsar's ``NamedEntity.checkName`` plus the non-empty rule of ``validateNamespaceName``."""
    if not name:
        raise InvalidArgumentError(f"{kind} name must not be empty")
    if not _NAMED_ENTITY.fullmatch(name):
        raise InvalidArgumentError(
            f"invalid {kind} name {name!r}: only letters, digits, '_' and '-=:.' are allowed"
        )
    if name in _DOT_SEGMENTS:
        raise InvalidArgumentError(f"invalid {kind} name {name!r}: '.' and '..' are reserved")


# The cursor MessageDeduplication keeps on every topic (Pulsar's DEDUPLICATION_CURSOR_NAME):
# a subscription of that name would move its marks.
DEDUPLICATION_CURSOR = "pulsar.dedup"


def check_subscription_name(name: str) -> None:
    """Pulsar's rules for a subscription name, plus the metadata path rule.

    A subscription names a cursor node under its ledger's metadata path, so '.' and '..'
    cannot be one; the broker's own cursors are reserved, as Pulsar's PersistentTopic refuses
    them ("Subscription with reserved subscription name attempted").
    """
    if not name:
        raise InvalidArgumentError("subscription name must not be empty")
    if name in _DOT_SEGMENTS:
        raise InvalidArgumentError(f"invalid subscription name {name!r}: '.' and '..' are reserved")
    if name == DEDUPLICATION_CURSOR:
        raise InvalidArgumentError(
            f"invalid subscription name {name!r}: reserved for the broker's deduplication cursor"
        )


@dataclass(frozen=True, slots=True)
class NamespaceName:
    """A V2 namespace ``<tenant>/<namespace>``; ``local_name`` is the part after the tenant."""

    tenant: str
    local_name: str

    def __post_init__(self) -> None:
        check_named_entity("tenant", self.tenant)
        check_named_entity("namespace", self.local_name)

    @classmethod
    def get(cls, name: str) -> NamespaceName:
        """Parse ``tenant/namespace``; the legacy ``tenant/cluster/namespace`` is rejected."""
        parts = name.split("/")
        if len(parts) == 3:
            raise InvalidArgumentError(
                f"invalid namespace {name!r}: the legacy <tenant>/<cluster>/<namespace> form "
                "is not supported, use <tenant>/<namespace>"
            )
        if len(parts) != 2:
            raise InvalidArgumentError(
                f"invalid namespace {name!r}: expected the form <tenant>/<namespace>"
            )
        try:
            return cls(parts[0], parts[1])
        except InvalidArgumentError as e:
            raise InvalidArgumentError(f"invalid namespace {name!r}: {e.message}") from None

    def __str__(self) -> str:
        return f"{self.tenant}/{self.local_name}"


DEFAULT_NAMESPACE = NamespaceName(PUBLIC_TENANT, DEFAULT_NAMESPACE_NAME)


def _partition_index(local_name: str) -> int:
    """Pulsar's ``getPartitionIndex``: the int after the last ``-partition-``, else -1."""
    _, sep, idx = local_name.rpartition(PARTITIONED_TOPIC_SUFFIX)
    if not sep or not _PARTITION_INDEX.fullmatch(idx) or int(idx) > _JAVA_INT_MAX:
        return -1
    return int(idx)


def _url_encode(value: str) -> str:
    """``java.net.URLEncoder.encode(value, UTF_8)``, which Pulsar's ``Codec.encode`` uses.

    Not ``urllib.parse.quote_plus``: that one leaves '~' alone and encodes '*', the opposite of
    Java, and managed-ledger names must match what Pulsar writes.
    """
    out = []
    for byte in value.encode("utf-8"):
        if byte in _URL_SAFE:
            out.append(chr(byte))
        elif byte == 0x20:
            out.append("+")
        else:
            out.append(f"%{byte:02X}")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class TopicName:
    """A parsed V2 topic name; build one with :meth:`get`. Equal names compare and hash equal."""

    domain: TopicDomain
    namespace: NamespaceName
    local_name: str
    partition_index: int = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.local_name:
            raise InvalidTopicNameError(f"invalid topic name {self.full_name!r}: empty topic")
        if "/" in self.local_name:
            raise InvalidTopicNameError(
                f"invalid topic name {self.full_name!r}: the topic part must not contain '/'"
            )
        if self.local_name in _DOT_SEGMENTS:
            raise InvalidTopicNameError(
                f"invalid topic name {self.full_name!r}: '.' and '..' are reserved"
            )
        if not _METADATA_VALUE.fullmatch(self.local_name):
            raise InvalidTopicNameError(
                f"invalid topic name {self.full_name!r}: only printable ASCII characters are "
                "allowed (a topic is named in gRPC call metadata, which carries nothing else)"
            )
        object.__setattr__(self, "partition_index", _partition_index(self.local_name))

    @staticmethod
    def get(name: str) -> TopicName:
        """Parse ``topic``, ``tenant/ns/topic`` or ``domain://tenant/ns/topic``.

        Short forms mean the persistent domain and, for a bare topic, ``public/default``.
        Raises :class:`InvalidTopicNameError` naming the input and the broken rule.
        """
        return _parse_topic_name(name)

    @property
    def tenant(self) -> str:
        return self.namespace.tenant

    @property
    def full_name(self) -> str:
        return f"{self.domain.value}://{self.namespace}/{self.local_name}"

    @property
    def is_persistent(self) -> bool:
        return self.domain is TopicDomain.PERSISTENT

    @property
    def is_partitioned(self) -> bool:
        """True for a partition of a partitioned topic (``<topic>-partition-<N>``)."""
        return self.partition_index != -1

    @property
    def partitioned_topic_name(self) -> str:
        """The full name of the partitioned topic this partition belongs to, else the name."""
        if not self.is_partitioned:
            return self.full_name
        full = self.full_name
        return full[: full.rindex(PARTITIONED_TOPIC_SUFFIX)]

    @property
    def partitioned_topic(self) -> TopicName:
        """:attr:`partitioned_topic_name` parsed, for callers that go on to list partitions."""
        return self if not self.is_partitioned else TopicName.get(self.partitioned_topic_name)

    def get_partition(self, index: int) -> TopicName:
        """Partition ``index`` of this topic; -1 (or this very partition) returns ``self``.

        As in Pulsar, a partition's name is the full name with ``-partition-<index>`` appended.
        """
        if index < -1:
            raise ValueError(f"partition index must be >= -1, got {index}")
        suffix = f"{PARTITIONED_TOPIC_SUFFIX}{index}"
        if index == -1 or self.local_name.endswith(suffix):
            return self
        return TopicName(self.domain, self.namespace, self.local_name + suffix)

    @property
    def encoded_local_name(self) -> str:
        """The local name URL-encoded as Java does (Pulsar's ``getEncodedLocalName``)."""
        return _url_encode(self.local_name)

    @property
    def persistence_naming_encoding(self) -> str:
        """``tenant/ns/<domain>/<encoded topic>``: the managed-ledger name Pulsar uses."""
        return f"{self.namespace}/{self.domain.value}/{self.encoded_local_name}"

    @property
    def rest_path(self) -> str:
        """``<domain>/tenant/ns/<encoded topic>``: the topic's path in Pulsar's HTTP APIs."""
        return f"{self.domain.value}/{self.namespace}/{self.encoded_local_name}"

    def __str__(self) -> str:
        return self.full_name


@lru_cache(maxsize=100_000)
def _parse_topic_name(name: str) -> TopicName:
    """Parse and cache (Pulsar caches parsed names too: every produce names its topic)."""
    if "://" not in name:
        # Pulsar splits short names with StringUtils.split, which drops empty tokens: so
        # "/my-topic" is accepted as "my-topic", and "a//b" has two parts.
        parts = [p for p in name.split("/") if p]
        if len(parts) == 1:
            name = f"{TopicDomain.PERSISTENT.value}://{DEFAULT_NAMESPACE}/{parts[0]}"
        elif len(parts) == 3:
            name = f"{TopicDomain.PERSISTENT.value}://{name}"
        else:
            raise InvalidTopicNameError(
                f"invalid short topic name {name!r}: expected <tenant>/<namespace>/<topic> "
                "or <topic>"
            )
    scheme, _, rest = name.partition("://")
    parts = rest.split("/", 3)
    if len(parts) == 4:
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: expected <domain>://<tenant>/<namespace>/<topic> "
            "(the legacy form with a cluster is not supported, and the topic part must not "
            "contain '/')"
        )
    if len(parts) != 3:
        raise InvalidTopicNameError(
            f"invalid topic name {name!r}: expected <domain>://<tenant>/<namespace>/<topic>"
        )
    try:
        domain = TopicDomain.parse(scheme)
        namespace = NamespaceName(parts[0], parts[1])
    except InvalidArgumentError as e:
        raise InvalidTopicNameError(f"invalid topic name {name!r}: {e.message}") from None
    return TopicName(domain, namespace, parts[2])


# --- bundles -------------------------------------------------------------------------------

FULL_LOWER_BOUND = 0x00000000
FULL_UPPER_BOUND = 0xFFFFFFFF
DEFAULT_NUMBER_OF_BUNDLES = 4


def topic_hash(topic: TopicName) -> int:
    """Unsigned CRC32 of the full name: Pulsar's default bundle hash (Guava ``crc32``)."""
    return zlib.crc32(topic.full_name.encode("utf-8"))


def _format_boundary(value: int) -> str:
    return f"0x{value:08x}"


def _parse_boundary(text: str) -> int:
    """Like Java's ``Long.decode`` for the forms Pulsar writes (``0x...`` hex or decimal)."""
    try:
        value = int(text, 16) if text[:2].lower() == "0x" else int(text, 10)
    except ValueError:
        raise InvalidArgumentError(f"invalid bundle boundary {text!r}: not a number") from None
    if not FULL_LOWER_BOUND <= value <= FULL_UPPER_BOUND:
        raise InvalidArgumentError(
            f"invalid bundle boundary {text!r}: outside 0x00000000..0xffffffff"
        )
    return value


@dataclass(frozen=True, slots=True)
class NamespaceBundle:
    """A hash range ``[lower, upper)`` of a namespace; closed at ``upper`` = 0xffffffff."""

    namespace: NamespaceName
    lower: int
    upper: int

    def __post_init__(self) -> None:
        if not FULL_LOWER_BOUND <= self.lower < self.upper <= FULL_UPPER_BOUND:
            raise InvalidArgumentError(
                f"invalid bundle range {self.range_str}: need 0x00000000 <= lower < upper "
                "<= 0xffffffff"
            )

    @classmethod
    def parse(cls, namespace: NamespaceName, range_str: str) -> NamespaceBundle:
        """Parse ``0x00000000_0x40000000`` (as in ownership paths and admin requests)."""
        lower, sep, upper = range_str.partition("_")
        if not sep:
            raise InvalidArgumentError(
                f"invalid bundle range {range_str!r}: expected <lower>_<upper>"
            )
        return cls(namespace, _parse_boundary(lower), _parse_boundary(upper))

    @property
    def range_str(self) -> str:
        return f"{_format_boundary(self.lower)}_{_format_boundary(self.upper)}"

    def contains(self, hash_value: int) -> bool:
        if self.upper == FULL_UPPER_BOUND:
            return self.lower <= hash_value <= self.upper
        return self.lower <= hash_value < self.upper

    def includes(self, topic: TopicName) -> bool:
        """Whether ``topic`` belongs to this bundle (same namespace, hash in range)."""
        return topic.namespace == self.namespace and self.contains(topic_hash(topic))

    @property
    def can_split(self) -> bool:
        """Pulsar's ``canSplitBundle``: the range must hold more than one hash value."""
        return self.upper - self.lower > 1

    def __str__(self) -> str:
        """``tenant/ns/0x..._0x...``, Pulsar's bundle key."""
        return f"{self.namespace}/{self.range_str}"


class NamespaceBundles:
    """The bundles of one namespace: consecutive ranges covering 0x00000000..0xffffffff."""

    def __init__(self, namespace: NamespaceName, boundaries: Sequence[int]) -> None:
        if len(boundaries) < 2:
            raise InvalidArgumentError(
                f"bundles of {namespace}: need at least 2 boundaries, got {len(boundaries)}"
            )
        if boundaries[0] != FULL_LOWER_BOUND or boundaries[-1] != FULL_UPPER_BOUND:
            raise InvalidArgumentError(
                f"bundles of {namespace}: boundaries must start at 0x00000000 and end at "
                f"0xffffffff, got {_format_boundary(boundaries[0])}.."
                f"{_format_boundary(boundaries[-1])}"
            )
        if any(a >= b for a, b in pairwise(boundaries)):
            raise InvalidArgumentError(
                f"bundles of {namespace}: boundaries must be strictly increasing"
            )
        self.namespace = namespace
        self.boundaries: tuple[int, ...] = tuple(boundaries)
        self.bundles: tuple[NamespaceBundle, ...] = tuple(
            NamespaceBundle(namespace, lo, hi) for lo, hi in pairwise(self.boundaries)
        )

    @classmethod
    def with_count(
        cls, namespace: NamespaceName, num_bundles: int = DEFAULT_NUMBER_OF_BUNDLES
    ) -> NamespaceBundles:
        """Evenly sized bundles, computed as Pulsar's ``getBundles(int numBundles)``."""
        if not 0 < num_bundles <= FULL_UPPER_BOUND:
            raise InvalidArgumentError(
                f"invalid number of bundles {num_bundles}: must be in 1..{FULL_UPPER_BOUND}"
            )
        seg_size = (1 << 32) // num_bundles
        inner = [seg_size * i for i in range(1, num_bundles)]
        return cls(namespace, [FULL_LOWER_BOUND, *inner, FULL_UPPER_BOUND])

    @classmethod
    def parse(cls, namespace: NamespaceName, boundaries: Iterable[str]) -> NamespaceBundles:
        """From the ``0x%08x`` strings stored in namespace policies (``BundlesData``)."""
        return cls(namespace, [_parse_boundary(b) for b in boundaries])

    @property
    def boundary_strings(self) -> list[str]:
        """The boundaries as Pulsar stores them in policies."""
        return [_format_boundary(b) for b in self.boundaries]

    def bundle_for_hash(self, hash_value: int) -> NamespaceBundle:
        if not FULL_LOWER_BOUND <= hash_value <= FULL_UPPER_BOUND:
            raise ValueError(f"hash {hash_value} is outside the 32-bit range")
        # Binary search as Pulsar's getBundle; 0xffffffff falls in the last (closed) bundle.
        index = bisect_right(self.boundaries, hash_value) - 1
        return self.bundles[min(index, len(self.bundles) - 1)]

    def bundle_for(self, topic: TopicName) -> NamespaceBundle:
        """The bundle owning ``topic``: by the CRC32 of its full name."""
        if topic.namespace != self.namespace:
            raise InvalidArgumentError(f"topic {topic} is not in namespace {self.namespace}")
        return self.bundle_for_hash(topic_hash(topic))

    def split_at(self, bundle: NamespaceBundle, boundaries: Iterable[int]) -> NamespaceBundles:
        """Split ``bundle`` at each of ``boundaries`` (at least one, each inside it): the
        namespace's new bundles, where ``bundle`` is replaced by len(boundaries) + 1 parts."""
        if bundle not in self.bundles:
            raise InvalidArgumentError(f"bundle {bundle} is not one of the bundles of {self}")
        if not bundle.can_split:
            raise InvalidArgumentError(f"bundle {bundle} can't be split further")
        inner = sorted(set(boundaries))
        if not inner:
            raise InvalidArgumentError(f"no boundary to split bundle {bundle} at")
        for boundary in inner:
            if not bundle.lower < boundary < bundle.upper:
                raise InvalidArgumentError(
                    f"split boundary {_format_boundary(boundary)} must be inside bundle {bundle}"
                )
        return NamespaceBundles(self.namespace, sorted({*self.boundaries, *inner}))

    def __len__(self) -> int:
        return len(self.bundles)

    def __iter__(self) -> Iterator[NamespaceBundle]:
        return iter(self.bundles)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NamespaceBundles):
            return NotImplemented
        return (self.namespace, self.boundaries) == (other.namespace, other.boundaries)

    def __hash__(self) -> int:
        return hash((self.namespace, self.boundaries))

    def __repr__(self) -> str:
        return f"NamespaceBundles({self.namespace}, {self.boundary_strings})"

    def __str__(self) -> str:
        return f"{self.namespace}{self.boundary_strings}"
