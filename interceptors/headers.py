"""The call parameters of the wire contract (PIP-59 call metadata), the server side's one home
for their names: the interceptors, the handler and the proxy read them from here, and the SDK
keeps its own copy (client side), tied to this one by tests/unit/test_wire_copies.py.

protos/pulsargrpc/v1/pulsar.proto's header comment says what each one means;
tests/e2e/test_wire_contract.py holds that comment and this list to each other.
"""

from __future__ import annotations

from enum import StrEnum

# Every x-pulsar-* name starts with it; any other name with it is refused as a misspelling.
PREFIX = "x-pulsar-"
# Credentials: not a call parameter of the contract, but gRPC's standard header.
AUTHORIZATION = "authorization"


class Header(StrEnum):
    """Every ``x-pulsar-*`` call parameter (gRPC metadata keys are always lower case)."""

    TOPIC = "x-pulsar-topic"
    LISTENER_NAME = "x-pulsar-listenername"
    # PIP-1: the role of the client a proxy acts for; only a proxyRoles role may send it.
    ORIGINAL_PRINCIPAL = "x-pulsar-original-principal"
    # To a proxy: the broker to forward the call to; a proxy never passes it on.
    PROXY_TO_BROKER_URL = "x-pulsar-proxy-to-broker-url"
    # Produce and Consume: the producer's or consumer's properties (Pulsar's metadata), a JSON
    # object of strings; shown in the topic's stats.
    METADATA = "x-pulsar-metadata"
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
