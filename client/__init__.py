"""pulsar-grpc Python client: asyncio first, with a blocking wrapper.

>>> from client import Client, MessageId
>>> async with Client("grpc://127.0.0.1:50051") as c:
...     producer = await c.create_producer("my-topic")
...     await producer.send(b"hello")
"""

from ._client import (
    Client,
    ConsumerType,
    DeadLetterPolicy,
    InitialPosition,
    LookupResult,
)
from ._consumer import Consumer
from ._errors import (
    AlreadyClosed,
    AuthenticationError,
    AuthorizationError,
    ConnectError,
    ConsumerBusy,
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
from ._message import Message, MessageId
from ._producer import Producer
from ._reader import Reader
from ._routing import RoutingMode
from ._sync import SyncClient, SyncConsumer, SyncProducer, SyncReader

__all__ = [
    "AlreadyClosed",
    "AuthenticationError",
    "AuthorizationError",
    "Client",
    "ConnectError",
    "Consumer",
    "ConsumerBusy",
    "ConsumerType",
    "DeadLetterPolicy",
    "InitialPosition",
    "InvalidTopicName",
    "LookupFailed",
    "LookupResult",
    "Message",
    "MessageId",
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
    "TopicNotFound",
    "error_from_rpc",
]
