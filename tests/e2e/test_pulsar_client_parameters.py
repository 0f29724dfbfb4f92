"""pulsar-client's parameters, by position and by name, against a real broker (issue 26).

Code written for pulsar-client passes its parameters positionally or spells every one out at
its default; both must run unchanged. Parameters naming a feature this broker lacks take
their default and refuse anything else with NotImplementedError rather than be ignored.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

import pulsar_grpc as pulsar
from pulsar_grpc.client import ProducerAccessMode, RegexSubscriptionMode
from tests.support import BrokerThread


def test_client_takes_pulsar_clients_parameters_by_position(broker: BrokerThread) -> None:
    # service_url, authentication, operation_timeout_seconds, io_threads,
    # message_listener_threads, concurrent_lookup_requests, log_conf_file_path,
    # stats_interval_in_seconds, use_tls, tls_trust_certs_file_path,
    # tls_allow_insecure_connection, tls_validate_hostname, logger, connection_timeout_ms,
    # listener_name, tls_private_key_file_path, tls_certificate_file_path
    args = (None, 30, 4, 4, 50000, None, 600, False, None, False, True, None, 10000, None)
    with pulsar.SyncClient(broker.service_url, *args, None, None) as client:
        producer = client.create_producer("positional")
        consumer = client.subscribe(
            "positional", "s", pulsar.ConsumerType.Shared, None, None, 10, 50000, "c1"
        )
        assert consumer.consumer_name() == "c1"
        producer.send(b"x", None, None, None, None, None, False, 1_700_000_000_000, None, None)
        assert consumer.receive(timeout_millis=10_000).event_timestamp() == 1_700_000_000_000


def test_every_parameter_at_its_default_by_name(broker: BrokerThread) -> None:
    with pulsar.SyncClient(
        broker.service_url,
        tls_allow_insecure_connection=False,
        tls_validate_hostname=False,
        connection_timeout_ms=10000,
        operation_timeout_seconds=30,
    ) as client:
        producer = client.create_producer(
            "by-name",
            chunking_enabled=False,
            lazy_start_partitioned_producers=False,
            properties=None,
            access_mode=ProducerAccessMode.Shared,
            message_router=None,
        )
        consumer = client.subscribe(
            "by-name",
            "s",
            max_total_receiver_queue_size_across_partitions=50000,
            broker_consumer_stats_cache_time_ms=30000,
            is_read_compacted=False,
            replicate_subscription_state_enabled=False,
            max_pending_chunked_message=10,
            auto_ack_oldest_chunked_message_on_queue_full=False,
            start_message_id_inclusive=False,
            key_shared_policy=None,
            batch_index_ack_enabled=True,
            regex_subscription_mode=RegexSubscriptionMode.PersistentOnly,
        )
        reader = client.create_reader(
            "by-name",
            pulsar.MessageId.earliest,
            subscription_role_prefix="audit",
            is_read_compacted=False,
            start_message_id_inclusive=False,
        )
        producer.send(b"x", deliver_at=None, deliver_after=None, replication_clusters=None)
        assert consumer.receive(timeout_millis=10_000).data() == b"x"
        assert reader.read_next(timeout_millis=10_000).data() == b"x"


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda c: c.create_producer("t", chunking_enabled=True), "chunking_enabled"),
        (lambda c: c.subscribe("t", "s", is_read_compacted=True), "is_read_compacted"),
        (
            lambda c: c.subscribe(
                "t", "s", regex_subscription_mode=RegexSubscriptionMode.AllTopics
            ),
            "regex_subscription_mode",
        ),
        (
            lambda c: c.create_reader("t", pulsar.MessageId.earliest, is_read_compacted=True),
            "is_read_compacted",
        ),
    ],
)
def test_a_value_that_cannot_be_honoured_is_refused(
    broker: BrokerThread, call: object, name: str
) -> None:
    with pulsar.SyncClient(broker.service_url) as client:
        with pytest.raises(NotImplementedError, match=name):
            call(client)  # type: ignore[operator]


def test_delayed_delivery_and_replication_are_refused_not_ignored(broker: BrokerThread) -> None:
    with pulsar.SyncClient(broker.service_url) as client:
        producer = client.create_producer("delayed")
        with pytest.raises(NotImplementedError, match="deliver_after"):
            producer.send(b"x", deliver_after=timedelta(seconds=5))
        with pytest.raises(NotImplementedError, match="deliver_at"):
            producer.send_async(b"x", lambda r, m: None, deliver_at=1)
        with pytest.raises(NotImplementedError, match="replication_clusters"):
            producer.send(b"x", replication_clusters=["east"])


def test_client_refuses_insecure_tls_and_use_tls_on_a_plaintext_url(broker: BrokerThread) -> None:
    with pytest.raises(NotImplementedError, match="tls_allow_insecure_connection"):
        pulsar.Client(broker.service_url, tls_allow_insecure_connection=True)
    with pytest.raises(NotImplementedError, match="use_tls"):
        pulsar.Client(broker.service_url, use_tls=True)


async def test_is_pattern_topic_subscribes_to_the_matching_topics(broker: BrokerThread) -> None:
    async with pulsar.Client(broker.service_url) as client:
        producer = await client.create_producer("orders-eu")
        consumer = await client.subscribe(
            "persistent://public/default/orders-.*",
            "s",
            initial_position=pulsar.InitialPosition.Earliest,
            is_pattern_topic=True,
        )
        await producer.send(b"order")
        msg = await consumer.receive(timeout_millis=10_000)
        assert msg.data() == b"order"
        assert msg.topic_name() == "persistent://public/default/orders-eu"
        with pytest.raises(ValueError, match="is_pattern_topic"):
            await client.subscribe(["a", "b"], "s", is_pattern_topic=True)
