"""Turns call metadata into a validated :class:`CallContext` (PIP-59's parameter interceptor).

Missing or malformed parameters end the call with INVALID_ARGUMENT (and Pulsar's error code)
before the servicer runs, so the broker never sees a half-specified producer or consumer. So
does any ``x-pulsar-*`` header this broker does not know: a misspelt optional parameter
(``x-pulsar-subscripton-type``) would otherwise fall back to its default without a word.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from grpc import aio

from pulsar_grpc.broker.errors import (
    BrokerError,
    InvalidArgumentError,
    InvalidSchemaDataError,
    InvalidTopicNameError,
)
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.naming import TopicName, check_subscription_name
from pulsar_grpc.broker.schema import (
    Declared,
    SchemaInfo,
    SchemaType,
    decode_version,
    new_schema,
)
from pulsar_grpc.broker.topics import ProducerAccessMode, SubType
from pulsar_grpc.broker.topics.key_shared_policy import (
    AUTO_SPLIT_IN_ORDER,
    RANGE_SIZE,
    DeliveryOrder,
    KeySharedMode,
    KeySharedPolicy,
)
from pulsar_grpc.broker.topics.redelivery_backoff import (
    DEFAULT_MAX_DELAY_MS,
    DEFAULT_MIN_DELAY_MS,
    DEFAULT_MULTIPLIER,
    MultiplierRedeliveryBackoff,
)
from pulsar_grpc.interceptors._wrap import Prepare, PreparingInterceptor
from pulsar_grpc.interceptors.context import (
    CallContext,
    ConsumerParams,
    ProducerParams,
    ReceiptFraming,
)
from pulsar_grpc.interceptors.headers import PREFIX, Header
from pulsargrpc.v1 import pulsar_pb2 as pb

SERVICE = "/pulsargrpc.v1.PulsarService/"
# Every call parameter of the wire contract (protos/pulsargrpc/v1/pulsar.proto lists them with
# their meaning). Any call may carry any of them: the SDK sends the topic and listener on every
# call, and a parameter of another call kind is not a typo.
KNOWN_PARAMETERS = frozenset(Header)
# Pulsar's clients send these as Java ints and longs; larger values are refused here rather
# than reaching timers and counters the broker would then have to defend.
INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1  # MessageId.batch_index is an int32, as Pulsar's
MIN_ACK_TIMEOUT_MS = 1000
# An integer as a header carries it: ASCII digits, maybe a minus sign, nothing else.
_DECIMAL = re.compile(r"-?[0-9]+")
# A multiplier as a header carries it: a plain decimal fraction (float() would also take
# "inf", "nan" and "1_0").
_FRACTION = re.compile(r"[0-9]{1,10}(\.[0-9]{1,10})?")
# x-pulsar-key-shared-ranges: "start-end" pairs of key hashes, comma-separated.
_HASH_RANGE = re.compile(r"([0-9]{1,5})-([0-9]{1,5})")


class ParametersInterceptor(PreparingInterceptor):
    """Parses the parameters of Produce and Consume calls into the call context."""

    def preparer(
        self, method: str, headers: dict[str, str], binary: dict[str, bytes]
    ) -> Prepare | None:
        if not method.startswith(SERVICE):
            return None
        return _preparer(method[len(SERVICE) :], headers, binary)


# A client controls its user-agent: what the stats keep of it is bounded.
_MAX_CLIENT_VERSION = 256


def _preparer(method: str, headers: Mapping[str, str], binary: Mapping[str, bytes]) -> Prepare:
    """Parse now (once per call), fill the context when the call runs. A declared schema is
    parsed only then: the call runs the authentication interceptor's step first, so a caller
    that has not proved who it is cannot make the broker parse (and validate) a definition."""
    try:
        _check_known([*headers, *binary])
        topic = _topic(headers) if method in ("Produce", "Consume") else None
        producer = _producer(headers) if method == "Produce" else None
        consumer = _consumer(headers) if method == "Consume" else None
    except BrokerError as exc:
        error = exc

        async def refuse(ctx: CallContext, _: aio.ServicerContext) -> None:
            raise error

        return refuse

    client_version = headers.get("user-agent", "")[:_MAX_CLIENT_VERSION]

    async def fill(ctx: CallContext, _: aio.ServicerContext) -> None:
        declared = _declared(binary) if topic is not None else None
        ctx.topic = topic
        ctx.producer = producer if producer is None else replace(producer, schema=declared)
        ctx.consumer = consumer if consumer is None else replace(consumer, schema=declared)
        ctx.client_version = client_version

    return fill


def _check_known(names: list[str]) -> None:
    unknown = sorted(k for k in names if k.startswith(PREFIX) and k not in KNOWN_PARAMETERS)
    if unknown:
        # The likely meant names first: the whole list is longer than an error message may be.
        near = difflib.get_close_matches(unknown[0][:60], KNOWN_PARAMETERS, n=3)
        rest = sorted(KNOWN_PARAMETERS.difference(near))
        raise InvalidArgumentError(
            f"unknown call parameter {', '.join(h[:60] for h in unknown[:5])} "
            f"(known: {', '.join([*near, *rest])})"
        )


def _topic(headers: Mapping[str, str]) -> TopicName:
    raw = headers.get(Header.TOPIC)
    if not raw:
        raise InvalidTopicNameError(f"missing call parameter {Header.TOPIC}")
    return TopicName.get(raw)


def _int(
    headers: Mapping[str, str], key: str, default: int, minimum: int = 0, maximum: int = LONG_MAX
) -> int:
    raw = headers.get(key)
    if raw is None or raw == "":
        return default
    # Plain decimal digits only: Python's int() would also take " 5", "+5" and "5_000".
    value = int(raw) if len(raw) <= 20 and _DECIMAL.fullmatch(raw) else None
    if value is None:
        raise InvalidArgumentError(f"{key}: '{raw[:40]}' is not an integer up to {maximum}")
    if not minimum <= value <= maximum:
        raise InvalidArgumentError(f"{key}: {value} is not between {minimum} and {maximum}")
    return value


def _ack_timeout(headers: Mapping[str, str]) -> int:
    """x-pulsar-ack-timeout-ms: 0 (off) or at least MIN_ACK_TIMEOUT_MS, Pulsar's Java client's
    minimum (its C++ and Python clients ask for 10 s): the broker checks timeouts every quarter
    of the shortest one, so a 1 ms timeout would have it tick every 0.25 ms."""
    value = _int(headers, Header.ACK_TIMEOUT_MS, 0)
    if 0 < value < MIN_ACK_TIMEOUT_MS:
        raise InvalidArgumentError(
            f"{Header.ACK_TIMEOUT_MS}: {value} is under {MIN_ACK_TIMEOUT_MS}, Pulsar's minimum "
            "ack timeout (0 turns it off)"
        )
    return value


def _bool(headers: Mapping[str, str], key: str, default: bool) -> bool:
    raw = headers.get(key)
    if raw is None or raw == "":
        return default
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    raise InvalidArgumentError(f"{key}: '{raw}' is not true or false")


def _choice(headers: Mapping[str, str], key: str, choices: dict[str, Any], default: str) -> Any:
    raw = headers.get(key) or default
    for name, value in choices.items():
        if raw.lower() == name.lower():
            return value
    raise InvalidArgumentError(f"{key}: '{raw}' is not one of {', '.join(choices)}")


def _producer(headers: Mapping[str, str]) -> ProducerParams:
    grouped = _bool(headers, Header.GROUPED_RECEIPTS, False)
    return ProducerParams(
        producer_name=headers.get(Header.PRODUCER_NAME) or None,
        receipts=ReceiptFraming.GROUPED if grouped else ReceiptFraming.ONE_PER_RESPONSE,
        access_mode=_choice(
            headers,
            Header.PRODUCER_ACCESS_MODE,
            {m.value: m for m in ProducerAccessMode},
            ProducerAccessMode.SHARED.value,
        ),
        topic_epoch=_int(headers, Header.PRODUCER_TOPIC_EPOCH, -1, minimum=0)
        if headers.get(Header.PRODUCER_TOPIC_EPOCH)
        else None,
        metadata=_metadata(headers),
    )


def _metadata(headers: Mapping[str, str]) -> dict[str, str]:
    """x-pulsar-metadata: a JSON object whose values are strings (Pulsar's metadata of a
    producer or consumer, shown in the topic's stats); absent or empty: none."""
    raw = headers.get(Header.METADATA)
    if not raw:
        return {}
    try:
        value = json_value(raw)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidArgumentError(f"{Header.METADATA}: not a JSON object of strings: {raw[:80]!r}")
    return value


def schema_from_wire(schema: pb.Schema) -> SchemaInfo | None:
    """The broker's form of a wire Schema, validated; None for SCHEMA_TYPE_UNSPECIFIED (bytes,
    no schema)."""
    if schema.type == pb.SCHEMA_TYPE_UNSPECIFIED:
        return None
    try:
        type_ = SchemaType(schema.type)
    except ValueError:
        raise InvalidSchemaDataError(f"unknown schema type {schema.type}") from None
    return new_schema(type_, schema.schema_data, dict(schema.properties))


def _declared(binary: Mapping[str, bytes]) -> Declared:
    """The schema a Produce or Consume call declares: x-pulsar-schema-bin (a serialized
    Schema) or x-pulsar-schema-version-bin (a registered version), not both."""
    raw, version = binary.get(Header.SCHEMA), binary.get(Header.SCHEMA_VERSION)
    if raw is not None and version is not None:
        raise InvalidArgumentError(
            f"{Header.SCHEMA} and {Header.SCHEMA_VERSION} exclude each other"
        )
    if version is not None:
        return decode_version(version)
    if raw is None:
        return None
    try:
        schema = pb.Schema.FromString(raw)
    except Exception as exc:  # protobuf's DecodeError
        raise InvalidSchemaDataError(f"{Header.SCHEMA} is not a serialized Schema: {exc}") from None
    return schema_from_wire(schema)


def parse_message_id(raw: str) -> tuple[Position | Literal["earliest", "latest"], int]:
    """The entry and batch index of ``ledger:entry[:partition[:batch]]`` (Pulsar's
    ``MessageId.toString()``), ``earliest`` or ``latest``. The form clients printed before,
    ``ledger:entry:batch:partition``, is read where it cannot be mistaken for Pulsar's: four
    parts ending in -1 after a batch index (the SDK's ``parse_message_id_text`` has the same
    rule). The partition is not needed: the stream is on one partition already."""
    if raw.lower() in ("earliest", "latest"):
        return raw.lower(), -1  # type: ignore[return-value]
    parts = raw.split(":")
    # At most 20 characters a number (a long's digits): int() of thousands of digits costs
    # quadratic time, and Python refuses it past 4,300 with an error that is not the client's.
    numbers = (
        [int(p) for p in parts]
        if all(len(p) <= 20 and _DECIMAL.fullmatch(p) for p in parts)
        else []
    )
    if (
        not 2 <= len(numbers) <= 4
        or numbers[0] < 0
        or numbers[1] < 0
        or not all(-1 <= n <= INT32_MAX for n in numbers[2:])  # partition, batch: int32s
    ):
        raise InvalidArgumentError(
            f"{Header.START_MESSAGE_ID}: '{raw}' is not ledger:entry[:partition[:batch]], "
            "earliest or latest"
        )
    batch = numbers[3] if len(numbers) == 4 else -1
    if batch == -1 and len(numbers) == 4 and numbers[2] >= 0:
        batch = numbers[2]  # the earlier ledger:entry:batch:-1
    return Position(numbers[0], numbers[1]), batch


def _consumer(headers: Mapping[str, str]) -> ConsumerParams:
    durable = _bool(headers, Header.DURABLE, True)
    subscription = headers.get(Header.SUBSCRIPTION) or ""
    if not subscription:
        if durable:
            raise InvalidArgumentError(f"missing call parameter {Header.SUBSCRIPTION}")
    else:
        check_subscription_name(subscription)
    start_raw = headers.get(Header.START_MESSAGE_ID)
    start: Position | Literal["earliest", "latest"] | None = None
    batch = -1
    if start_raw:
        if durable:
            raise InvalidArgumentError(
                f"{Header.START_MESSAGE_ID} is for readers: set {Header.DURABLE}=false"
            )
        start, batch = parse_message_id(start_raw)
    max_redeliver = _int(headers, Header.MAX_REDELIVER_COUNT, 0, maximum=INT_MAX)
    sub_type = _choice(
        headers, Header.SUBSCRIPTION_TYPE, {t.value: t for t in SubType}, "Exclusive"
    )
    return ConsumerParams(
        subscription=subscription,
        sub_type=sub_type,
        consumer_name=headers.get(Header.CONSUMER_NAME) or None,
        initial_position=_choice(
            headers,
            Header.INITIAL_POSITION,
            {"Latest": "latest", "Earliest": "earliest"},
            "Latest",
        ),
        priority_level=_int(headers, Header.PRIORITY_LEVEL, 0, maximum=INT_MAX),
        durable=durable,
        start_message_id=start,
        start_batch_index=batch,
        start_inclusive=_bool(headers, Header.START_MESSAGE_ID_INCLUSIVE, False),
        ack_timeout_ms=_ack_timeout(headers),
        negative_ack_delay_ms=_int(headers, Header.NEGATIVE_ACK_DELAY_MS, 60_000),
        max_redeliver_count=max_redeliver,
        dead_letter_topic=str(TopicName.get(headers[Header.DEAD_LETTER_TOPIC]))
        if headers.get(Header.DEAD_LETTER_TOPIC)
        else None,
        dead_letter_initial_subscription=headers.get(Header.DEAD_LETTER_INITIAL_SUBSCRIPTION)
        or None,
        negative_ack_backoff=_backoff(
            headers,
            Header.NEGATIVE_ACK_BACKOFF_MIN_DELAY_MS,
            Header.NEGATIVE_ACK_BACKOFF_MAX_DELAY_MS,
            Header.NEGATIVE_ACK_BACKOFF_MULTIPLIER,
        ),
        ack_timeout_backoff=_backoff(
            headers,
            Header.ACK_TIMEOUT_BACKOFF_MIN_DELAY_MS,
            Header.ACK_TIMEOUT_BACKOFF_MAX_DELAY_MS,
            Header.ACK_TIMEOUT_BACKOFF_MULTIPLIER,
        ),
        key_shared=_key_shared(headers, sub_type),
        metadata=_metadata(headers),
    )


def _backoff(
    headers: Mapping[str, str], min_key: str, max_key: str, multiplier_key: str
) -> MultiplierRedeliveryBackoff | None:
    """A redelivery backoff (Java's MultiplierRedeliveryBackoff): on when any of its three
    parameters is given, the others taking the Java builder's defaults; refused with the
    builder's own messages where the builder would refuse it."""
    if not any(headers.get(k) for k in (min_key, max_key, multiplier_key)):
        return None
    raw = headers.get(multiplier_key) or ""
    if raw and not _FRACTION.fullmatch(raw):
        raise InvalidArgumentError(f"{multiplier_key}: '{raw[:40]}' is not a decimal number")
    min_delay_ms = _int(headers, min_key, DEFAULT_MIN_DELAY_MS, maximum=INT_MAX)
    max_delay_ms = _int(headers, max_key, DEFAULT_MAX_DELAY_MS, maximum=INT_MAX)
    try:
        return MultiplierRedeliveryBackoff(
            min_delay_ms, max_delay_ms, float(raw) if raw else DEFAULT_MULTIPLIER
        )
    except InvalidArgumentError as exc:
        raise InvalidArgumentError(f"{min_key[: -len('min-delay-ms')]}*: {exc}") from None


def _key_shared(headers: Mapping[str, str], sub_type: SubType) -> KeySharedPolicy:
    """The Key_Shared policy (Pulsar's KeySharedMeta). Its headers on another subscription
    type, or ranges outside Sticky mode, are refused: Pulsar would ignore them, and the
    consumer would not get the keys it asked for. Sticky mode without ranges, and ranges
    that are empty or overlap, are left to the selector, which refuses them as Pulsar's
    broker does (ConsumerAssignError)."""
    key_shared_headers = (
        Header.KEY_SHARED_MODE,
        Header.KEY_SHARED_RANGES,
        Header.KEY_SHARED_ALLOW_OUT_OF_ORDER,
    )
    given = [h for h in key_shared_headers if headers.get(h)]
    if sub_type is not SubType.Key_Shared:
        if given:
            raise InvalidArgumentError(f"{given[0]}: only for Key_Shared subscriptions")
        return AUTO_SPLIT_IN_ORDER
    mode = _choice(
        headers,
        Header.KEY_SHARED_MODE,
        {m.value: m for m in KeySharedMode},
        KeySharedMode.AUTO_SPLIT.value,
    )
    out_of_order = _bool(headers, Header.KEY_SHARED_ALLOW_OUT_OF_ORDER, False)
    raw = headers.get(Header.KEY_SHARED_RANGES) or ""
    if raw and mode is not KeySharedMode.STICKY:
        raise InvalidArgumentError(
            f"{Header.KEY_SHARED_RANGES}: only with {Header.KEY_SHARED_MODE}=Sticky "
            "(AutoSplit assigns the ranges itself)"
        )
    return KeySharedPolicy(
        mode=mode,
        order=DeliveryOrder.OUT_OF_ORDER if out_of_order else DeliveryOrder.IN_ORDER,
        ranges=tuple(_hash_range(part) for part in raw.split(",")) if raw else (),
    )


def _hash_range(part: str) -> tuple[int, int]:
    match = _HASH_RANGE.fullmatch(part)
    bounds = (int(match[1]), int(match[2])) if match else (-1, -1)
    if not all(0 <= b < RANGE_SIZE for b in bounds):
        raise InvalidArgumentError(
            f"{Header.KEY_SHARED_RANGES}: '{part[:40]}' is not start-end, key hashes within "
            f"0..{RANGE_SIZE - 1}"
        )
    return bounds
