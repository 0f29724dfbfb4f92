"""Authorization of gRPC calls (authorizationEnabled): each RPC asks before it does anything
that leaves a trace (a producer, a subscription, an auto-created topic or partitioned topic),
so a refused call ends PERMISSION_DENIED with Pulsar's AuthorizationError code and nothing
changed. The check needs the request's topic, which unary RPCs carry in their body: that is
why it sits here, in the servicers, and not in an interceptor, which sees headers only.

An open Produce or Consume stream is checked again whenever its tenant's permissions change,
and ended PERMISSION_DENIED once its role lost the right (Pulsar's Producer and Consumer
``checkPermissions`` on a policies update)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator

from pulsar_grpc.broker.errors import AuthorizationError, BrokerError
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.security.authorization import Caller, TopicOperation
from pulsar_grpc.interceptors import current

log = logging.getLogger(__name__)


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


@contextlib.contextmanager
def ended_when_revoked(
    broker: BrokerContext,
    topic: TopicName,
    operation: TopicOperation,
    end: Callable[[BrokerError], None],
    subscription: str | None = None,
) -> Iterator[None]:
    """While the block runs, check the call's permission again on every change of the topic's
    tenant's permissions, and ``end`` the stream with the refusal once there is one."""
    authorization = broker.authorization
    if authorization is None:
        yield
        return
    caller = _caller()
    loop = asyncio.get_running_loop()
    checks: set[asyncio.Task[None]] = set()

    async def check() -> None:
        try:
            await authorization.check_topic(caller, topic, operation, subscription)
        except AuthorizationError as refused:
            log.info("ending a %s stream of %s on %s: %s", operation.value, caller, topic, refused)
            end(refused)
        except Exception:  # the store unreachable for a moment: keep serving, check later
            log.warning("could not check the permissions of %s on %s again", caller, topic)

    def changed() -> None:
        task = loop.create_task(check())
        checks.add(task)
        task.add_done_callback(checks.discard)

    stop = authorization.watch(topic.tenant, changed)
    # Once more now that the watch is on: a revoke that landed while the stream was opening
    # (after its first check, before the watch) is seen here, not at some later change.
    changed()
    try:
        yield
    finally:
        stop()
        for task in checks:
            task.cancel()
