"""Authorization of admin API requests: the same rules as gRPC calls (Pulsar's
PulsarWebResource checks), answered 403 {"reason"} when refused.

The authentication middleware remembers the request's role (:func:`remember_role`); a
proxy forwarding a client's admin request names the client in ``X-Original-Principal``, as
Pulsar's proxy does. Every check does nothing while authorizationEnabled is false.
"""

from __future__ import annotations

from aiohttp import web

from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.security.authorization import AuthorizationService, Caller, TopicOperation
from pulsar_grpc.broker.security.permissions import check_role

H_ORIGINAL_PRINCIPAL = "X-Original-Principal"
_ROLE = web.RequestKey("pulsar_grpc.role", str)


def remember_role(request: web.Request, role: str) -> None:
    request[_ROLE] = role


def caller(request: web.Request) -> Caller:
    originals = request.headers.getall(H_ORIGINAL_PRINCIPAL, [])
    if len(originals) > 1:
        raise AuthenticationError(f"more than one {H_ORIGINAL_PRINCIPAL} header")
    original = check_role(originals[0]) if originals else None
    return Caller(request.get(_ROLE), original)


class AdminAccess:
    """The checks each admin route makes before it acts."""

    def __init__(self, authorization: AuthorizationService | None) -> None:
        # None while authorizationEnabled is false: every check passes.
        self._authorization = authorization

    async def tenant_admin(self, request: web.Request, tenant: str) -> None:
        """A super-user or one of the tenant's adminRoles."""
        if (authorization := self._authorization) is not None:
            await authorization.check_tenant_admin(caller(request), tenant)

    def super_user(self, request: web.Request, what: str) -> None:
        if (authorization := self._authorization) is not None:
            authorization.check_super_user(caller(request), what)

    async def topic(
        self, request: web.Request, topic: TopicName, operation: TopicOperation
    ) -> None:
        if (authorization := self._authorization) is not None:
            await authorization.check_topic(caller(request), topic, operation)

    async def namespace_topics(self, request: web.Request, ns: NamespaceName) -> None:
        if (authorization := self._authorization) is not None:
            await authorization.check_namespace_topics(caller(request), ns)
