"""Drain: once the broker starts shutting down, the gRPC health service says NOT_SERVING for ""
and for the service name, to every Watch and Check, before the broker ends its streams, so a
load balancer stops sending new streams to it first (the stream ends come after)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from pulsar_grpc.client import Client
from pulsar_grpc.handler.protocol import SERVICE_NAME
from tests.support import BrokerThread

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


async def watching(health: health_pb2_grpc.HealthStub, name: str) -> asyncio.Future[list[int]]:
    """Start a Watch of ``name``; once it has reported its first status, the statuses it
    reports until its stream ends (the server stopped), that first one included."""
    call = health.Watch(health_pb2.HealthCheckRequest(service=name), timeout=30)
    first = await call.read()
    assert isinstance(first, health_pb2.HealthCheckResponse)

    async def rest() -> list[int]:
        seen = [first.status]
        try:
            while isinstance(answer := await call.read(), health_pb2.HealthCheckResponse):
                seen.append(answer.status)
        except grpc.aio.AioRpcError:
            pass  # the server went away after the last status
        return seen

    return asyncio.ensure_future(rest())


async def test_health_reports_not_serving_as_soon_as_shutdown_starts(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory()
    assert broker.service is not None
    service = broker.service
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", SERVICE_NAME):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
            assert answer.status == SERVING
        watches = [await watching(health, name) for name in ("", SERVICE_NAME)]
        async with Client(broker.service_url) as client:
            # A producer whose stream is open while the broker drains: it still publishes.
            producer = await client.create_producer(f"drain-{uuid.uuid4().hex[:8]}")
            await producer.send(b"before")

            async def drain() -> None:
                for handler in service.handlers:
                    await handler.drain()

            await broker.call(drain())  # the first step of close(), alone
            for name in ("", SERVICE_NAME):
                answer = await health.Check(health_pb2.HealthCheckRequest(service=name), timeout=10)
                assert answer.status == NOT_SERVING
            await producer.send(b"while draining")  # open streams are not cut by the drain

            await broker.call(service.close())
            broker.service = None  # closed: the fixture has nothing left to close
            for watch in watches:
                seen = await asyncio.wait_for(watch, 30)
                # SERVING first, then NOT_SERVING before the server stopped.
                assert seen == [SERVING, NOT_SERVING]


async def test_close_tells_watchers_before_the_server_stops(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory()
    assert broker.service is not None
    service = broker.service
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        watch = await watching(health, "")
        await broker.call(service.close())
        broker.service = None
        # Without the drain, the Watch would end with the server, never saying NOT_SERVING.
        assert await asyncio.wait_for(watch, 30) == [SERVING, NOT_SERVING]
