"""Which listener a call belongs to (PIP-95): the bind address it arrived on, unless the client
names one in the ``x-pulsar-listenername`` header. An unknown name ends the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

import grpc
from grpc import aio

from broker.errors import InvalidArgumentError
from interceptors._wrap import StatusFor, headers_of, wrap_handler
from interceptors.context import CallContext

H_LISTENER = "x-pulsar-listenername"


class ListenerInterceptor(aio.ServerInterceptor):
    def __init__(
        self, bind_listener: str | None, known: Collection[str], status_for: StatusFor
    ) -> None:
        self._bind_listener = bind_listener
        self._known = frozenset(known)
        self._status_for = status_for

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        requested = headers_of(details).get(H_LISTENER) or None
        bind_listener = self._bind_listener
        known = self._known

        def prepare(ctx: CallContext) -> None:
            if requested is not None and requested not in known:
                raise InvalidArgumentError(
                    f"{H_LISTENER}: unknown listener '{requested}' "
                    f"(known: {', '.join(sorted(known)) or 'none'})"
                )
            ctx.listener_name = requested
            ctx.bind_listener = bind_listener

        return wrap_handler(handler, prepare, self._status_for)
