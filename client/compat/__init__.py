"""pulsar-client's module layout over this SDK, so a pulsar-client program ports by one line.

A program written for pulsar-client imports ``pulsar`` (and ``pulsar.asyncio``); here it
reads ``import pulsar_grpc.client.compat as pulsar`` and nothing else changes:

- ``pulsar.Client`` is blocking, as pulsar-client's is, so it is :class:`SyncClient` here
  (``pulsar_grpc.Client`` is the asyncio one, which pulsar-client calls
  ``pulsar.asyncio.Client``);
- ``pulsar.asyncio`` is :mod:`pulsar_grpc.client.compat.asyncio`;
- ``pulsar.schema`` is :mod:`pulsar_grpc.schema` (and ``pulsar.BytesSchema`` its
  ``BytesSchema``, as pulsar-client has it at the top too);
- every other name of pulsar-client's that the SDK has is the SDK's own, which already
  takes pulsar-client's spelling (the SDK's extra names, such as ``SyncClient``, are not here).

The names pulsar-client has and this SDK lacks are absent here too (docs/pulsar-client.md
says why each is absent); an alias module never pretends a feature exists.
"""

from pulsar_grpc import schema
from pulsar_grpc.schema import BytesSchema

from .. import exceptions
from .._auth import Authentication, AuthenticationBasic, AuthenticationTLS, AuthenticationToken
from .._batching import BatchingType
from .._compat import ProducerAccessMode, RegexSubscriptionMode
from .._compression import CompressionType
from .._consumer import (
    BatchReceivePolicy,
    ConsumerBatchReceivePolicy,
    ConsumerDeadLetterPolicy,
    ConsumerType,
    InitialPosition,
)
from .._crypto import ConsumerCryptoFailureAction, EncryptionContext, EncryptionKey
from .._crypto_keys import CryptoKeyReader
from .._errors import Result
from .._key_shared import ConsumerKeySharedPolicy, KeySharedMode
from .._message import Message
from .._message_id import MessageId
from .._oauth2 import AuthenticationOauth2
from .._redelivery import MultiplierRedeliveryBackoff
from .._routing import PartitionsRoutingMode
from .._service_info import AutoClusterFailover, ServiceInfo, ServiceInfoProvider
from .._sync import SyncClient as Client
from .._sync import SyncConsumer as Consumer
from .._sync import SyncProducer as Producer
from .._sync import SyncReader as Reader
from ..exceptions import *  # noqa: F403  (pulsar-client's exception names: its __all__)
from . import asyncio

__all__ = [
    "Authentication",
    "AuthenticationBasic",
    "AuthenticationOauth2",
    "AuthenticationTLS",
    "AuthenticationToken",
    "AutoClusterFailover",
    "BatchReceivePolicy",
    "BatchingType",
    "BytesSchema",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerBatchReceivePolicy",
    "ConsumerCryptoFailureAction",
    "ConsumerDeadLetterPolicy",
    "ConsumerKeySharedPolicy",
    "ConsumerType",
    "CryptoKeyReader",
    "EncryptionContext",
    "EncryptionKey",
    "InitialPosition",
    "KeySharedMode",
    "Message",
    "MessageId",
    "MultiplierRedeliveryBackoff",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "Reader",
    "RegexSubscriptionMode",
    "Result",
    "ServiceInfo",
    "ServiceInfoProvider",
    "asyncio",
    "schema",
]
__all__ += exceptions.__all__
