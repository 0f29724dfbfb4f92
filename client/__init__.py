"""pulsar-grpc Python client: asyncio first, with a blocking wrapper.

>>> from pulsar_grpc.client import Client, MessageId
>>> async with Client("grpc://127.0.0.1:50051") as c:
...     producer = await c.create_producer("my-topic")
...     await producer.send(b"hello")

Every exception of pulsar-client's ``pulsar.exceptions`` is here by the same name (and in
:mod:`pulsar_grpc.client.exceptions`), under :class:`PulsarException`.
"""

from . import exceptions
from ._auth import (
    Authentication,
    AuthenticationBasic,
    AuthenticationTLS,
    AuthenticationToken,
)
from ._auth_params import authentication_from
from ._batching import BatchingType
from ._channels import LookupResult
from ._client import Client
from ._compat import ProducerAccessMode, RegexSubscriptionMode
from ._compression import CompressionType
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
from ._crypto import ConsumerCryptoFailureAction, EncryptionContext, EncryptionKey
from ._crypto_keys import CryptoKeyReader, EncryptionKeyInfo, KeyReader
from ._errors import Result, error_from_rpc
from ._key_shared import ConsumerKeySharedPolicy, KeySharedMode
from ._message import Message
from ._message_id import MessageId, TopicMessageId
from ._oauth2 import AuthenticationOauth2
from ._producer import Producer
from ._reader import Reader
from ._redelivery import MultiplierRedeliveryBackoff
from ._routing import PartitionsRoutingMode
from ._scram import AuthenticationSCRAM
from ._service_info import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from ._sync import SyncClient, SyncConsumer, SyncProducer, SyncReader
from .exceptions import *  # noqa: F403  (pulsar-client's exception names: its __all__)

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationSCRAM",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AutoClusterFailover",
    "BatchReceivePolicy",
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CryptoKeyReader",
    "DeadLetterPolicy",
    "EncryptionContext",
    "EncryptionKey",
    "EncryptionKeyInfo",
    "HandleState",
    "InitialPosition",
    "KeyReader",
    "KeySharedMode",
    "LookupResult",
    "Message",
    "MessageId",
    "MessageListener",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceInfoProvider",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "SyncReader",
    "TopicMessageId",
    "authentication_from",
    "error_from_rpc",
]
__all__ += exceptions.__all__
