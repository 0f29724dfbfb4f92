"""Pulsar's DistributedIdGenerator: ids unique across the brokers of a cluster.

At start each broker takes a sequential node under a shared path (ephemeral, as Pulsar's
CoordinationService.getNextCounterValue): its number is the broker's instance id, never given
to another broker of the cluster, nor again by a store whose counters persist (the embedded
store's do, so `standalone` names stay unique across restarts). Ids are then
`<prefix>-<instance>-<counter>` with a local counter, so generating one costs no round trip.
"""

from __future__ import annotations

import itertools

from pulsar_grpc.broker.metadata import CreateOption, MetadataStore

__all__ = ["PRODUCER_NAME_PATH", "DistributedIdGenerator"]

# Pulsar's BrokerService.PRODUCER_NAME_GENERATOR_PATH.
PRODUCER_NAME_PATH = "/counters/producer-name"


class DistributedIdGenerator:
    """Ids `<prefix>-<instance>-<n>`; build with :meth:`create`."""

    def __init__(self, prefix: str, instance: int) -> None:
        self.prefix = prefix
        self.instance = instance
        self._counter = itertools.count()

    @classmethod
    async def create(cls, store: MetadataStore, path: str, prefix: str) -> DistributedIdGenerator:
        """Take this instance's number from a sequential node under `path`."""
        node = await store.put_sequential(f"{path}/-", b"", CreateOption.EPHEMERAL)
        return cls(prefix, int(node.rsplit("/", 1)[1].lstrip("-")))

    def next_id(self) -> str:
        return f"{self.prefix}-{self.instance}-{next(self._counter)}"
