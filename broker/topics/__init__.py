"""Topics, producers, subscriptions, dispatchers and consumers (Pulsar's broker.service)."""

from broker.topics.consumer import Consumer, ConsumerOptions
from broker.topics.producer import Producer, PublishReceipt
from broker.topics.subscription import AckId, Subscription, SubType
from broker.topics.topic import PersistentTopic
from broker.topics.transport import ConsumerTransport, Delivery

__all__ = [
    "AckId",
    "Consumer",
    "ConsumerOptions",
    "ConsumerTransport",
    "Delivery",
    "PersistentTopic",
    "Producer",
    "PublishReceipt",
    "SubType",
    "Subscription",
]
