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

    def open(self, metadata: Any) -> FakeCall:
        """Usable as the client's ``open_stream``."""
        self.metadata = metadata
        return self

    def of(self, kind: str) -> list[Any]:
        """The written ConsumeRequests of one kind (flow, ack, seek, ...)."""
        return [getattr(r, kind) for r in self.written if r.WhichOneof("request") == kind]
