"""The client: one gRPC channel per broker address, producers, consumers, readers."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from pulsargrpc.v1 import pulsar_pb2 as pb

from ..schema import Schema, SchemaInfo
from ._arguments import check_types
from ._auth import (
    Authentication,
    AuthenticationTLS,
    AuthenticationToken,
    CredentialRenewal,
)
from ._batching import BatchingType
from ._calls import BrokerCalls
from ._channels import (
    DEFAULT_KEEP_ALIVE_INTERVAL_S,
    LookupResult,
    channel_options,
    full_topic_name,
    partition_indexes,
    partition_topics,
)
from ._cluster_failover import initial_service_info, provider_for
from ._cluster_switch import ClusterSwitch, cluster_pool
from ._compat import ProducerAccessMode, RegexSubscriptionMode, one_of, refuse_unsupported
from ._compression import CompressionType
from ._compression import compression_type as compression_type_of
from ._connection import (
    DEFAULT_INITIAL_BACKOFF_MS,
    DEFAULT_MAX_BACKOFF_MS,
)
from ._consumer import (
    Consumer,
    ConsumerBatchReceivePolicy,
    DeadLetterPolicy,
    InitialPosition,
    MessageListener,
    as_consumer_type,
    as_initial_position,
    subscription_params,
)
from ._crypto import ConsumerCryptoFailureAction, EntryDecryptor, producer_encryptor
from ._crypto_keys import KeyReader
from ._errors import AlreadyClosed, refusal_names
from ._headers import Header, metadata_header
from ._http_lookup import HttpLookup, ssl_context
from ._key_shared import ConsumerKeySharedPolicy
from ._message_id import MessageId, new_message_id
from ._multi_consumer import TopicsPattern, watch_pattern
from ._ownership_watch import OwnershipWatcher
from ._partition_consumer import ConsumerConfig, ConsumerType, MessageQueue
from ._producer import PartitionProducer, Producer, ProducerConfig
from ._reader import Reader
from ._redelivery import MultiplierRedeliveryBackoff, backoff_params
from ._retry import MAX_RECONSUMETIMES, RetryLetter, retry_letter
from ._routing import MessageRouter, PartitionsRoutingMode, Router
from ._schemas import value_decoder
from ._service_info import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from ._starting import StreamStarter
from ._stream import Params

# Lookups answered with Redirect that the client follows before giving up (Pulsar's
# maxLookupRedirects; a redirect loop between brokers ends with a clear error).
DEFAULT_MAX_LOOKUP_REDIRECTS = 3


class Client:
    """Entry point: connects to a broker and creates producers, consumers and readers.

    >>> async with Client("grpc://127.0.0.1:50051") as client:
    ...     producer = await client.create_producer("my-topic")
    ...     await producer.send(b"hello")
    ...     consumer = await client.subscribe("my-topic", "sub", initial_position="earliest")
    ...     msg = await consumer.receive()

    Topics are looked up before a producer, consumer or reader connects (each partition on
    its own): the Lookup RPC goes to the service URL, and the stream opens on the address the
    broker answers — ``grpc_url_tls`` when the service URL is ``grpc+ssl://``, else
    ``grpc_url`` (the other one when only one is answered). A Redirect answer is looked up
    again at the broker it names, at most ``max_lookup_redirects`` times. A web service URL
    (``http://host:8080``, ``https://``), as pulsar-client takes it, looks topics up over the
    broker's REST API instead (client/_http_lookup.py); the streams still open over gRPC.
    ``pulsar://`` and ``pulsar+ssl://`` raise ValueError naming the ``grpc://`` URL to use.

    ``listener_name`` (PIP-95) names the listener whose addresses lookups answer, e.g. the
    external one when the client reaches the cluster through a gateway; it travels in the
    LookupRequest and as ``x-pulsar-listenername`` on every call. Without it the broker
    answers for the listener of the address the client came through.

    TLS: ``Client("grpc+ssl://host:6651", tls_trust_certs_file_path="ca.pem")``, plus
    ``tls_certificate_file_path`` / ``tls_private_key_file_path`` for mutual TLS (the earlier
    names ``tls_cert_file_path`` / ``tls_key_file_path`` still work) and ``tls_server_name`` to
    verify the server's certificate against another name than the address's host. The same
    options apply when a plaintext service URL's lookup answers only a ``grpc+ssl`` address.
    The parameters are pulsar-client's (names, positions, defaults): see docs/pulsar-client.md
    for the few that mean nothing here and the values that cannot be honoured.
    Authentication: ``authentication=AuthenticationToken(token_or_supplier)``,
    ``AuthenticationBasic(user, password)`` (the ``authorization`` header of every call; a
    supplier is asked again for each call and reconnection, and a stream the broker ends
    because its token expired reopens at once with a fresh one) or
    ``AuthenticationTLS(cert_path, key_path)`` (the client certificate on TLS channels).
    ``auth_token`` is short for ``AuthenticationToken(auth_token)``.

    Reconnection: producers, consumers and readers (each partition on its own) survive the
    broker going away: when a stream ends with a retryable error (broker restart, dropped
    connection, topic unloaded: UNAVAILABLE or ServiceNotReady) they look the topic up again
    and reopen it, waiting between attempts from ``initial_backoff_interval_ms`` (100 ms),
    doubling up to ``max_backoff_interval_ms`` (60 s), with jitter. The application sees a
    delay: producers resend what has no receipt yet, consumers resubscribe. Sends fail with
    :class:`~client.Timeout` only after ``send_timeout_millis`` without a receipt.

    Message size: the channels accept messages up to ``max_message_size`` bytes (-1, the
    default: any size), so an entry the broker accepted (up to its maxMessageSize, 5 MB by
    default) is never refused by gRPC's 4 MiB default. With a limit set, a producer refuses a
    larger message with :class:`~client.MessageTooBig` before sending it.

    Creating a producer, consumer or reader retries within ``operation_timeout_ms`` while
    the broker is restarting (connection refused) or says it is not ready (ServiceNotReady,
    e.g. the topic is being unloaded); TLS, credential and topic errors fail at once.

    Cluster failover: ``service_url`` may be pulsar-client's
    ``AutoClusterFailover(ServiceInfo(primary_url), [ServiceInfo(secondary_url)])``, or an
    application's :class:`ServiceInfoProvider`; each :class:`ServiceInfo` carries its cluster's
    ``authentication`` and ``tls_trust_certs_file_path`` (the client's own are refused then).
    When the cluster changes, lookups go to the new one and every producer, consumer and reader
    reconnects there at once (client/_cluster_switch.py); ``client.cluster.current`` is the
    cluster in use.

    Keepalive: while streams are open, each connection is pinged every
    ``keep_alive_interval_seconds`` (0: never), and a ping unanswered within that interval
    (at most 20 s) closes it, so a broker that vanished without closing the connection (a
    host gone, a network dropping packets) is noticed and reconnected instead of waiting
    for TCP to give up. The default is Pulsar's 30 s; the broker accepts pings at any rate
    (see docs/protocol.md, "Staying connected").
    """

    def __init__(
        self,
        service_url: str | AutoClusterFailover | ServiceInfoProvider,
        authentication: Authentication | None = None,
        operation_timeout_seconds: float = 30,
        io_threads: int = 1,
        message_listener_threads: int = 1,
        concurrent_lookup_requests: int = 50000,
        log_conf_file_path: str | None = None,
        stats_interval_in_seconds: int = 600,
        use_tls: bool = False,
        tls_trust_certs_file_path: str | None = None,
        tls_allow_insecure_connection: bool = False,
        tls_validate_hostname: bool = False,
        logger: object = None,
        connection_timeout_ms: int = 10000,
        listener_name: str | None = None,
        tls_private_key_file_path: str | None = None,
        tls_certificate_file_path: str | None = None,
        *,
        tls_cert_file_path: str | None = None,
        tls_key_file_path: str | None = None,
        tls_server_name: str | None = None,
        auth_token: str | None = None,
        operation_timeout_ms: int | None = None,
        max_lookup_redirects: int = DEFAULT_MAX_LOOKUP_REDIRECTS,
        initial_backoff_interval_ms: int = DEFAULT_INITIAL_BACKOFF_MS,
        max_backoff_interval_ms: int = DEFAULT_MAX_BACKOFF_MS,
        max_message_size: int = -1,
        keep_alive_interval_seconds: float = DEFAULT_KEEP_ALIVE_INTERVAL_S,
    ) -> None:
        # pulsar-client's runtime tuning (io_threads, message_listener_threads,
        # concurrent_lookup_requests, log_conf_file_path, stats_interval_in_seconds, logger)
        # has no counterpart on asyncio and gRPC: accepted and ignored. tls_validate_hostname
        # is always on (gRPC checks the name); connection_timeout_ms is covered by
        # operation_timeout_seconds, within which creating a handle retries its connection.
        if auth_token and authentication is not None:
            raise ValueError("auth_token and authentication are two ways of saying the same")
        if auth_token:
            authentication = AuthenticationToken(auth_token)
        provider = provider_for(service_url, authentication, tls_trust_certs_file_path)
        initial = initial_service_info(provider)
        service_url = initial.service_url
        authentication = initial.authentication
        tls_trust_certs_file_path = initial.tls_trust_certs_file_path
        check_types(listener_name=(listener_name, str, True))
        refuse_unsupported(
            "Client",
            tls_allow_insecure_connection=(tls_allow_insecure_connection, False),
            use_tls=(use_tls and not service_url.startswith(("grpc+ssl://", "https://")), False),
        )
        tls_cert_file_path = one_of(
            "tls_certificate_file_path",
            tls_certificate_file_path,
            "tls_cert_file_path",
            tls_cert_file_path,
        )
        tls_key_file_path = one_of(
            "tls_private_key_file_path",
            tls_private_key_file_path,
            "tls_key_file_path",
            tls_key_file_path,
        )
        if operation_timeout_ms is None:
            operation_timeout_ms = round(operation_timeout_seconds * 1000)
        elif operation_timeout_seconds != 30:
            raise ValueError("give operation_timeout_seconds or operation_timeout_ms, not both")
        if keep_alive_interval_seconds < 0:
            raise ValueError("keep_alive_interval_seconds must be >= 0 (0: no keepalive)")
        if not 0 < initial_backoff_interval_ms <= max_backoff_interval_ms:
            raise ValueError(
                "backoff needs 0 < initial_backoff_interval_ms <= max_backoff_interval_ms"
            )
        self._backoff_s = (initial_backoff_interval_ms / 1000, max_backoff_interval_ms / 1000)
        self._max_message_size = max_message_size
        self._renewal = authentication.renewal if authentication else CredentialRenewal.FIXED
        # Mutual TLS of clusters whose ServiceInfo has no AuthenticationTLS (failover).
        pool_for = partial(
            cluster_pool,
            cert_path=tls_cert_file_path,
            key_path=tls_key_file_path,
            options=channel_options(
                max_message_size, initial_backoff_interval_ms, keep_alive_interval_seconds
            ),
            tls_options=(
                [("grpc.ssl_target_name_override", tls_server_name)] if tls_server_name else []
            ),
        )
        if isinstance(authentication, AuthenticationTLS):
            if tls_cert_file_path or tls_key_file_path:
                raise ValueError("AuthenticationTLS and tls_cert_file_path: give one of them")
            tls_cert_file_path = authentication.certificate_path
            tls_key_file_path = authentication.private_key_path
        self._operation_timeout_s = operation_timeout_ms / 1000
        if max_lookup_redirects < 0:
            raise ValueError("max_lookup_redirects must be >= 0")
        if bool(tls_cert_file_path) != bool(tls_key_file_path):
            raise ValueError("tls_cert_file_path and tls_key_file_path go together (mutual TLS)")

        def lookups_for(info: ServiceInfo) -> tuple[str, bool] | HttpLookup:
            """Where a cluster's lookups go: its gRPC service address, or its web service."""
            if not info.web_service:
                return info.target, info.use_tls
            trust = info.tls_trust_certs_file_path
            return HttpLookup(
                info.service_url,
                ssl_context(info.service_url, trust, tls_cert_file_path, tls_key_file_path),
                listener_name,
                info.authentication,
                self._operation_timeout_s,
                max_lookup_redirects,
            )

        self._calls = BrokerCalls(
            lookups_for(initial),
            # Read now: a missing file is the caller's mistake, better reported here than at
            # the first TLS connection (which a plaintext service URL may reach by a lookup).
            pool_for(initial),
            listener_name,
            authentication,
            self._operation_timeout_s,
            max_lookup_redirects,
        )
        # Wakes reconnecting producers and consumers when their topic's bundle moves.
        self.ownership_watch = OwnershipWatcher(
            self._calls,
            None if initial.web_service else (initial.target, initial.use_tls),
            listener_name,
        )
        # Moves everything to another cluster when the provider says so (cluster failover).
        self.cluster = ClusterSwitch(
            provider, initial, self._calls, self.ownership_watch, pool_for, lookups_for
        )
        self._streams = StreamStarter(
            self._calls,
            self.ownership_watch,
            self.cluster,
            self._backoff_s,
            self._operation_timeout_s,
        )
        self._handles: weakref.WeakSet[Producer | Consumer | Reader] = weakref.WeakSet()
        self._shutdown: asyncio.Task[None] | None = None  # closing after shutdown()
        # How to close each consumer (reader) without referring to it, until it is dropped;
        # then the task closing it.
        self._closers: dict[int, Callable[[], Awaitable[None]]] = {}
        self._closer_keys = itertools.count()
        self._closing_dropped: set[asyncio.Task[None]] = set()
        self.cluster.start()

    async def create_producer(
        self,
        topic: str,
        producer_name: str | None = None,
        schema: Schema | None = None,
        initial_sequence_id: int | None = None,
        send_timeout_millis: int = 30000,
        compression_type: CompressionType | str = CompressionType.NONE,
        max_pending_messages: int = 1000,
        max_pending_messages_across_partitions: int = 50000,
        block_if_queue_full: bool = False,
        batching_enabled: bool = True,
        batching_max_messages: int = 1000,
        batching_max_allowed_size_in_bytes: int = 128 * 1024,
        batching_max_publish_delay_ms: float = 10,
        chunking_enabled: bool = False,
        message_routing_mode: PartitionsRoutingMode | str = (
            PartitionsRoutingMode.RoundRobinDistribution
        ),
        lazy_start_partitioned_producers: bool = False,
        properties: dict[str, str] | None = None,
        batching_type: BatchingType | str = BatchingType.Default,
        encryption_key: str | Sequence[str] | None = None,
        crypto_key_reader: KeyReader | None = None,
        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
        message_router: MessageRouter | None = None,
    ) -> Producer:
        """Create a producer; on a partitioned topic, one stream per partition. The parameters
        are pulsar-client's, with its defaults except ``batching_enabled`` (on, as in Pulsar's
        Java client: the wire is built for batches).

        Messages with a partition key go to the partition of the key's hash; the others follow
        ``message_routing_mode``. With ``initial_sequence_id`` (the last id published before)
        the first message gets the id after it; otherwise the one after the broker's last
        stored id for this producer name.

        At most ``max_pending_messages`` sends are pending (on a partitioned topic, that many
        per partition and at most ``max_pending_messages_across_partitions`` in all); beyond
        it a send fails with :class:`~client.ProducerQueueIsFull`, or waits with
        ``block_if_queue_full=True``. A send without a receipt after ``send_timeout_millis``
        fails with :class:`~client.Timeout` (0: never).

        ``compression_type`` (:class:`CompressionType` LZ4, ZLib, ZSTD or SNAPPY) compresses
        each batch; consumers decompress (see docs/protocol.md, "Compression").

        ``batching_type=BatchingType.KeyBased`` (Pulsar's KEY_BASED batcher) keeps one batch
        per key (the ordering key if set, else the partition key), so each stored entry holds
        one key: use it when a Key_Shared subscription reads the topic, which dispatches a
        whole entry by the key of its first message.

        ``schema`` (:mod:`pulsar_grpc.schema`) is declared to the broker, which refuses one
        incompatible with the topic's (:class:`~client.IncompatibleSchema`); ``send`` then
        takes its values.

        ``encryption_key`` (a name or several) encrypts every batch end to end with the
        public keys ``crypto_key_reader`` gives for those names (a :class:`CryptoError` here
        if it has none); see docs/protocol.md, "End-to-end encryption".

        >>> producer = await client.create_producer(
        ...     "my-topic", compression_type=CompressionType.LZ4, block_if_queue_full=True)
        >>> users = await client.create_producer("users", schema=AvroSchema(User))

        ``access_mode`` (:class:`ProducerAccessMode`, PIP-68) is enforced by the broker:
        ``Exclusive`` fails with :class:`~client.ProducerFenced` while another producer is
        connected, ``WaitForExclusive`` returns once the topic is this producer's (no
        operation timeout), ``ExclusiveWithFencing`` fences the producers there; a Shared
        producer beside an exclusive one fails with :class:`~client.ProducerBusy`.

        ``lazy_start_partitioned_producers`` is accepted and ignored (every partition's
        stream opens at once); ``chunking_enabled`` takes only its default
        (NotImplementedError otherwise); ``properties`` show in the topic's stats. A
        ``message_router(message, num_partitions)`` chooses each message's partition of a
        partitioned topic, as pulsar-client's.
        """
        check_types(
            topic=(topic, str, False),
            producer_name=(producer_name, str, True),
            initial_sequence_id=(initial_sequence_id, int, True),
            send_timeout_millis=(send_timeout_millis, int, False),
            max_pending_messages=(max_pending_messages, int, False),
            batching_max_messages=(batching_max_messages, int, False),
        )
        refuse_unsupported(
            "create_producer",
            chunking_enabled=(chunking_enabled, False),
        )
        if message_router is not None and not callable(message_router):
            raise ValueError("message_router must be a function (message, num_partitions) -> int")
        config = ProducerConfig(
            batching_max_messages=batching_max_messages if batching_enabled else 1,
            batching_max_bytes=batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms=batching_max_publish_delay_ms,
            batching_type=BatchingType(batching_type),
            compression_type=compression_type_of(compression_type),
            encryptor=producer_encryptor(encryption_key, crypto_key_reader),
            send_timeout_ms=send_timeout_millis,
            max_pending_messages=max_pending_messages,
            initial_sequence_id=initial_sequence_id,
            operation_timeout_s=self._operation_timeout_s,
            initial_backoff_s=self._backoff_s[0],
            max_backoff_s=self._backoff_s[1],
            renewal=self._renewal,
            max_message_size=self._max_message_size,
            access_mode=ProducerAccessMode(int(access_mode)),
        )
        if max_pending_messages < 1 or max_pending_messages_across_partitions < 1:
            raise ValueError(
                "max_pending_messages and max_pending_messages_across_partitions must be positive"
            )
        mode = PartitionsRoutingMode(message_routing_mode)
        with refusal_names("produce", topic):
            partitions = await self._streams.partition_count(topic)
            params: Params = {
                Header.PRODUCER_NAME: producer_name,
                Header.METADATA: metadata_header(properties),
            }
            producers = [
                PartitionProducer(config, index) for index in partition_indexes(partitions)
            ]
            topics = partition_topics(topic, partitions)
            await self._streams.start_all(producers, topics, "Produce", params, schema)
        router = (
            Router(partitions, mode, batching_max_publish_delay_ms, custom=message_router)
            if partitions
            else None
        )
        budget = max_pending_messages
        if partitions:
            budget = min(max_pending_messages * partitions, max_pending_messages_across_partitions)
        producer = Producer(
            full_topic_name(topic), producers, router, budget, block_if_queue_full, schema
        )
        self._handles.add(producer)
        return producer

    async def subscribe(
        self,
        topic: str | Sequence[str] | re.Pattern[str],
        subscription_name: str,
        consumer_type: ConsumerType | str = ConsumerType.Exclusive,
        schema: Schema | None = None,
        receiver_queue_size: int = 1000,
        max_total_receiver_queue_size_across_partitions: int = 50000,
        consumer_name: str | None = None,
        unacked_messages_timeout_ms: int | None = None,
        broker_consumer_stats_cache_time_ms: int = 30000,
        negative_ack_redelivery_delay_ms: int = 60000,
        is_read_compacted: bool = False,
        properties: dict[str, str] | None = None,
        initial_position: InitialPosition | str = InitialPosition.Latest,
        crypto_key_reader: KeyReader | None = None,
        replicate_subscription_state_enabled: bool = False,
        max_pending_chunked_message: int = 10,
        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
        start_message_id_inclusive: bool = False,
        batch_receive_policy: ConsumerBatchReceivePolicy | None = None,
        key_shared_policy: ConsumerKeySharedPolicy | None = None,
        batch_index_ack_enabled: bool = False,
        regex_subscription_mode: RegexSubscriptionMode = RegexSubscriptionMode.PersistentOnly,
        dead_letter_policy: DeadLetterPolicy | None = None,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
        is_pattern_topic: bool = False,
        *,
        message_listener: MessageListener | None = None,
        pattern_auto_discovery_period: float = 60,
        priority_level: int = 0,
        ack_group_time_ms: float = 1.0,
        subscription_type: ConsumerType | str | None = None,
        ack_timeout_ms: int | None = None,
        negative_ack_redelivery_backoff: MultiplierRedeliveryBackoff | None = None,
        ack_timeout_redelivery_backoff: MultiplierRedeliveryBackoff | None = None,
        retry_enable: bool = False,
    ) -> Consumer:
        """Subscribe, with pulsar-client's parameters; every stream feeds one queue.

        ``topic`` is a topic (a partitioned topic: each partition), a list of topics, or
        ``re.compile("persistent://tenant/ns/<regex>")``: the namespace's topics that match,
        re-checked every ``pattern_auto_discovery_period`` seconds so that new topics are
        subscribed too. Messages of a list or pattern consumer carry their topic
        (``msg.topic_name()``) and ids that name it, so acks go to the right topic.

        ``receiver_queue_size`` is per stream; 0 is Pulsar's zero-queue consumer (one permit
        per ``receive()``, no prefetch; one non-partitioned topic only). ``message_listener``
        (``callback(consumer, message)``, plain or async) gets every message instead of
        ``receive()``. Nack delay, ack timeout (``unacked_messages_timeout_ms``) and the
        dead-letter policy are applied by the broker. ``subscription_type`` and
        ``ack_timeout_ms`` are the names earlier versions used. With ``schema``,
        ``msg.value()`` decodes each message from the schema version it was written with
        (``AutoConsumeSchema()``: into plain values, whatever the topic's schema).
        Encrypted batches are decrypted with ``crypto_key_reader``'s private keys; one that
        cannot be is handled as ``crypto_failure_action`` says (FAIL: ``receive()`` raises
        :class:`CryptoError` and the batch stays unacknowledged).

        >>> consumer = await client.subscribe(
        ...     "my-topic", "sub", ConsumerType.Shared, initial_position=InitialPosition.Earliest,
        ...     dead_letter_policy=ConsumerDeadLetterPolicy(max_redeliver_count=3))
        >>> every = await client.subscribe(re.compile("persistent://public/default/orders-.*"), "s")

        The parameters are pulsar.asyncio's, in its order (``is_pattern_topic=True``: ``topic``
        is a regex), then this SDK's own, by name. Accepted and ignored:
        ``max_total_receiver_queue_size_across_partitions``,
        ``broker_consumer_stats_cache_time_ms``, the two chunking options (no chunks arrive)
        and ``batch_index_ack_enabled`` (acks are always per batch index here). Only their
        defaults: ``is_read_compacted``, ``replicate_subscription_state_enabled``,
        ``regex_subscription_mode``. ``properties`` show in the subscription's stats.
        ``key_shared_policy`` (a :class:`ConsumerKeySharedPolicy`)
        counts on a Key_Shared subscription only, as in pulsar-client.

        ``negative_ack_redelivery_backoff`` and ``ack_timeout_redelivery_backoff`` (Java's
        ``negativeAckRedeliveryBackoff`` and ``ackTimeoutRedeliveryBackoff``, a
        :class:`MultiplierRedeliveryBackoff`): a message redelivered more often waits longer,
        by its redelivery count; the broker applies them (the first replaces
        ``negative_ack_redelivery_delay_ms``, the second adds to the ack timeout).

        ``retry_enable`` (Java's ``retryEnable``, one topic only): the consumer also
        subscribes to the retry letter topic (``dead_letter_policy.retry_letter_topic``,
        default ``<topic>-<subscription>-RETRY``), where :meth:`Consumer.reconsume_later`
        publishes; without a ``dead_letter_policy``, Java's: dead after 16 reconsumes, in
        ``<topic>-<subscription>-DLQ``.

        ``start_message_id_inclusive``: whether :meth:`Consumer.seek` to a message id
        delivers that message next (True) or the one after it (False, Pulsar's default).
        """
        check_types(
            topic=(topic, (str, list, tuple, re.Pattern), False),
            subscription_name=(subscription_name, str, False),
            receiver_queue_size=(receiver_queue_size, int, False),
            consumer_name=(consumer_name, str, True),
        )
        refuse_unsupported(
            "subscribe",
            is_read_compacted=(is_read_compacted, False),
            replicate_subscription_state_enabled=(replicate_subscription_state_enabled, False),
            regex_subscription_mode=(
                RegexSubscriptionMode(regex_subscription_mode),
                RegexSubscriptionMode.PersistentOnly,
            ),
        )
        if is_pattern_topic:
            if not isinstance(topic, str):
                raise ValueError("is_pattern_topic=True takes the pattern as one string")
            topic = re.compile(topic)
        sub_type = as_consumer_type(subscription_type or consumer_type)
        retry: RetryLetter | None = None
        if retry_enable:
            if not isinstance(topic, str):
                raise ValueError("retry_enable=True takes one topic")
            retry = self._retry_letter(topic, subscription_name, schema, dead_letter_policy)
            dead_letter_policy = DeadLetterPolicy(
                retry.max_redeliver_count,
                retry.dead_letter_topic,
                dead_letter_policy.initial_subscription_name if dead_letter_policy else None,
                retry.retry_letter_topic,
            )
            topic = [topic, retry.retry_letter_topic]
        params = subscription_params(
            subscription_name,
            sub_type,
            consumer_name,
            as_initial_position(initial_position),
            priority_level,
            negative_ack_redelivery_delay_ms,
            unacked_messages_timeout_ms
            if unacked_messages_timeout_ms is not None
            else ack_timeout_ms,
            dead_letter_policy,
            key_shared_policy,
        )
        params[Header.METADATA] = metadata_header(properties)
        params.update(
            backoff_params(negative_ack_redelivery_backoff, ack_timeout_redelivery_backoff)
        )
        config = ConsumerConfig(
            receiver_queue_size=receiver_queue_size,
            ack_group_time_ms=ack_group_time_ms,
            operation_timeout_s=self._operation_timeout_s,
            subscription_type=sub_type,
            start_inclusive=start_message_id_inclusive,
            initial_backoff_s=self._backoff_s[0],
            max_backoff_s=self._backoff_s[1],
            renewal=self._renewal,
            topic_ids=not isinstance(topic, str),
            values=value_decoder(schema, self.get_schema),
            decryptor=EntryDecryptor(crypto_key_reader, crypto_failure_action),
        )
        pattern: TopicsPattern | None = None
        topics: list[str] = []
        if isinstance(topic, re.Pattern):
            pattern, label = TopicsPattern.of(topic), topic.pattern
        else:
            # One stream per topic however it is spelt (short or full name).
            by_name: dict[str, str] = {}
            for name in [topic] if isinstance(topic, str) else topic:
                by_name.setdefault(full_topic_name(name), name)
            topics = list(by_name.values())
            if not topics:
                raise ValueError("subscribe needs at least one topic")
            label = ",".join(map(full_topic_name, topics))
        consumer = Consumer(
            label, subscription_name, config, MessageQueue(), message_listener, batch_receive_policy
        )
        consumer.last_message_id_of = self.get_last_message_id
        consumer.retry_letter = retry
        with refusal_names("consume", label):
            if pattern is not None:
                await watch_pattern(
                    consumer,
                    pattern,
                    pattern_auto_discovery_period,
                    self.get_topics_of_namespace,
                    partial(self._streams.attach, config=config, params=params),
                )
            else:
                await self._streams.attach(consumer, topics, config, params)
        consumer.start_listener()
        self._track(consumer)
        return consumer

    def _retry_letter(
        self,
        topic: str,
        subscription_name: str,
        schema: Schema | None,
        policy: DeadLetterPolicy | None,
    ) -> RetryLetter:
        """A consumer's retry set-up: its copies are published without batching or
        compression (each a request of its own, with its delivery time), under the
        consumer's schema (the payload is the original's encoding)."""

        def make_producer(name: str) -> Awaitable[Producer]:
            return self.create_producer(name, schema=schema, batching_enabled=False)

        return retry_letter(
            full_topic_name(topic),
            subscription_name,
            make_producer,
            policy.retry_letter_topic if policy else None,
            policy.dead_letter_topic if policy else None,
            policy.max_redeliver_count if policy else MAX_RECONSUMETIMES,
        )

    async def create_reader(
        self,
        topic: str,
        start_message_id: MessageId | str,
        schema: Schema | None = None,
        receiver_queue_size: int = 1000,
        reader_name: str | None = None,
        subscription_role_prefix: str | None = None,
        is_read_compacted: bool = False,
        crypto_key_reader: KeyReader | None = None,
        start_message_id_inclusive: bool = False,
        crypto_failure_action: ConsumerCryptoFailureAction = ConsumerCryptoFailureAction.FAIL,
    ) -> Reader:
        """Read from ``start_message_id`` (``MessageId.earliest``, ``MessageId.latest``, a
        MessageId, or its text) without a durable subscription, as pulsar-client's
        ``create_reader``. A partitioned topic can only be read from earliest or latest.
        ``schema``, ``crypto_key_reader`` and ``crypto_failure_action`` as for
        :meth:`subscribe`.

        >>> reader = await client.create_reader("my-topic", MessageId.earliest)

        ``subscription_role_prefix`` starts the name of the reader's non-durable subscription,
        as in Pulsar; ``is_read_compacted`` takes only False (the broker does not compact).
        """
        check_types(
            topic=(topic, str, False),
            start_message_id=(start_message_id, (MessageId, str), False),
            receiver_queue_size=(receiver_queue_size, int, False),
            reader_name=(reader_name, str, True),
        )
        refuse_unsupported("create_reader", is_read_compacted=(is_read_compacted, False))
        start = (
            MessageId.parse(start_message_id)
            if isinstance(start_message_id, str)
            else start_message_id
        )
        with refusal_names("consume", topic):
            partitions = await self._streams.partition_count(topic)
        if partitions and start not in (MessageId.earliest, MessageId.latest):
            raise ValueError("a reader of a partitioned topic starts at earliest or latest")
        subscription = f"{subscription_role_prefix or 'reader'}-{uuid.uuid4().hex[:10]}"
        params: Params = {
            Header.SUBSCRIPTION: subscription,
            Header.SUBSCRIPTION_TYPE: ConsumerType.Exclusive.value,
            Header.CONSUMER_NAME: reader_name,
            Header.DURABLE: False,
            Header.START_MESSAGE_ID: str(start),
            Header.START_MESSAGE_ID_INCLUSIVE: start_message_id_inclusive,
        }
        config = ConsumerConfig(
            receiver_queue_size=receiver_queue_size,
            operation_timeout_s=self._operation_timeout_s,
            durable=False,
            start_message_id=start,
            start_inclusive=start_message_id_inclusive,
            initial_backoff_s=self._backoff_s[0],
            max_backoff_s=self._backoff_s[1],
            renewal=self._renewal,
            values=value_decoder(schema, self.get_schema),
            decryptor=EntryDecryptor(crypto_key_reader, crypto_failure_action),
        )
        consumer = Consumer(full_topic_name(topic), subscription, config, MessageQueue())
        with refusal_names("consume", topic):
            await self._streams.attach(consumer, [topic], config, params, [partitions])
        topics = partition_topics(full_topic_name(topic), partitions)
        reader = Reader(
            consumer, self.get_last_message_id, topics, start, start_message_id_inclusive
        )
        if start == MessageId.latest:
            await reader.mark_latest(start_message_id_inclusive)
        self._track(consumer)
        self._handles.add(reader)
        return reader

    async def get_last_message_id(self, topic: str) -> MessageId | None:
        """The id of the newest message of a topic or of one partition; None when empty.

        >>> await client.get_last_message_id("my-topic")
        MessageId(partition=-1, ledger_id=3, entry_id=41, batch_index=99)
        """
        request = pb.GetLastMessageIdRequest(topic=topic)
        response = await self._calls.at_owner(topic, "GetLastMessageId", request)
        if not response.HasField("last_message_id"):
            return None
        last = response.last_message_id
        return new_message_id(last.ledger_id, last.entry_id, last.batch_index, last.partition)

    async def get_schema(self, topic: str, version: bytes | str = b"") -> SchemaInfo:
        """The topic's schema at ``version`` (Pulsar's 8 bytes, or the str
        ``Message.schema_version()`` gives; empty: the latest). A topic without one raises
        :class:`~client.TopicNotFound`."""
        if isinstance(version, str):
            version = version.encode("latin-1")
        request = pb.GetSchemaRequest(topic=topic, schema_version=version)
        response = await self._calls.at_owner(topic, "GetSchema", request)
        return SchemaInfo.from_proto(response.schema)

    async def get_topics_of_namespace(self, namespace: str) -> list[str]:
        """Full names of a namespace's persistent topics (a partitioned topic under its own
        name and its partitions'), as the broker lists them.

        >>> await client.get_topics_of_namespace("public/default")
        ['persistent://public/default/orders', ...]
        """
        return await self._calls.topics_of_namespace(namespace)

    async def get_partitions_for_topic(self, topic: str) -> list[str]:
        """The partitions' full names, or the topic's own for a non-partitioned topic.

        >>> await client.get_partitions_for_topic("orders")
        ['persistent://public/default/orders-partition-0', ...]
        """
        return partition_topics(full_topic_name(topic), await self._streams.partition_count(topic))

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """pulsar-client's name for :meth:`get_partitions_for_topic` (Java's name)."""
        return await self.get_partitions_for_topic(topic)

    async def lookup(self, topic: str) -> LookupResult:
        """Ask which broker serves ``topic`` and at which addresses of the client's listener,
        following redirects; the answer is the authoritative broker's.

        >>> (await client.lookup("my-topic")).grpc_url
        'grpc://127.0.0.1:50051'
        """
        result, _ = await self._calls.lookup(topic)
        return result

    def get_service_info(self) -> ServiceInfo:
        """The cluster the client uses now: its service URL's, or the one an
        AutoClusterFailover or ServiceInfoProvider switched it to (pulsar-client's)."""
        return self.cluster.current

    async def close(self) -> None:
        """Close every producer, consumer and reader, then the channels. A second close
        raises AlreadyClosed, as pulsar-client's (after :meth:`shutdown`, close waits for it)."""
        if self._calls.refuse_new():
            await self._close_all()
        elif self._shutdown is not None:
            await asyncio.shield(self._shutdown)
        else:
            raise AlreadyClosed("the client is already closed")

    def shutdown(self) -> None:
        """pulsar.asyncio's immediate shutdown, not awaited: new calls are refused at once
        and everything closes in the background (:meth:`close` waits for it)."""
        if self._calls.refuse_new():
            self._shutdown = asyncio.get_running_loop().create_task(self._close_all())

    async def _close_all(self) -> None:
        self.cluster.close()
        await self.ownership_watch.close()
        handles = list(self._handles)
        await asyncio.gather(*(h.close() for h in handles), return_exceptions=True)
        # Consumers dropped and not closed yet (the drop is still on its way to this loop).
        closers, self._closers = list(self._closers.values()), {}
        await asyncio.gather(
            *(close() for close in closers), *self._closing_dropped, return_exceptions=True
        )
        await self._calls.close_channels()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._calls.refuse_new():
            await self._close_all()

    # ------------------------------------------------------------------ internals

    def _track(self, consumer: Consumer) -> None:
        """Close ``consumer`` with the client, or once the application drops it (garbage
        collected without close(), e.g. a reader left behind): its streams end on the
        broker, which hands what it had prefetched to the subscription's other consumers,
        and no task of it is left pending when the loop ends."""
        self._handles.add(consumer)
        loop, close = consumer.closer()
        key = next(self._closer_keys)
        self._closers[key] = close

        def dropped() -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
                loop.call_soon_threadsafe(self._close_dropped, key)

        # Not at interpreter exit: the loop may be past running what it would schedule.
        weakref.finalize(consumer, dropped).atexit = False

    def _close_dropped(self, key: int) -> None:
        close = self._closers.pop(key, None)
        if close is None:
            return  # close() took it

        async def run() -> None:
            await close()

        task = asyncio.get_running_loop().create_task(run())
        self._closing_dropped.add(task)
        task.add_done_callback(self._closing_dropped.discard)
