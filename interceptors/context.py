"""The call context: what interceptors learned about a call, for the servicers to read.

Servicers never read raw headers; they call :func:`current` and get typed parameters that were
validated before any broker work started (PIP-59's "ServerInterceptor populates the Context").
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from pulsar_grpc.broker.ledger import Position
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.schema import Declared
from pulsar_grpc.broker.security.authentication import AuthenticationData
from pulsar_grpc.broker.topics import ProducerAccessMode, SubType
from pulsar_grpc.broker.topics.key_shared_policy import AUTO_SPLIT_IN_ORDER, KeySharedPolicy
from pulsar_grpc.broker.topics.redelivery_backoff import MultiplierRedeliveryBackoff


class ReceiptFraming(StrEnum):
    """How a producer takes its receipts (x-pulsar-grouped-receipts): one per response, as
    every client before it, or several per response when several batches are stored at once."""

    ONE_PER_RESPONSE = "one_per_response"
    GROUPED = "grouped"


@dataclass(slots=True, frozen=True)
class ProducerParams:
    producer_name: str | None
    # The declared schema (x-pulsar-schema-bin, or a version: x-pulsar-schema-version-bin).
    schema: Declared = None
    receipts: ReceiptFraming = ReceiptFraming.ONE_PER_RESPONSE
    access_mode: ProducerAccessMode = ProducerAccessMode.SHARED  # x-pulsar-producer-access-mode
    # x-pulsar-producer-topic-epoch: the epoch a reconnecting producer held the topic under.
    topic_epoch: int | None = None
    # x-pulsar-metadata: the producer's properties (Pulsar's CommandProducer.metadata).
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True, frozen=True)
class ConsumerParams:
    subscription: str
    sub_type: SubType
    consumer_name: str | None
    initial_position: Literal["earliest", "latest"]
    priority_level: int
    durable: bool
    start_message_id: Position | Literal["earliest", "latest"] | None
    start_batch_index: int
    start_inclusive: bool
    ack_timeout_ms: int
    negative_ack_delay_ms: int
    max_redeliver_count: int
    dead_letter_topic: str | None
    dead_letter_initial_subscription: str | None = None
    # x-pulsar-negative-ack-backoff-* and x-pulsar-ack-timeout-backoff-* (None: off).
    negative_ack_backoff: MultiplierRedeliveryBackoff | None = None
    ack_timeout_backoff: MultiplierRedeliveryBackoff | None = None
    schema: Declared = None
    # x-pulsar-key-shared-mode, -ranges and -allow-out-of-order (Key_Shared only).
    key_shared: KeySharedPolicy = AUTO_SPLIT_IN_ORDER
    # x-pulsar-metadata: the consumer's properties (Pulsar's CommandSubscribe.metadata).
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class CallContext:
    peer: str
    topic: TopicName | None = None
    # The listener the client asked for (x-pulsar-listenername), validated.
    listener_name: str | None = None
    # The listener of the bind address the call arrived on (None: a primary address).
    bind_listener: str | None = None
    producer: ProducerParams | None = None
    consumer: ConsumerParams | None = None
    # Who the caller proved to be (authenticationEnabled; None while it is off), how (a
    # provider's method name: "tls", "basic", "token", or "anonymous"), and from what
    # credentials (for authorization to come).
    role: str | None = None
    auth_method: str | None = None
    auth_data: AuthenticationData | None = None
    # When those credentials expire (seconds since the epoch; None: never or not checked):
    # a stream still open then is ended (broker/security/expiry.py).
    auth_expires_at: float | None = None
    # The client a proxy role acts for (x-pulsar-original-principal, PIP-1); authorization
    # decides whether the caller may name one.
    original_principal: str | None = None
    # The client library as its user-agent names it (stats' clientVersion), cut to a bound.
    client_version: str = ""


_current: ContextVar[CallContext] = ContextVar("pulsar_grpc_call_context")


def current() -> CallContext:
    """The context of the call being served (set by the parameters interceptor)."""
    return _current.get()


def current_or_none() -> CallContext | None:
    """The context of the call being served, if an interceptor made one (errors raised before
    any did, or outside a call, have none)."""
    return _current.get(None)


def ensure(peer: str) -> CallContext:
    """The context of this call, created by the first interceptor that runs."""
    ctx = _current.get(None)
    if ctx is None:
        ctx = CallContext(peer)
        _current.set(ctx)
    return ctx
