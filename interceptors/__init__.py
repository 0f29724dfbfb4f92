"""gRPC ServerInterceptors: call parameters (and, later, authentication and listener) become a
typed call context before a servicer runs. No RPC bodies here."""

from interceptors.context import CallContext, ConsumerParams, ProducerParams, current
from interceptors.parameters import ParametersInterceptor

__all__ = ["CallContext", "ConsumerParams", "ParametersInterceptor", "ProducerParams", "current"]
