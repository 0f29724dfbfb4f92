"""Starting a producer's or consumer's streams: the partition count first, then one stream per
topic or partition, each opened (and reopened) where a fresh lookup says, with its schema
declared, and registered with the client's ownership watch and cluster switch. Split from the
Client, which holds the application-facing calls and their parameters.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from pulsargrpc.v1 import pulsar_pb2 as pb

from ..schema import Schema
from ._calls import BrokerCalls
from ._channels import full_topic_name, partition_indexes, partition_topics
from ._cluster_switch import ClusterSwitch
from ._connection import Backoff, ConnectionHandler, retry_creation
from ._consumer import Consumer
from ._errors import InvalidConfiguration
from ._ownership_watch import OwnershipWatcher
from ._partition_consumer import ConsumerConfig, PartitionConsumer
from ._schemas import schema_params
from ._stream import Connect, Params, StreamCall

__all__ = ["StreamStarter"]


class _Startable(Protocol):
    """A producer's or consumer's stream to one topic or partition."""

    connection: ConnectionHandler

    async def start(self, connect: Connect) -> None: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class StreamStarter:
    """Opens the streams of the client's producers, consumers and readers (one per client)."""

    calls: BrokerCalls
    ownership_watch: OwnershipWatcher
    cluster: ClusterSwitch
    backoff_s: tuple[float, float]
    operation_timeout_s: float

    async def partition_count(self, topic: str) -> int:
        """The topic's partition count (0: not partitioned). The first call of every
        creation: retried while the broker is restarting, within the operation timeout."""
        return await retry_creation(
            lambda: self.calls.partition_count(topic),
            Backoff(*self.backoff_s),
            self.operation_timeout_s,
        )

    async def attach(
        self,
        consumer: Consumer,
        topics: list[str],
        config: ConsumerConfig,
        params: Params,
        partition_counts: list[int] | None = None,
    ) -> None:
        """Start a stream per topic (per partition of a partitioned one) for ``consumer``;
        if any fails, the others are closed and its error raised."""
        if partition_counts is None:
            partition_counts = list(
                await asyncio.gather(*(self.partition_count(t) for t in topics))
            )
        if not config.receiver_queue_size and (config.topic_ids or any(partition_counts)):
            raise InvalidConfiguration(
                "receiver_queue_size=0 needs one non-partitioned topic (as Pulsar's)"
            )
        streams: list[PartitionConsumer] = []
        names: list[str] = []  # as the application spelt them: the calls' x-pulsar-topic
        for name, partitions in zip(topics, partition_counts, strict=True):
            full = full_topic_name(name)
            names += partition_topics(name, partitions)
            streams += [
                consumer.new_stream(t, i)
                for i, t in zip(
                    partition_indexes(partitions), partition_topics(full, partitions), strict=True
                )
            ]
        # Known to the consumer before they start: their first messages may come at once.
        consumer.add_streams(streams)
        try:
            schema = config.values.schema if config.values is not None else None
            await self.start_all(streams, names, "Consume", params, schema)
        except Exception:  # _start_all closed them; cancelled (closing), the consumer will
            consumer.remove_streams(streams)
            raise

    async def _start_one(
        self,
        stream: _Startable,
        topic: str,
        method: str,
        params: Params,
        schema: Schema | None,
    ) -> None:
        """Start ``stream`` with a way to (re)open its ``method`` stream on ``topic``: each
        opening looks the topic up afresh and connects where the answer says. ``schema`` is
        declared on each (registered first if too large for metadata: a version is valid for
        the stream's life)."""
        params = {**params, **await schema_params(schema, partial(self._register_schema, topic))}

        async def connect(overrides: Params) -> StreamCall:
            result, (target, tls) = await self.calls.lookup(topic)
            call: StreamCall = getattr(self.calls.stub(target, tls), method)(
                metadata=self.calls.metadata(topic, {**params, **overrides, **result.route()})
            )
            return call

        await stream.start(connect)
        self.ownership_watch.add(full_topic_name(topic), stream.connection)
        self.cluster.add(stream.connection)

    async def start_all(
        self,
        streams: Sequence[_Startable],
        topics: list[str],
        method: str,
        params: Params,
        schema: Schema | None = None,
    ) -> None:
        """Start one stream per topic (``method``: Produce or Consume) declaring ``schema``;
        if any fails, close the others and raise its error."""
        results = await asyncio.gather(
            *(
                self._start_one(s, t, method, params, schema)
                for s, t in zip(streams, topics, strict=True)
            ),
            return_exceptions=True,
        )
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await asyncio.gather(
                *(s.close() for s, r in zip(streams, results, strict=True) if r is None),
                return_exceptions=True,
            )
            raise errors[0]

    async def _register_schema(self, topic: str, schema: pb.Schema) -> bytes:
        """GetOrCreateSchema: the version under which the topic holds ``schema``."""
        request = pb.GetOrCreateSchemaRequest(topic=topic, schema=schema)
        response = await self.calls.at_owner(topic, "GetOrCreateSchema", request)
        return bytes(response.schema_version)
