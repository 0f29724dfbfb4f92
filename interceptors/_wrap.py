"""Wrapping an RPC handler so that an interceptor's work runs inside the call.

grpc.aio interceptors see only the call's metadata; anything they learn must reach the servicer
through the call's own context. So each interceptor returns the same handler wrapped with a
``prepare`` step that fills the shared :class:`CallContext` (or refuses the call) in the task
serving it, before the servicer runs.
"""

from __future__ import annotations

import inspect
from abc import abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

import grpc
from grpc import aio

from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.interceptors.context import CallContext, ensure

# Fills the context, or raises BrokerError to refuse; it may await (an authentication provider
# does) and reads the servicer context for what headers do not carry (the TLS peer).
Prepare = Callable[[CallContext, aio.ServicerContext], Awaitable[None]]
# Ends a call with a broker error: the protocol handler's own (handler/errors.py), passed in
# so that a refused call ends exactly as one the servicer refused.
Abort = Callable[[aio.ServicerContext, BaseException], Awaitable[NoReturn]]


# The kinds of call an interceptor can run inside, and how grpc builds a handler of each.
# Client-streaming (stream_unary) is absent: the service has none, and a handler of a kind not
# listed would run without its interceptors (authentication among them), so it is refused.
_KINDS = (
    ("stream_stream", grpc.stream_stream_rpc_method_handler),
    ("unary_stream", grpc.unary_stream_rpc_method_handler),
    ("unary_unary", grpc.unary_unary_rpc_method_handler),
)


def _preceded(
    inner: Callable[..., Any], before: Callable[[aio.ServicerContext], Awaitable[None]]
) -> Callable[..., Any]:
    """``inner`` (a servicer method taking the request or request stream, then the context)
    with ``before`` run first, keeping its shape: servicers that yield their responses stay
    async generators; those that return or ``context.write`` them stay coroutines."""
    if inspect.isasyncgenfunction(inner):

        async def streaming(first: Any, context: aio.ServicerContext) -> Any:
            await before(context)
            async for response in inner(first, context):
                yield response

        return streaming

    async def awaiting(first: Any, context: aio.ServicerContext) -> Any:
        await before(context)
        return await inner(first, context)

    return awaiting


def wrap_handler(
    handler: grpc.RpcMethodHandler, prepare: Prepare, abort: Abort
) -> grpc.RpcMethodHandler:
    async def before(context: aio.ServicerContext) -> None:
        try:
            await prepare(ensure(context.peer()), context)
        except BrokerError as error:
            await abort(context, error)

    for kind, make_handler in _KINDS:
        inner = getattr(handler, kind)
        if inner is not None:
            return make_handler(
                _preceded(inner, before),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
    raise TypeError(f"no interceptor wrapping for {handler!r}")


class PreparingInterceptor(aio.ServerInterceptor):
    """An interceptor that only fills the call context: subclasses say how, per call."""

    def __init__(self, abort: Abort) -> None:
        self._abort = abort

    @abstractmethod
    def preparer(
        self, method: str, headers: dict[str, str], binary: dict[str, bytes]
    ) -> Prepare | None:
        """How to prepare a call to ``method`` (its full name); None leaves it untouched.
        ``headers`` are the text headers, ``binary`` the ``-bin`` ones (bytes)."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return handler
        metadata = details.invocation_metadata or ()  # type: ignore[attr-defined]
        headers = {k: v for k, v in metadata if isinstance(v, str)}
        binary = {k: v for k, v in metadata if isinstance(v, bytes)}
        prepare = self.preparer(details.method, headers, binary)  # type: ignore[attr-defined]
        return handler if prepare is None else wrap_handler(handler, prepare, self._abort)
