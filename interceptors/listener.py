"""Which listener a call belongs to (PIP-95): the bind address it arrived on, unless the client
names one in the ``x-pulsar-listenername`` header. An unknown name ends the call."""

from __future__ import annotations

from collections.abc import Collection

from grpc import aio

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.interceptors._wrap import Abort, Prepare, PreparingInterceptor
from pulsar_grpc.interceptors.context import CallContext
from pulsar_grpc.interceptors.headers import Header


class ListenerInterceptor(PreparingInterceptor):
    def __init__(self, bind_listener: str | None, known: Collection[str], abort: Abort) -> None:
        super().__init__(abort)
        self._bind_listener = bind_listener
        self._known = frozenset(known)

    def preparer(self, method: str, headers: dict[str, str], binary: dict[str, bytes]) -> Prepare:
        requested = headers.get(Header.LISTENER_NAME) or None
        bind_listener = self._bind_listener
        known = self._known

        async def prepare(ctx: CallContext, _: aio.ServicerContext) -> None:
            if requested is not None and requested not in known:
                raise InvalidArgumentError(
                    f"{Header.LISTENER_NAME}: unknown listener '{requested}' "
                    f"(known: {', '.join(sorted(known)) or 'none'})"
                )
            ctx.listener_name = requested
            ctx.bind_listener = bind_listener

        return prepare
