"""Steady produce/consume load through the SDK, for tests that move topics underneath it
(unload, split): every message that got a receipt must be consumed, and with deduplication on
each one stored once (one message id per payload; a consumer may still see a message again after
a reconnect, with the same id, as at-least-once allows)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from pulsar_grpc.client import Client, Consumer, MessageId, Producer, Timeout


class SteadyLoad:
    """One producer per topic sending one message at a time, one consumer per topic
    receiving and acknowledging, all running until :meth:`finish`."""

    def __init__(self, client: Client, topics: list[str]) -> None:
        self.client = client
        self.topics = topics
        self.receipted: set[bytes] = set()
        self.stored: dict[bytes, set[MessageId]] = defaultdict(set)
        # The longest a single send waited for its receipt: how long producers were blocked.
        self.longest_send_s = 0.0
        self._producing = True
        self._tasks: list[asyncio.Task[None]] = []
        self._consumers: list[Consumer] = []

    async def start(self) -> SteadyLoad:
        for topic in self.topics:
            consumer = await self.client.subscribe(topic, "load", initial_position="Earliest")
            producer = await self.client.create_producer(topic)
            self._consumers.append(consumer)
            self._tasks.append(asyncio.create_task(self._produce(topic, producer)))
            self._tasks.append(asyncio.create_task(self._consume(consumer)))
        return self

    async def _produce(self, topic: str, producer: Producer) -> None:
        loop = asyncio.get_running_loop()
        i = 0
        while self._producing:
            payload = f"{topic}|{i}".encode()
            began = loop.time()
            await producer.send(payload)
            self.longest_send_s = max(self.longest_send_s, loop.time() - began)
            self.receipted.add(payload)
            i += 1
            await asyncio.sleep(0.002)

    async def _consume(self, consumer: Consumer) -> None:
        while self._producing or not self.receipted <= self.stored.keys():
            try:
                message = await consumer.receive(500)
            except Timeout:
                continue
            self.stored[message.data()].add(message.message_id())
            await consumer.acknowledge(message)

    async def receipts(self, more: int, within_s: float = 60) -> None:
        """Wait until ``more`` further messages have been receipted."""
        target = len(self.receipted) + more
        async with asyncio.timeout(within_s):
            while len(self.receipted) < target:
                self._raise_failures()
                await asyncio.sleep(0.01)

    def _raise_failures(self) -> None:
        for task in self._tasks:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def finish(self, within_s: float = 60) -> None:
        """Stop producing, consume every receipted message, and check what was stored."""
        self._producing = False
        try:
            async with asyncio.timeout(within_s):
                await asyncio.gather(*self._tasks)
        except TimeoutError:
            missing = sorted(self.receipted - self.stored.keys())
            pytest.fail(f"{len(missing)} receipted messages never consumed: {missing[:10]}")
        for consumer in self._consumers:
            await consumer.close()
        assert self.receipted <= self.stored.keys()
        twice = {p: ids for p, ids in self.stored.items() if len(ids) > 1}
        assert twice == {}, f"stored more than once: {list(twice.items())[:5]}"
