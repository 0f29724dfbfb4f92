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
        self.arrivals: list[bytes] = []  # every delivery, in the order received
        # The longest a single send waited for its receipt: how long producers were blocked.
        self.longest_send_s = 0.0
        self._producing = True
        self._producers: list[asyncio.Task[None]] = []
        self._consuming: list[asyncio.Task[None]] = []
        self._consumers: list[Consumer] = []

    async def start(self) -> SteadyLoad:
        for topic in self.topics:
            consumer = await self.client.subscribe(topic, "load", initial_position="Earliest")
            producer = await self.client.create_producer(topic)
            self._consumers.append(consumer)
            self._producers.append(asyncio.create_task(self._produce(topic, producer)))
            self._consuming.append(asyncio.create_task(self._consume(consumer)))
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
        while not (self._producers_done() and self.receipted <= self.stored.keys()):
            try:
                message = await consumer.receive(500)
            except Timeout:
                continue
            self.stored[message.data()].add(message.message_id())
            self.arrivals.append(message.data())
            await consumer.acknowledge(message)

    def _producers_done(self) -> bool:
        return not self._producing and all(task.done() for task in self._producers)

    def out_of_order(self) -> dict[str, list[int]]:
        """Per topic, the messages (the producer's count) that first arrived after a later
        one of the same producer: none when each producer's messages came in order. A
        redelivery after a reconnect is a second arrival, not counted."""
        seen: set[bytes] = set()
        last: dict[str, int] = {}
        late: dict[str, list[int]] = defaultdict(list)
        for payload in self.arrivals:
            if payload in seen:
                continue
            seen.add(payload)
            topic, _, count = payload.decode().rpartition("|")
            i = int(count)
            if i < last.get(topic, -1):
                late[topic].append(i)
            last[topic] = max(i, last.get(topic, -1))
        return dict(late)

    async def receipts(self, more: int, within_s: float = 60) -> None:
        """Wait until ``more`` further messages have been receipted."""
        target = len(self.receipted) + more
        async with asyncio.timeout(within_s):
            while len(self.receipted) < target:
                self._raise_failures()
                await asyncio.sleep(0.01)

    def _raise_failures(self) -> None:
        for task in self._producers + self._consuming:
            if task.done() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def finish(self, within_s: float = 60) -> None:
        """Stop producing, consume every receipted message, and check what was stored."""
        self._producing = False
        try:
            async with asyncio.timeout(within_s):
                # The producers' last sends first: a consumer stops once it has every
                # receipted message, and a receipt still to come would be missed.
                await asyncio.gather(*self._producers)
                await asyncio.gather(*self._consuming)
        except TimeoutError:
            missing = sorted(self.receipted - self.stored.keys())
            pytest.fail(f"{len(missing)} receipted messages never consumed: {missing[:10]}")
        for consumer in self._consumers:
            await consumer.close()
        missing = sorted(self.receipted - self.stored.keys())
        assert not missing, f"{len(missing)} receipted, never consumed: {missing[:10]}"
        twice = {p: ids for p, ids in self.stored.items() if len(ids) > 1}
        assert twice == {}, f"stored more than once: {list(twice.items())[:5]}"
