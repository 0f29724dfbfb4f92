"""pulsar-grpc Python client: asyncio first, with a blocking wrapper.

>>> from pulsar_grpc.client import Client, MessageId
>>> async with Client("grpc://127.0.0.1:50051") as c:
...     producer = await c.create_producer("my-topic")
...     await producer.send(b"hello")
"""

from ._batching import BatchingType
from ._client import Client, LookupResult
from ._connection import HandleState
from ._consumer import (
    BatchReceivePolicy,
    Consumer,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    MessageListener,
)
from ._errors import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    ConsumerBusy,
    InvalidConfiguration,
    InvalidTopicName,
    LookupFailed,
    MessageTooBig,
    NotAllowed,
    ProducerBusy,
    PulsarError,
    Timeout,
    TopicNotFound,
    error_from_rpc,
)
from ._message import Message, MessageId, TopicMessageId
from ._producer import Producer
from ._reader import Reader
from ._routing import RoutingMode
from ._sync import SyncClient, SyncConsumer, SyncProducer, SyncReader

__all__ = [
    "AlreadyClosed",
    "AuthenticationError",
    "AuthorizationError",
    "BatchReceivePolicy",
    "BatchingType",
    "Client",
    "ConnectError",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerBusy",
    "ConsumerDeadLetterPolicy",
    "ConsumerType",
    "DeadLetterPolicy",
    "HandleState",
    "InitialPosition",
    "InvalidConfiguration",
    "InvalidTopicName",
    "LookupFailed",
    "LookupResult",
    "Message",
    "MessageId",
    "MessageListener",
    "MessageTooBig",
    "NotAllowed",
    "Producer",
    "ProducerBusy",
    "PulsarError",
    "Reader",
    "RoutingMode",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "SyncReader",
    "Timeout",
    "TopicMessageId",
    "TopicNotFound",
    "error_from_rpc",
]
