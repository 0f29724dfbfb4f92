"""What producers and consumers need of a bidirectional gRPC stream, and its single writer."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import grpc

from ._errors import ConnectError, PulsarException, Timeout, error_from_rpc

Metadata = tuple[tuple[str, str | bytes], ...]


class StreamCall(Protocol):
    """The part of ``grpc.aio.StreamStreamCall`` the client uses (tests pass fakes)."""

    async def write(self, request: Any) -> None: ...

    async def done_writing(self) -> None: ...

    async def read(self) -> Any: ...

    def cancel(self) -> bool: ...


# Binary headers (names ending in -bin, such as the declared schema) take bytes.
Params = dict[str, str | bytes | int | bool | None]
# Looks the topic up and opens a stream on the broker that owns it; the parameters are merged
# over those the handle was created with (a reconnecting producer names itself, a reader says
# where to resume). The client makes one per handle; tests pass fakes.
Connect = Callable[[Params], Awaitable[StreamCall]]


def call_metadata(params: Params) -> Metadata:
    """Call metadata from parameters: None values are left out, bytes (binary headers) stay
    bytes, the rest become strings; names (a :class:`Header`) go as plain strings.

    >>> call_metadata({"x-pulsar-topic": "t", "x-pulsar-durable": False, "x-pulsar-x": None})
    (('x-pulsar-topic', 't'), ('x-pulsar-durable', 'false'))
    """
    out: list[tuple[str, str | bytes]] = []
    for key, value in params.items():
        if value is None:
            continue
        if isinstance(value, bytes):
            out.append((str(key), value))
            continue
        text = ("true" if value else "false") if isinstance(value, bool) else str(value)
        out.append((str(key), text))
    return tuple(out)


async def open_expecting(
    connect: Connect, params: Params, first: str, timeout_s: float
) -> tuple[StreamCall, Any]:
    """Open a stream and wait for its first response, which must be the ``first`` field of
    the response oneof (``ready`` for Produce, ``subscribed`` for Consume)."""
    call = await connect(params)
    try:
        response = await asyncio.wait_for(call.read(), timeout_s)
    except TimeoutError:
        call.cancel()
        raise Timeout(f"timed out waiting for the broker's {first!r} answer") from None
    except grpc.aio.AioRpcError as exc:
        raise error_from_rpc(exc) from None
    except asyncio.CancelledError:  # the handle closed while (re)connecting
        call.cancel()
        raise
    if response is grpc.aio.EOF or response.WhichOneof("response") != first:
        call.cancel()
        raise ConnectError(f"the broker did not answer {first!r}")
    return call, getattr(response, first)


def as_pulsar_error(exc: BaseException) -> PulsarException:
    """The client error for anything a stream raised."""
    if isinstance(exc, PulsarException):
        return exc
    if isinstance(exc, grpc.aio.AioRpcError):
        return error_from_rpc(exc)
    return ConnectError(f"stream failed: {exc!r}")


# How long close() gives the broker to end a stream after half-closing it (the last receipt
# or acks are on their way): producers and consumers alike.
CLOSE_GRACE_S = 2.0


def cancel_stream(
    reader: asyncio.Task[None] | None, writer: StreamWriter | None, call: StreamCall | None
) -> None:
    """End a stream from the client's side: its read task (unless that is the caller), its
    writer and the call itself."""
    if reader is not None and reader is not asyncio.current_task():
        reader.cancel()
    if writer is not None:
        writer.cancel()
    if call is not None:
        call.cancel()


class StreamWriter:
    """Writes requests in order from one task: grpc.aio forbids concurrent writes.

    ``send`` never blocks, so callers on the hot path (acks, permits, batches) only append to
    a queue; what bounds the queue is the owner's own limit (pending messages, permits).
    """

    _DONE = object()

    def __init__(self, call: StreamCall, on_error: Callable[[PulsarException], None]) -> None:
        self._call = call
        self._on_error = on_error
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def send(self, request: Any) -> None:
        """Queue a request for writing."""
        self._queue.put_nowait(request)

    async def close(self) -> None:
        """Write what is queued, then half-close the stream."""
        self._queue.put_nowait(self._DONE)
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    def cancel(self) -> None:
        """Stop writing at once."""
        if self._task is not asyncio.current_task():
            self._task.cancel()

    async def _run(self) -> None:
        try:
            while True:
                request = await self._queue.get()
                if request is self._DONE:
                    await self._call.done_writing()
                    return
                await self._call.write(request)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream is broken: the owner fails what is pending
            self._on_error(as_pulsar_error(exc))
