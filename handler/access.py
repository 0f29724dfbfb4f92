"""Authorization of gRPC calls (authorizationEnabled): each RPC asks before it does anything
that leaves a trace (a producer, a subscription, an auto-created topic or partitioned topic),
so a refused call ends PERMISSION_DENIED with Pulsar's AuthorizationError code and nothing
changed. The check needs the request's topic, which unary RPCs carry in their body: that is
why it sits here, in the servicers, and not in an interceptor, which sees headers only."""

from __future__ import annotations

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.security.authorization import Caller, TopicOperation
from pulsar_grpc.interceptors import current


def _caller() -> Caller:
    ctx = current()
    return Caller(ctx.role, ctx.original_principal)


async def authorize_topic(
    broker: BrokerContext,
    topic: str | TopicName,
    operation: TopicOperation,
    subscription: str | None = None,
) -> None:
    """Raise AuthorizationError unless the call's role may do ``operation`` on ``topic``."""
    authorization = broker.authorization
    if authorization is None:
        return
    name = topic if isinstance(topic, TopicName) else TopicName.get(topic)
    await authorization.check_topic(_caller(), name, operation, subscription)


async def authorize_namespace_topics(broker: BrokerContext, namespace: str) -> None:
    """Raise AuthorizationError unless the call's role may list ``namespace``'s topics."""
    authorization = broker.authorization
    if authorization is None:
        return
    await authorization.check_namespace_topics(_caller(), NamespaceName.get(namespace))
