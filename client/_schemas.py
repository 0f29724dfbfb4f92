"""Schemas on the wire: what a producer or consumer declares when it opens its stream, and
how a consumer turns each message's payload into a value with the schema version it was
written with (docs/protocol.md, "Schemas").

A definition small enough for call metadata travels in ``x-pulsar-schema-bin`` (the
serialized Schema); a larger one is registered first with GetOrCreateSchema and the stream
opens with the version it answered, in ``x-pulsar-schema-version-bin``.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from pulsargrpc.v1 import pulsar_pb2 as pb

from ..schema import Schema, SchemaInfo, SchemaSerializationError, SchemaType
from ._errors import PulsarException
from ._headers import Header
from ._stream import Params

# Above this a definition is registered first (GetOrCreateSchema) instead of riding in call
# metadata: gRPC's default limit for all of a call's metadata is 8 KiB.
MAX_INLINE_SCHEMA_BYTES = 4096
# Writer versions a consumer keeps decoders for; an evicted one is fetched again if needed.
MAX_CACHED_VERSIONS = 64

_PARTITION = re.compile(r"-partition-\d+$")

Decode = Callable[[bytes], Any]
# GetSchema: a topic's schema at a version (a partition asks for its partitioned topic's).
FetchSchema = Callable[[str, bytes], Awaitable[SchemaInfo]]
# GetOrCreateSchema: the version under which the topic holds a schema.
RegisterSchema = Callable[[pb.Schema], Awaitable[bytes]]


def declared(schema: Schema | None) -> SchemaInfo | None:
    """The definition a handle declares to the broker: none for bytes and AUTO_CONSUME."""
    if schema is None:
        return None
    info = schema.schema_info()
    return None if info.type in (SchemaType.BYTES, SchemaType.AUTO_CONSUME) else info


async def schema_params(schema: Schema | None, register: RegisterSchema) -> Params:
    """The call metadata that declares ``schema`` (empty when it declares nothing)."""
    info = declared(schema)
    if info is None:
        return {}
    message = info.to_proto()
    data = message.SerializeToString()
    if len(data) <= MAX_INLINE_SCHEMA_BYTES:
        return {Header.SCHEMA: data}
    return {Header.SCHEMA_VERSION: await register(message)}


def value_decoder(schema: Schema | None, fetch: FetchSchema) -> ValueDecoder | None:
    """A consumer's decoder: none without a schema or with bytes (values are the payload)."""
    if schema is None or schema.schema_info().type is SchemaType.BYTES:
        return None
    return ValueDecoder(schema, fetch)


class ValueDecoder:
    """A consumer's decoding of values, shared by its streams: for each writer version a
    message carries, its schema (fetched once with GetSchema, per topic) resolved to the
    consumer's own schema (only for a schema that reads the writer's version: Avro,
    AUTO_CONSUME; the others decode every version alike). Decoders are made before the
    messages are queued, so that ``Message.value()`` never waits on the network."""

    def __init__(self, schema: Schema, fetch: FetchSchema) -> None:
        self.schema = schema
        self._fetch = fetch
        self._own = schema.decoder_for(None)
        self._decoders: OrderedDict[tuple[str, bytes], Decode] = OrderedDict()
        # Why a version could not be fetched, for the error its values raise.
        self._failed: OrderedDict[tuple[str, bytes], str] = OrderedDict()

    async def prepare(self, topic: str, entries: Iterable[pb.DeliveredEntry]) -> None:
        """Fetch the writer schemas of ``entries`` not known yet. A failure is not cached:
        the entry's values raise it, and the next entry of that version tries again."""
        if not self.schema.reads_writer_version:
            return
        base = _PARTITION.sub("", topic)
        for version in {e.schema_version for e in entries if e.schema_version}:
            key = (base, version)
            if key in self._decoders:
                self._decoders.move_to_end(key)
                continue
            try:
                writer = await self._fetch(topic, version)
                decode = self.schema.decoder_for(writer)
            except (PulsarException, SchemaSerializationError, ValueError) as exc:
                _bounded_put(self._failed, key, f"{type(exc).__name__}: {exc}")
                continue
            self._failed.pop(key, None)
            _bounded_put(self._decoders, key, decode)

    def for_entry(self, topic: str, entry: pb.DeliveredEntry) -> Decode:
        """How to decode the payloads of ``entry`` (after :meth:`prepare`)."""
        if not entry.schema_version or not self.schema.reads_writer_version:
            return self._own
        key = (_PARTITION.sub("", topic), entry.schema_version)
        decode = self._decoders.get(key)
        if decode is not None:
            return decode
        reason = self._failed.get(key, "not fetched")
        version = int.from_bytes(entry.schema_version, "big")

        def unavailable(_: bytes) -> Any:
            raise SchemaSerializationError(
                f"schema version {version} of {topic} is not available: {reason}"
            )

        return unavailable


def _bounded_put(
    cache: OrderedDict[tuple[str, bytes], Any], key: tuple[str, bytes], value: Any
) -> None:
    cache[key] = value
    cache.move_to_end(key)
    if len(cache) > MAX_CACHED_VERSIONS:
        cache.popitem(last=False)
