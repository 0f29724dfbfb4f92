"""pulsar-client's ``pulsar.asyncio`` module over this SDK: its names, the asyncio classes.

pulsar-client's asyncio client is a separate module beside its blocking one; this SDK's
client is asyncio first, so here the module only names the SDK's classes as pulsar.asyncio
does (see :mod:`pulsar_grpc.client.compat`).
"""

from .._batching import BatchingType
from .._client import Client
from .._compat import ProducerAccessMode, RegexSubscriptionMode
from .._compression import CompressionType
from .._consumer import Consumer, InitialPosition
from .._crypto import ConsumerCryptoFailureAction
from .._producer import Producer
from .._reader import Reader
from .._routing import PartitionsRoutingMode
from ..exceptions import PulsarException

__all__ = [
    "BatchingType",
    "Client",
    "CompressionType",
    "Consumer",
    "ConsumerCryptoFailureAction",
    "InitialPosition",
    "PartitionsRoutingMode",
    "Producer",
    "ProducerAccessMode",
    "PulsarException",
    "Reader",
    "RegexSubscriptionMode",
]
