"""Where to split a bundle: Pulsar's NamespaceBundleSplitAlgorithm, by its names.

- ``range_equally_divide``: the middle of the bundle's hash range;
- ``topic_count_equally_divide``: between the two middle hashes of the bundle's topics, so that
  each half gets half of them (refused for a bundle with fewer than two topics);
- ``specified_positions_divide``: at the positions the request gives (those inside the bundle).

Pure functions of the bundle and what the caller read (its topics, the requested positions):
the namespace service decides what to do with the answer.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.naming import NamespaceBundle, TopicName, topic_hash

__all__ = ["SplitAlgorithm", "split_boundaries"]


class SplitAlgorithm(enum.StrEnum):
    RANGE_EQUALLY_DIVIDE = "range_equally_divide"
    TOPIC_COUNT_EQUALLY_DIVIDE = "topic_count_equally_divide"
    SPECIFIED_POSITIONS_DIVIDE = "specified_positions_divide"

    @classmethod
    def parse(cls, name: str) -> SplitAlgorithm:
        """The algorithm named ``name``; InvalidArgumentError naming the valid ones else."""
        try:
            return cls(name)
        except ValueError:
            raise InvalidArgumentError(
                f"Unsupported namespace bundle split algorithm {name!r}, supported algorithms "
                f"are {[a.value for a in cls]}"
            ) from None


def split_boundaries(
    algorithm: SplitAlgorithm,
    bundle: NamespaceBundle,
    topics: Iterable[TopicName] = (),
    positions: Iterable[int] = (),
) -> list[int]:
    """The boundaries to split ``bundle`` at (sorted, each strictly inside it, at least one).

    ``topics`` are the namespace's topics (those outside the bundle are ignored), used by
    topic_count_equally_divide; ``positions`` are the hashes specified_positions_divide uses.
    InvalidArgumentError when the algorithm finds no boundary (as Pulsar, which then refuses
    the split).
    """
    if not bundle.can_split:
        raise InvalidArgumentError(f"bundle {bundle} can't be split further")
    if algorithm is SplitAlgorithm.RANGE_EQUALLY_DIVIDE:
        found = [bundle.lower + (bundle.upper - bundle.lower) // 2]
    elif algorithm is SplitAlgorithm.TOPIC_COUNT_EQUALLY_DIVIDE:
        hashes = sorted(topic_hash(t) for t in topics if bundle.includes(t))
        if len(hashes) < 2:
            raise InvalidArgumentError(
                f"bundle {bundle} has {len(hashes)} topics: topic_count_equally_divide needs "
                "at least 2"
            )
        # Pulsar's choice: midway between the two middle hashes (the lower of them when the
        # count is odd and the hashes are equal, which the range check below refuses).
        start = hashes[max(len(hashes) // 2 - 1, 0)]
        end = hashes[len(hashes) // 2]
        found = [start + (end - start) // 2]
    else:
        found = list(positions)
    inside = sorted({b for b in found if bundle.lower < b < bundle.upper})
    if not inside:
        raise InvalidArgumentError(f"no valid boundary found in {bundle} to split it")
    return inside
