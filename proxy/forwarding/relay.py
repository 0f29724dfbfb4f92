"""A client's call relayed to a broker byte for byte (PIP-1's "remove the protobuf deserializer
from both connections and blindly forward byte buffers").

Messages are never decoded: the server handler and the broker call both carry raw bytes.
Flow control holds end to end because each direction has one message in hand at most: the next
client message is read only once the broker call has taken the previous one, and the next
broker message only once the client's stream has taken the previous one. A consumer that stops
reading stops the proxy reading from the broker, whose HTTP/2 window then stops the broker; the
proxy holds one message and gRPC's small write buffers per stream, whatever the backlog.

The call ends as the broker ended it: status code, message and trailing metadata (Pulsar's
error code, the rich status, the owner's address) unchanged, so a retryable end (a bundle
moving, a broker stopping) reaches the client as it left the broker. A client cancelling
cancels the broker call; a client half-closing half-closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import grpc
from grpc import aio

from pulsar_grpc.proxy.metrics import Direction, ProxyStats

Metadata = Sequence[tuple[str, str | bytes]]


async def relay_stream(
    context: aio.ServicerContext, call: aio.StreamStreamCall, stats: ProxyStats
) -> grpc.StatusCode:
    """Relay until the broker ends the call; end the client's call the same way and return
    its status code."""

    async def client_to_broker() -> None:
        while True:
            message = await context.read()
            if message is aio.EOF:
                await call.done_writing()
                return
            stats.forwarded(Direction.CLIENT_TO_BROKER, len(message))
            await call.write(message)

    upstream = asyncio.create_task(client_to_broker())
    try:
        while True:
            message = await call.read()
            if message is aio.EOF:
                break
            await context.write(message)
            stats.forwarded(Direction.BROKER_TO_CLIENT, len(message))
    except aio.AioRpcError:
        pass  # the broker ended the call: its status is read below
    finally:
        upstream.cancel()
        # A write to a call that has ended raises; the call's own status tells what happened.
        with contextlib.suppress(
            asyncio.CancelledError, aio.AioRpcError, asyncio.InvalidStateError
        ):
            await upstream
        if not call.done():
            call.cancel()  # the client went away (this task was cancelled)
    code = await call.code()
    await end_as(context, code, await call.details(), await call.trailing_metadata())
    return code


async def relay_unary(
    context: aio.ServicerContext,
    method: aio.UnaryUnaryMultiCallable,
    request: bytes,
    metadata: Metadata,
    deadline_s: float | None,
) -> bytes:
    """One unary call forwarded as is: its response bytes, or its error as the broker sent it."""
    call = method(request, metadata=metadata, timeout=deadline_s)
    try:
        response: bytes = await call
    except aio.AioRpcError as exc:
        await end_as(context, exc.code(), exc.details(), exc.trailing_metadata())
        raise AssertionError("unreachable: end_as raises on an error") from None
    trailers = await call.trailing_metadata()
    if trailers:
        context.set_trailing_metadata(tuple(trailers))
    return response


async def end_as(
    context: aio.ServicerContext,
    code: grpc.StatusCode,
    details: str | None,
    trailers: aio.Metadata | Metadata | None,
) -> None:
    """End the client's call with the broker's status and trailers (aborting on an error)."""
    trailing = tuple(trailers or ())
    if code == grpc.StatusCode.OK:
        if trailing:
            context.set_trailing_metadata(trailing)
        return
    await context.abort(code, details or "", trailing_metadata=trailing)
