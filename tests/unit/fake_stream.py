"""A grpc.aio stream-stream call stand-in: records what the client writes, replays queued
responses, so client unit tests see exactly what goes on the wire."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb


class FakeCall:
    def __init__(self) -> None:
        self.written: list[Any] = []
        self.responses: asyncio.Queue[Any] = asyncio.Queue()
        self.half_closed = False
        self.cancelled = False
        self.metadata: Any = None

    async def write(self, request: Any) -> None:
        if isinstance(request, bytes):  # the producer hand-encodes its requests
            request = pb.ProduceRequest.FromString(request)
        self.written.append(request)

    async def done_writing(self) -> None:
        self.half_closed = True
        self.responses.put_nowait(grpc.aio.EOF)

    async def read(self) -> Any:
        item = await self.responses.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def push(self, response: Any) -> None:
        self.responses.put_nowait(response)

    async def connect(self, params: Any) -> FakeCall:
        """Usable as a handle's ``connect``: records the parameters it opened with."""
        self.metadata = params
        return self

    def fail(self, status: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE, code: str = "") -> None:
        """End the stream as the broker or the network would."""
        trailers = grpc.aio.Metadata(("pulsar-error-code", code)) if code else None
        self.push(grpc.aio.AioRpcError(status, None, trailers, "stream ended"))

    def of(self, kind: str) -> list[Any]:
        """The written ConsumeRequests of one kind (flow, ack, seek, ...)."""
        return [getattr(r, kind) for r in self.written if r.WhichOneof("request") == kind]


class FakeDialer:
    """A handle's ``connect`` that opens a new FakeCall each time (a reconnect), or raises
    what ``refusals`` holds first (a failed attempt)."""

    def __init__(self, first: Any = None) -> None:
        self.calls: list[FakeCall] = []
        self.params: list[Any] = []
        self.refusals: list[BaseException] = []
        self.prepare: Any = None  # called with each new call, to queue its first response
        self.opened = asyncio.Event()

    async def connect(self, params: Any) -> FakeCall:
        self.params.append(params)
        if self.refusals:
            raise self.refusals.pop(0)
        call = FakeCall()
        call.metadata = params
        if self.prepare is not None:
            self.prepare(call)
        self.calls.append(call)
        self.opened.set()
        return call

    @property
    def last(self) -> FakeCall:
        return self.calls[-1]

    async def wait_calls(self, count: int) -> FakeCall:
        """Wait until ``count`` streams were opened; the last one."""
        while len(self.calls) < count:
            self.opened.clear()
            await self.opened.wait()
        return self.last
