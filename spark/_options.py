"""Typed options of the ``pulsar-grpc`` source and sink, parsed once with clear errors.

Spark hands options over as a case-insensitive ``str -> str`` mapping; everything below reads
them through :class:`SourceOptions` so that a typo in a number fails at planning time on the
driver, not halfway through a task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pulsar_grpc.client import Client


def _int(options: Mapping[str, str], name: str, default: int) -> int:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"option {name} must be an integer, got {raw!r}") from None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None or raw == "":
        return default
    lowered = str(raw).strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"option {name} must be true or false, got {raw!r}")


@dataclass(frozen=True)
class ClientOptions:
    """How to reach the broker: what :class:`client.Client` takes, picklable for executors."""

    service_url: str
    listener_name: str | None = None
    tls_trust_certs_file_path: str | None = None
    tls_cert_file_path: str | None = None
    tls_key_file_path: str | None = None
    tls_server_name: str | None = None
    auth_token: str | None = None
    operation_timeout_ms: int = 30000

    def client(self) -> Client:
        """A new asyncio client; call inside the event loop that will use it."""
        return Client(
            self.service_url,
            self.listener_name,
            tls_trust_certs_file_path=self.tls_trust_certs_file_path,
            tls_cert_file_path=self.tls_cert_file_path,
            tls_key_file_path=self.tls_key_file_path,
            tls_server_name=self.tls_server_name,
            auth_token=self.auth_token,
            operation_timeout_ms=self.operation_timeout_ms,
        )


@dataclass(frozen=True)
class SourceOptions:
    """Every option of the source and the sink (see docs/spark.md for the table)."""

    client: ClientOptions
    admin_url: str | None = None
    topic: str | None = None
    topics: tuple[str, ...] = ()
    topics_pattern: str | None = None
    starting_offsets: str | None = None
    ending_offsets: str = "latest"
    fail_on_data_loss: bool = True
    max_messages_per_trigger: int = 0
    entries_per_split: int = 2000
    receiver_queue_size: int = 5000
    poll_timeout_ms: int = 30000
    latest_idle_ms: int = 300
    arrow_batch_size: int = 10000
    batching_max_messages: int = 1000
    batching_max_publish_delay_ms: int = 10
    max_pending_messages: int = 10000
    send_timeout_ms: int = 30000

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's option map; raise ValueError naming the bad option."""
        service_url = options.get("service.url")
        if not service_url:
            raise ValueError("option service.url is required (grpc://host:port or grpc+ssl://)")
        client = ClientOptions(
            service_url=service_url,
            listener_name=options.get("listenerName") or None,
            tls_trust_certs_file_path=options.get("tlsTrustCertsFilePath") or None,
            tls_cert_file_path=options.get("tlsCertFilePath") or None,
            tls_key_file_path=options.get("tlsKeyFilePath") or None,
            tls_server_name=options.get("tlsServerName") or None,
            auth_token=options.get("authToken") or None,
            operation_timeout_ms=_int(options, "operationTimeoutMs", 30000),
        )
        topics = tuple(t.strip() for t in (options.get("topics") or "").split(",") if t.strip())
        return cls(
            client=client,
            admin_url=(options.get("admin.url") or "").rstrip("/") or None,
            topic=options.get("topic") or None,
            topics=topics,
            topics_pattern=options.get("topicsPattern") or None,
            starting_offsets=options.get("startingOffsets") or None,
            ending_offsets=options.get("endingOffsets") or "latest",
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            max_messages_per_trigger=_int(options, "maxMessagesPerTrigger", 0),
            entries_per_split=_int(options, "entriesPerSplit", 2000),
            receiver_queue_size=_int(options, "receiverQueueSize", 5000),
            poll_timeout_ms=_int(options, "pollTimeoutMs", 30000),
            latest_idle_ms=_int(options, "latestIdleMs", 300),
            arrow_batch_size=_int(options, "arrowBatchSize", 10000),
            batching_max_messages=_int(options, "batchingMaxMessages", 1000),
            batching_max_publish_delay_ms=_int(options, "batchingMaxPublishDelayMs", 10),
            max_pending_messages=_int(options, "maxPendingMessages", 10000),
            send_timeout_ms=_int(options, "sendTimeoutMs", 30000),
        )

    def read_selector(self) -> tuple[str, str | tuple[str, ...]]:
        """Exactly one of topic / topics / topicsPattern, as (kind, value)."""
        given = [
            (k, v)
            for k, v in (
                ("topic", self.topic),
                ("topics", self.topics),
                ("topicsPattern", self.topics_pattern),
            )
            if v
        ]
        if len(given) != 1:
            raise ValueError("set exactly one of the options topic, topics, topicsPattern")
        kind, value = given[0]
        assert value is not None
        return kind, value
