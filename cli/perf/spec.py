"""What one perf run does: the settings every load generator takes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from pulsar_grpc.client import Client, authentication_from


class ConsumerLatency(StrEnum):
    """What an SDK consumer's latency figures measure."""

    NONE = "none"  # counts only: a backlog drained long after it was written (perf all)
    FROM_PUBLISH_TIME = "publish-time"  # now - the message's publish time (pulsar-perf's)


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """The produce/consume flags of `perf`, resolved (topics named, budget defaulted)."""

    service_url: str
    topics: tuple[str, ...]
    size: int = 100
    batch: int = 100
    messages: int = 0  # over all producers; 0: until the duration is over
    duration: float = 0.0  # 0: until the message count is reached
    rate: float = 0.0  # messages/s over all producers, 0: as fast as possible
    producers: int = 1  # per topic
    consumers: int = 1  # per topic, all on one subscription
    partitions: int = 0  # of each topic; 0: not partitioned
    max_pending: int = 10_000  # per producer: messages sent and not receipted
    batch_delay_ms: float = 1.0
    subscription: str = "perf-sub"
    subscription_type: str = "Exclusive"
    receiver_queue: int = 10_000
    idle_timeout: float = 10.0  # a consumer stops after this long without a message
    initial_position: str = "Earliest"  # of a new subscription (perf all drains a backlog)
    consumer_latency: ConsumerLatency = ConsumerLatency.NONE
    interval: float = 2.0  # seconds between stats lines
    # The credentials and TLS trust of --auth-plugin/--auth-params/--tls-trust-cert-path (or
    # the client.conf), as text: they are parsed where a client is made.
    auth_plugin: str | None = None
    auth_params: str = ""
    tls_trust_cert_path: str | None = None

    def client(self) -> Client:
        """An SDK client for the run's broker, with the run's credentials."""
        return Client(
            self.service_url,
            authentication=authentication_from(self.auth_plugin, self.auth_params),
            tls_trust_certs_file_path=self.tls_trust_cert_path,
        )

    def authorization(self) -> tuple[tuple[str, str], ...]:
        """The ``authorization`` metadata a hand-driven stream sends (none without
        credentials)."""
        authentication = authentication_from(self.auth_plugin, self.auth_params)
        header = authentication.authorization() if authentication is not None else None
        return (("authorization", header),) if header else ()


def payload_of(size: int) -> bytes:
    """Incompressible bytes, so nothing on the path gets an unfair shortcut."""
    return random.Random(size).randbytes(size)


def chunk_of(spec: LoadSpec, streams: int) -> int:
    """Messages sent back to back, without yielding to the loop: a batch when unlimited,
    ~1 ms worth when paced (``streams`` producers share the rate). Batches then hold whole
    chunks: a full batch is one chunk, and the SDK's batch timer fires only between chunks."""
    if spec.rate <= 0:
        return spec.batch
    return max(1, min(spec.batch, int(spec.rate / streams / 1000)))
