"""How many partitions a partitioned topic may have: Pulsar's maxNumPartitionsPerPartitionedTopic
(0 = no limit of the operator's, Pulsar's default) under this broker's safety ceiling.

Why a ceiling although Pulsar has none: a partition is only a number in the topic's metadata
when it is created, but every call on the whole topic then walks its partitions on the event
loop that all clients share. At 10,000 partitions a stats request answered 6 MB and held every
other client 3.6 s, a forced delete took 46 s, and 10**9 partitions (accepted before) made any
such call allocate a billion names; at 1,000 the same stats held them 34 ms. So no request may
declare more than :data:`PARTITIONS_CEILING`, whatever the configuration says, and a
configuration asking for more is refused at load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pulsar_grpc.broker.errors import NotAcceptableError

if TYPE_CHECKING:
    from pulsar_grpc.broker.service_configuration import ServiceConfiguration

__all__ = ["PARTITIONS_CEILING", "check_partitions", "max_partitions"]

PARTITIONS_CEILING = 1_000


def max_partitions(config: ServiceConfiguration) -> int:
    """The most partitions a topic may be created or updated with on this broker."""
    configured = config.maxNumPartitionsPerPartitionedTopic
    return configured if configured > 0 else PARTITIONS_CEILING


def check_partitions(limit: int, partitions: int) -> None:
    """Pulsar's refusals (406, its reasons) of a count below 1 or over ``limit`` (the
    :func:`max_partitions` in effect), made before any metadata is touched, as
    PersistentTopicsBase does."""
    if partitions < 1:
        raise NotAcceptableError("Number of partitions should be more than 0")
    if partitions > limit:
        raise NotAcceptableError(f"Number of partitions should be less than or equal to {limit}")
