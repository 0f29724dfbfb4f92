"""gRPC ServerInterceptors: call parameters and listener become a typed call context before a
servicer runs. No RPC bodies here."""

from interceptors.context import CallContext, ConsumerParams, ProducerParams, current
from interceptors.listener import ListenerInterceptor
from interceptors.parameters import ParametersInterceptor

__all__ = [
    "CallContext",
    "ConsumerParams",
    "ListenerInterceptor",
    "ParametersInterceptor",
    "ProducerParams",
    "current",
]
