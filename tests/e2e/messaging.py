"""Helpers for end-to-end tests that consume through the SDK.

"Nothing else arrives" can only be a bounded wait: ``assert_nothing_more`` receives with a
short timeout (long enough for the broker to dispatch a backlog on loopback), and fails on any
message it gets.
"""

from __future__ import annotations

import asyncio

import pytest

from pulsar_grpc.client import (
    Client,
    Consumer,
    DeadLetterPolicy,
    Message,
    Producer,
    Reader,
    Timeout,
)

RECEIVE_MS = 5000  # a message that must arrive
NOTHING_MS = 400  # bounded wait for "no (more) messages"


async def _next(source: Consumer | Reader, timeout_ms: int) -> Message:
    if isinstance(source, Reader):
        return await source.read_next(timeout_ms)
    return await source.receive(timeout_ms)


async def receive_n(
    source: Consumer | Reader, n: int, timeout_ms: int = RECEIVE_MS
) -> list[Message]:
    """Exactly ``n`` messages, each within ``timeout_ms``."""
    return [await _next(source, timeout_ms) for _ in range(n)]


async def assert_nothing_more(source: Consumer | Reader, within_ms: int = NOTHING_MS) -> None:
    """No message arrives within ``within_ms``."""
    try:
        extra = await _next(source, within_ms)
    except Timeout:
        return
    pytest.fail(
        f"unexpected message {extra.data()!r} id={extra.message_id()} "
        f"redelivery_count={extra.redelivery_count()}"
    )


class LivePublisher:
    """Publishes ``x0``, ``x1``, ... one message per entry while the block runs (and at least
    ``minimum`` of them), so a test can act while the broker is dispatching.

    >>> async with LivePublisher(producer) as live:
    ...     ...
    >>> live.sent
    """

    def __init__(self, producer: Producer, minimum: int = 50) -> None:
        self._producer = producer
        self._minimum = minimum
        self._stop = asyncio.Event()
        self._task: asyncio.Task[int] | None = None
        self.sent = 0

    async def _run(self) -> int:
        sent = 0
        while not self._stop.is_set() or sent < self._minimum:
            await self._producer.send(f"x{sent}".encode())
            sent += 1
        return sent

    async def __aenter__(self) -> LivePublisher:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._stop.set()
        self.sent = await self._task


async def dead_letter_pair(client: Client, topic: str) -> tuple[Consumer, Consumer]:
    """A reader of ``topic``'s dead-letter topic (Pulsar's ``<topic>-sub-DLQ``), subscribed
    first so it sees everything, and a Shared consumer of subscription ``sub`` whose messages go
    there after one redelivery (nacks redelivered after 100 ms)."""
    full = f"persistent://public/default/{topic}"
    dlq = await client.subscribe(f"{full}-sub-DLQ", "r", initial_position="Earliest")
    consumer = await client.subscribe(
        topic,
        "sub",
        "Shared",
        initial_position="Earliest",
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=DeadLetterPolicy(max_redeliver_count=1),
    )
    return dlq, consumer
