"""The names the SDK puts on the wire as call metadata, and the trailer keys it reads back:
the SDK's one home for them.

The SDK may not import the server's modules (tests/unit/test_layering.py), so this is a
hand-kept copy of interceptors/headers.py (the call parameters) and handler/errors.py (the
trailer keys); tests/unit/test_wire_copies.py ties each name here to its source, so a name
that drifts fails there rather than at a broker that ignores it. The proto's header comment
(protos/pulsargrpc/v1/pulsar.proto) says what each one means.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from enum import StrEnum

# Credentials: gRPC's standard header, not one of the contract's x-pulsar-* parameters.
AUTHORIZATION = "authorization"


class Header(StrEnum):
    """Every ``x-pulsar-*`` call parameter the SDK sends (a subset of the server's)."""

    TOPIC = "x-pulsar-topic"
    LISTENER_NAME = "x-pulsar-listenername"
    # PIP-1: on calls through a proxy, the broker the proxy should forward them to.
    PROXY_TO_BROKER_URL = "x-pulsar-proxy-to-broker-url"
    METADATA = "x-pulsar-metadata"  # a producer's or consumer's properties, as JSON
    SCHEMA = "x-pulsar-schema-bin"
    SCHEMA_VERSION = "x-pulsar-schema-version-bin"
    # Produce
    PRODUCER_NAME = "x-pulsar-producer-name"
    GROUPED_RECEIPTS = "x-pulsar-grouped-receipts"
    PRODUCER_ACCESS_MODE = "x-pulsar-producer-access-mode"
    PRODUCER_TOPIC_EPOCH = "x-pulsar-producer-topic-epoch"
    # Consume
    SUBSCRIPTION = "x-pulsar-subscription"
    SUBSCRIPTION_TYPE = "x-pulsar-subscription-type"
    CONSUMER_NAME = "x-pulsar-consumer-name"
    INITIAL_POSITION = "x-pulsar-initial-position"
    PRIORITY_LEVEL = "x-pulsar-priority-level"
    DURABLE = "x-pulsar-durable"
    START_MESSAGE_ID = "x-pulsar-start-message-id"
    START_MESSAGE_ID_INCLUSIVE = "x-pulsar-start-message-id-inclusive"
    ACK_TIMEOUT_MS = "x-pulsar-ack-timeout-ms"
    NEGATIVE_ACK_DELAY_MS = "x-pulsar-negative-ack-delay-ms"
    MAX_REDELIVER_COUNT = "x-pulsar-max-redeliver-count"
    DEAD_LETTER_TOPIC = "x-pulsar-dead-letter-topic"
    DEAD_LETTER_INITIAL_SUBSCRIPTION = "x-pulsar-dead-letter-initial-subscription"
    # Java's MultiplierRedeliveryBackoff for nacks and for ack timeouts: any one of a
    # group's three turns that backoff on (the others take the Java builder's defaults).
    NEGATIVE_ACK_BACKOFF_MIN_DELAY_MS = "x-pulsar-negative-ack-backoff-min-delay-ms"
    NEGATIVE_ACK_BACKOFF_MAX_DELAY_MS = "x-pulsar-negative-ack-backoff-max-delay-ms"
    NEGATIVE_ACK_BACKOFF_MULTIPLIER = "x-pulsar-negative-ack-backoff-multiplier"
    ACK_TIMEOUT_BACKOFF_MIN_DELAY_MS = "x-pulsar-ack-timeout-backoff-min-delay-ms"
    ACK_TIMEOUT_BACKOFF_MAX_DELAY_MS = "x-pulsar-ack-timeout-backoff-max-delay-ms"
    ACK_TIMEOUT_BACKOFF_MULTIPLIER = "x-pulsar-ack-timeout-backoff-multiplier"
    KEY_SHARED_MODE = "x-pulsar-key-shared-mode"
    KEY_SHARED_RANGES = "x-pulsar-key-shared-ranges"
    KEY_SHARED_ALLOW_OUT_OF_ORDER = "x-pulsar-key-shared-allow-out-of-order"


class Trailer(StrEnum):
    """The trailing metadata keys the SDK reads from a failed call (docs/protocol.md)."""

    # Pulsar's ServerError code: more specific than the gRPC status, so it wins.
    ERROR_CODE = "pulsar-error-code"
    # A call refused because another broker owns the topic names the owner's gRPC addresses:
    # the client looks the topic up again at once instead of backing off.
    OWNER_URL = "pulsar-owner-url"
    OWNER_URL_TLS = "pulsar-owner-url-tls"


def metadata_header(properties: Mapping[str, str] | None) -> str | None:
    """The x-pulsar-metadata value of a producer's or consumer's ``properties`` (pulsar-client's
    dict of strings): a JSON object, ASCII so that it travels as a text header; None for none.

    >>> metadata_header({"app": "orders"})
    '{"app":"orders"}'
    """
    if not properties:
        return None
    if not isinstance(properties, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise ValueError("properties must be a dict of str to str")
    return json.dumps(dict(properties), separators=(",", ":"), ensure_ascii=True)
