"""Authentication of every call (authenticationEnabled), before any other interceptor or RPC
body runs: a call whose credentials fail ends UNAUTHENTICATED with Pulsar's
AuthenticationError code, so a stranger cannot even make the broker parse a topic name or
create a topic. The role and the method that proved it go into the call context.

The credentials are the ``authorization`` header (``Bearer <token>`` or ``Basic <base64>``) and,
on a mutual-TLS listener, the CN of the verified client certificate: gRPC's auth context, or,
behind a TLS front that asks for the certificate optionally (broker/tls_front.py), what the
front recorded for the loopback connection the call came through.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.security.authentication import AuthenticationData, AuthenticationService
from pulsar_grpc.broker.security.permissions import check_role
from pulsar_grpc.broker.tls_front import PipedPeers
from pulsar_grpc.interceptors._wrap import Abort, Prepare, PreparingInterceptor, wrap_handler
from pulsar_grpc.interceptors.context import CallContext
from pulsar_grpc.interceptors.headers import AUTHORIZATION, Header

# gRPC's auth-context property naming the verified peer certificate's common name.
_X509_CN = "x509_common_name"
log = logging.getLogger(__name__)
# Health checks answer without credentials, as Pulsar's /status.html does: load balancers and
# orchestrators probe them and say nothing about topics.
_OPEN_SERVICE = "/grpc.health.v1.Health/"


class AuthenticationInterceptor(PreparingInterceptor):
    """Only installed while authenticationEnabled is true: a broker without it pays nothing."""

    def __init__(
        self,
        service: AuthenticationService,
        bind_listener: str | None,
        abort: Abort,
        piped_peers: PipedPeers | None = None,
    ) -> None:
        """``piped_peers``: the TLS front's connections, when this server is behind one."""
        super().__init__(abort)
        self._service = service
        self._bind_listener = bind_listener
        self._piped_peers = piped_peers

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        # The headers the preparers see keep one value per name: a call with two credentials
        # would be judged on whichever came last, so it is refused outright.
        metadata = details.invocation_metadata or ()  # type: ignore[attr-defined]
        for name in (AUTHORIZATION, Header.ORIGINAL_PRINCIPAL):
            if sum(1 for key, _ in metadata if key == name) > 1:
                handler = await continuation(details)
                refuse = _refuse_repeated(name)
                return handler if handler is None else wrap_handler(handler, refuse, self._abort)
        return await super().intercept_service(continuation, details)

    def preparer(
        self, method: str, headers: dict[str, str], binary: dict[str, bytes]
    ) -> Prepare | None:
        if method.startswith(_OPEN_SERVICE):
            return None
        authorization = headers.get(AUTHORIZATION)
        original_principal = headers.get(Header.ORIGINAL_PRINCIPAL)
        service = self._service
        listener = self._bind_listener
        piped_peers = self._piped_peers

        async def prepare(ctx: CallContext, context: aio.ServicerContext) -> None:
            if piped_peers is None:
                common_name = _peer_common_name(context)
            else:
                piped = piped_peers.of(ctx.peer)
                # The client's own address from here on (stats, per-address limits), and only
                # a connection the front piped has a certificate.
                ctx.peer = piped.address if piped is not None else ctx.peer
                common_name = piped.common_name if piped is not None else None
            data = AuthenticationData(
                authorization=authorization,
                tls_common_name=common_name,
                remote_address=ctx.peer,
                listener=listener,
            )
            result = await service.authenticate(data)
            ctx.role, ctx.auth_method, ctx.auth_data = result.role, result.method, data
            ctx.auth_expires_at = result.expires_at
            if original_principal is not None:
                ctx.original_principal = check_role(original_principal)
            log.debug("call from %s authenticated as %s (%s)", ctx.peer, result.role, result.method)

        return prepare


def _refuse_repeated(name: str) -> Prepare:
    async def refuse(ctx: CallContext, context: aio.ServicerContext) -> None:
        raise AuthenticationError(f"more than one {name} header")

    return refuse


def _peer_common_name(context: aio.ServicerContext) -> str | None:
    values = context.auth_context().get(_X509_CN) or []
    if not values:
        return None
    try:
        return bytes(values[0]).decode()
    except UnicodeDecodeError:
        return None
