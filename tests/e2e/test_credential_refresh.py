"""Streams whose credentials expire, on a real broker with token authentication and
authenticationRefreshCheckSeconds=1 (Pulsar's property): the broker ends a Produce or Consume
stream with UNAUTHENTICATED + AuthenticationError at the first check after its token's ``exp``,
never before; the SDK given a token supplier reconnects with a fresh token without the
application noticing (every send receipted, each message stored once, a consumer goes on
receiving); with a fixed token, or a supplier whose token is refused too, the application gets
an AuthenticationError saying the credentials expired, and the SDK does not loop.

Tokens live about three seconds (``exp`` is whole seconds) and are made when a test runs.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable

import grpc
import pytest

from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from pulsar_grpc.client import AuthenticationError, AuthenticationToken, Client, Producer
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.messaging import assert_nothing_more
from tests.e2e.wire import batch, error_code, stub
from tests.support import BrokerThread
from tests.waiting import eventually

KEY = create_secret_key()
LIFETIME_S = 3  # of the short tokens
CHECK_S = 1  # authenticationRefreshCheckSeconds
# Room for a loaded machine on top of the check interval: the end must come within this.
SLACK_S = 5
TIMEOUT_S = 30


@pytest.fixture
def refresh_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(
        authenticationEnabled="true",
        authenticationProviders="token",
        tokenSecretKey="data:;base64," + base64.b64encode(KEY).decode(),
        authenticationRefreshCheckSeconds=str(CHECK_S),
    )


def token(lifetime_s: float, role: str = "app") -> tuple[str, int]:
    """A token and its ``exp`` (seconds since the epoch)."""
    expires_at = int(time.time() + lifetime_s)
    return create_token(KEY, role, expires_at=expires_at), expires_at


class Supplier:
    """A token supplier that makes a short-lived token each time it is asked, and remembers
    when it made each one and when that one expires."""

    def __init__(self) -> None:
        self.tokens: list[tuple[float, int]] = []  # (made at, expires at)

    def __call__(self) -> str:
        made_at = time.time()
        made, expires_at = token(LIFETIME_S)
        self.tokens.append((made_at, expires_at))
        return made

    def expiries(self) -> list[int]:
        """When each generation of tokens expires: a generation begins with a token asked for
        after the previous generation had expired (a stream ended for its expired token and
        reconnected with a fresh one)."""
        generations: list[int] = []
        for made_at, expires_at in self.tokens:
            if not generations or made_at >= generations[-1]:
                generations.append(expires_at)
        return generations

    def generations(self) -> int:
        return len(self.expiries())


def long_lived() -> AuthenticationToken:
    return AuthenticationToken(token(3600, "observer")[0])


async def test_the_broker_ends_streams_whose_token_expired_at_the_next_check(
    refresh_broker: BrokerThread,
) -> None:
    short, expires_at = token(LIFETIME_S)
    long, _ = token(3600)
    async with grpc.aio.insecure_channel(refresh_broker.grpc_address) as channel:
        pulsar = stub(channel)

        def produce(credentials: str) -> grpc.aio.StreamStreamCall:
            return pulsar.Produce(
                metadata=(
                    ("x-pulsar-topic", "expiring"),
                    ("authorization", f"Bearer {credentials}"),
                )
            )

        producer, survivor = produce(short), produce(long)
        consumer = pulsar.Consume(
            metadata=(
                ("x-pulsar-topic", "expiring"),
                ("x-pulsar-subscription", "sub"),
                ("authorization", f"Bearer {short}"),
            )
        )
        assert (await producer.read()).WhichOneof("response") == "ready"
        assert (await survivor.read()).WhichOneof("response") == "ready"
        assert (await consumer.read()).WhichOneof("response") == "subscribed"
        await producer.write(batch(0, [b"before"]))
        assert (await producer.read()).WhichOneof("response") == "receipt"
        assert time.time() < expires_at, "the machine is too slow for this token's lifetime"

        for call in (producer, consumer):
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                await asyncio.wait_for(read_to_the_end(call), LIFETIME_S + CHECK_S + SLACK_S)
            ended_at = time.time()
            assert ended.value.code() == grpc.StatusCode.UNAUTHENTICATED, ended.value
            assert error_code(ended.value) == pb.AuthenticationError
            assert "credentials expired" in (ended.value.details() or "")
            assert expires_at <= ended_at <= expires_at + CHECK_S + SLACK_S

        # The stream opened with a token that has not expired goes on.
        await survivor.write(batch(0, [b"after"]))
        response = await asyncio.wait_for(survivor.read(), TIMEOUT_S)
        assert response.WhichOneof("response") == "receipt"
        survivor.cancel()


async def read_to_the_end(call: grpc.aio.StreamStreamCall) -> None:
    """Read until the call ends (a consumer is told it is the active one meanwhile)."""
    while await call.read() is not grpc.aio.EOF:
        pass


async def send_window(producer: Producer, start: int, size: int) -> list[int]:
    """Send ``size`` messages at once (several in flight), wait for every receipt."""
    payloads = [f"m{i}".encode() for i in range(start, start + size)]
    await asyncio.gather(*(producer.send(p) for p in payloads))
    return list(range(start, start + size))


async def test_a_producer_with_a_token_supplier_keeps_producing_across_expiry(
    refresh_broker: BrokerThread,
) -> None:
    supplier = Supplier()
    url = refresh_broker.service_url
    async with (
        Client(url, authentication=AuthenticationToken(supplier)) as client,
        Client(url, authentication=long_lived()) as observer,
    ):
        consumer = await observer.subscribe("renewed", "sub", initial_position="earliest")
        producer = await client.create_producer("renewed", batching_max_publish_delay_ms=1)
        sent: list[int] = []

        async def produce_until_renewed_twice() -> None:
            # Two expiries: the stream opened after the first renewal is ended and renewed too.
            while supplier.generations() < 3:
                sent.extend(await send_window(producer, len(sent), 10))
                # A steady rate, except from just before an expiry until the renewal: then
                # sends without a pause, so that some are in flight when the stream ends.
                if time.time() < supplier.expiries()[-1] - 0.5:
                    await asyncio.sleep(0.02)

        await asyncio.wait_for(produce_until_renewed_twice(), TIMEOUT_S)
        sent.extend(await send_window(producer, len(sent), 10))  # on the renewed stream

        received: list[bytes] = []

        async def receive_all() -> None:
            while len(received) < len(sent):
                message = await consumer.receive(timeout_ms=10_000)
                received.append(message.data())
                await consumer.acknowledge(message)

        await asyncio.wait_for(receive_all(), TIMEOUT_S)
        assert sorted(received) == sorted(f"m{i}".encode() for i in sent)  # each exactly once
        await assert_nothing_more(consumer)
        assert producer.is_connected()


async def test_a_consumer_with_a_token_supplier_keeps_receiving_across_expiry(
    refresh_broker: BrokerThread,
) -> None:
    supplier = Supplier()
    url = refresh_broker.service_url
    async with (
        Client(url, authentication=AuthenticationToken(supplier)) as client,
        Client(url, authentication=long_lived()) as observer,
    ):
        consumer = await client.subscribe("renewed-consumer", "sub", initial_position="earliest")
        producer = await observer.create_producer("renewed-consumer")
        received: set[bytes] = set()
        on_renewed_stream: list[bytes] = []

        async def receive_forever() -> None:
            while True:
                message = await consumer.receive()
                received.add(message.data())
                if supplier.generations() > 1:
                    on_renewed_stream.append(message.data())
                await consumer.acknowledge(message)

        receiving = asyncio.get_running_loop().create_task(receive_forever())
        sent = 0

        async def produce_until_received_on_a_renewed_stream() -> None:
            nonlocal sent
            while not on_renewed_stream:
                await send_window(producer, sent, 5)
                sent += 5
                await asyncio.sleep(0.02)  # a steady rate, not a wait for something
                assert not receiving.done(), receiving

        try:
            await asyncio.wait_for(produce_until_received_on_a_renewed_stream(), TIMEOUT_S)
            await eventually(lambda: len(received) == sent, TIMEOUT_S)
        finally:
            receiving.cancel()
            await asyncio.gather(receiving, return_exceptions=True)
        assert received == {f"m{i}".encode() for i in range(sent)}
        assert consumer.is_connected()


def stale_supplier() -> tuple[AuthenticationToken, list[str]]:
    """A supplier that hands out the same short-lived token every time: renewing gets a token
    the broker refuses too."""
    made, _ = token(LIFETIME_S)
    asked: list[str] = []

    def supply() -> str:
        asked.append(made)
        return made

    return AuthenticationToken(supply), asked


@pytest.mark.parametrize("kind", ["fixed token", "supplier of a stale token"])
async def test_an_expired_token_that_cannot_be_renewed_is_a_clear_error(
    refresh_broker: BrokerThread, kind: str
) -> None:
    asked: list[str] = []
    if kind == "fixed token":
        authentication = AuthenticationToken(token(LIFETIME_S)[0])
    else:
        authentication, asked = stale_supplier()
    async with Client(refresh_broker.service_url, authentication=authentication) as client:
        producer = await client.create_producer("not-renewed")
        consumer = await client.subscribe("not-renewed", "sub")
        assert producer.is_connected() and consumer.is_connected()
        created_with = len(asked)
        await eventually(
            lambda: not producer.is_connected() and not consumer.is_connected(),
            LIFETIME_S + CHECK_S + SLACK_S,
        )
        with pytest.raises(AuthenticationError, match="expired"):
            await producer.send(b"late")
        with pytest.raises(AuthenticationError, match="expired"):
            await consumer.receive(timeout_ms=TIMEOUT_S * 1000)
    # One renewal attempt per stream at most (its lookup or its stream refused), no loop.
    assert len(asked) <= created_with + 4, asked
