"""Topics, producers, subscriptions, dispatchers and consumers (Pulsar's broker.service)."""

from pulsar_grpc.broker.topics.consumer import AckId, Consumer, ConsumerOptions
from pulsar_grpc.broker.topics.producer import Producer, PublishReceipt
from pulsar_grpc.broker.topics.producer_access import ProducerAccessMode
from pulsar_grpc.broker.topics.subscription import ACK_SLICE, Subscription, SubType
from pulsar_grpc.broker.topics.topic import PersistentTopic
from pulsar_grpc.broker.topics.transport import ConsumerTransport, Delivery

__all__ = [
    "ACK_SLICE",
    "AckId",
    "Consumer",
    "ConsumerOptions",
    "ConsumerTransport",
    "Delivery",
    "PersistentTopic",
    "Producer",
    "ProducerAccessMode",
    "PublishReceipt",
    "SubType",
    "Subscription",
]
