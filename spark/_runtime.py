"""A private event loop per Spark task or driver object, running the asyncio client.

Spark calls the data source from plain threads; the client SDK is asyncio-first. Driving our
own loop with ``run_until_complete`` (instead of the SDK's SyncClient, which hops threads per
call) lets a task pull thousands of messages per hop, which is what makes reads fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from pulsar_grpc.client import Client, ConnectError

from ._options import ClientOptions

T = TypeVar("T")


class BrokerUnreachable(ConnectionError):
    """The broker at service.url did not answer within operationTimeoutMs."""


class LoopRunner:
    """An event loop owned by one thread, plus one client created on it."""

    def __init__(self, options: ClientOptions) -> None:
        self.options = options
        self.loop = asyncio.new_event_loop()
        self.client: Client = self.run(_make(options))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` to completion on this runner's loop.

        The SDK retries a connection within its operation timeout; when that runs out, the
        error says which URL and how long, in Spark's terms."""
        try:
            return self.loop.run_until_complete(coro)
        except ConnectError as exc:
            raise BrokerUnreachable(
                f"service.url: cannot reach the broker at {self.options.service_url} within "
                f"operationTimeoutMs={self.options.operation_timeout_ms} ({exc})"
            ) from exc

    def close(self) -> None:
        """Close the client (its producers and readers) and the loop. Idempotent."""
        if self.loop.is_closed():
            return
        try:
            self.run(self.client.close())
        finally:
            self.loop.close()

    def __enter__(self) -> LoopRunner:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _make(options: ClientOptions) -> Client:
    # Created inside the loop so that the client's channels bind to it.
    return options.client()
