"""gRPC ServerInterceptors: the caller's credentials (when authentication is on), call
parameters and listener become a typed call context before a servicer runs. No RPC bodies
here."""

from pulsar_grpc.interceptors.context import CallContext, ConsumerParams, ProducerParams, current
from pulsar_grpc.interceptors.listener import ListenerInterceptor
from pulsar_grpc.interceptors.parameters import ParametersInterceptor

__all__ = [
    "CallContext",
    "ConsumerParams",
    "ListenerInterceptor",
    "ParametersInterceptor",
    "ProducerParams",
    "current",
]
