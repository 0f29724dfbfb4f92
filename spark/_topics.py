"""Which topic partitions a read covers: topic | topics | topicsPattern -> partition names.

A Spark partition maps to one topic partition (or a slice of it), so everything downstream
works on partition full names (``persistent://t/ns/x-partition-3``, or the topic itself when
it is not partitioned).
"""

from __future__ import annotations

import re

from pulsar_grpc.client import Client

from . import _admin
from ._options import SourceOptions

_PARTITION = re.compile(r"-partition-(\d+)$")


def partition_index(partition_topic: str) -> int:
    """``...-partition-3`` -> 3; -1 for a topic that is not partitioned."""
    match = _PARTITION.search(partition_topic)
    return int(match.group(1)) if match else -1


def base_topic(partition_topic: str) -> str:
    """The topic a partition belongs to (the name itself when not partitioned)."""
    return _PARTITION.sub("", partition_topic)


def full_topic_name(topic: str) -> str:
    """Pulsar's short forms: ``x`` and ``t/ns/x`` name persistent topics."""
    if "://" in topic:
        return topic
    if "/" in topic:
        return f"persistent://{topic}"
    return f"persistent://public/default/{topic}"


def _namespace_of(pattern: str) -> str:
    """``persistent://t/ns/orders-.*`` -> ``t/ns``; a bare pattern means public/default."""
    if "://" not in pattern:
        return "public/default"
    rest = pattern.split("://", 1)[1]
    parts = rest.split("/")
    if len(parts) < 3:
        raise ValueError(f"topicsPattern {pattern!r}: expected persistent://tenant/ns/<regex>")
    return f"{parts[0]}/{parts[1]}"


def match_topics(options: SourceOptions, pattern: str) -> list[str]:
    """Topics of the pattern's namespace whose full name matches the regex (admin HTTP)."""
    if not options.admin_url:
        raise ValueError("topicsPattern needs option admin.url (the broker's http://host:port)")
    namespace = _namespace_of(pattern)
    full_pattern = pattern if "://" in pattern else f"persistent://{namespace}/{pattern}"
    regex = re.compile(full_pattern)
    names = _admin.list_topics(options.admin_url, namespace, options.client)
    # Partitions are listed too: keep base topics; their partitions come from the metadata.
    bases = sorted({base_topic(n) for n in names})
    return [n for n in bases if regex.fullmatch(n)]


async def resolve_partitions(client: Client, options: SourceOptions) -> list[str]:
    """The partition full names the read covers, sorted for stable task order."""
    kind, value = options.read_selector()
    if kind == "topic":
        assert isinstance(value, str)
        topics = [full_topic_name(value)]
    elif kind == "topics":
        topics = [full_topic_name(t) for t in value]
    else:
        assert isinstance(value, str)
        topics = match_topics(options, value)
    out: list[str] = []
    for topic in topics:
        out.extend(await client.get_partitions_for_topic(topic))
    return sorted(set(out), key=lambda n: (base_topic(n), partition_index(n)))
