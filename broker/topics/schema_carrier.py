"""What the topics layer needs from the schema registry, without importing it: a dead-letter
topic takes the schema each dead-lettered message was written with (Pulsar's client publishes
it there with ``AUTO_PRODUCE_BYTES`` of the message's writer schema, so the dead-letter topic
registers that schema under its own namespace's rules and the copy carries its version there).
The broker service hands the registry in when it builds the topic registry."""

from __future__ import annotations

from typing import Protocol

from pulsar_grpc.broker.naming import TopicName


class SchemaCarrier(Protocol):
    async def carry_schema(self, source: TopicName, version: bytes, target: TopicName) -> bytes:
        """``target``'s version (Pulsar's 8 bytes) of the schema ``source`` holds at
        ``version``, registering it on ``target`` under ``target``'s namespace policies.
        Raises a BrokerError (IncompatibleSchemaError, TopicNotFoundError) when ``target``
        refuses it or ``source`` no longer has it."""
        ...
