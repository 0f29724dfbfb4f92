"""WatchTopicOwnership on the wire, and the SDK moving on its events, across three in-process
brokers (a shared memory: metadata store, one real PostgreSQL ledger store).

The raw RPC: the first responses are each bundle's state (initial), a lookup's placement is
told with the owner's addresses for the listener the watch came through, an unload is told as
UNLOADING then UNOWNED; bad requests end with INVALID_ARGUMENT and Pulsar's error code, a
standalone broker answers UNIMPLEMENTED, and only once the call's credentials passed. The SDK:
a producer and a consumer whose backoff would keep them away for a minute are back right after
an unload, woken by the event.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import aiohttp
import grpc
import pytest

from pulsar_grpc.broker.errors import ServerError
from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.broker.security.tokens import create_token
from pulsar_grpc.client import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.cluster import BrokerMember, one_topic_per_bundle, start_brokers
from tests.e2e.test_token_authentication import KEY, token_broker
from tests.e2e.wire import error_code, stub
from tests.postgres import postgres_server, postgres_url
from tests.support import BrokerThread
from tests.waiting import eventually

__all__ = ["postgres_server", "postgres_url", "token_broker"]  # fixtures

NS = "/admin/v2/namespaces/public/default"
BUNDLES = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4)
MINUTE_MS = 60_000
Watch = grpc.aio.UnaryStreamCall  # type: ignore[type-arg]


@pytest.fixture
def cluster(broker_factory: Callable[..., BrokerThread], postgres_url: str) -> list[BrokerMember]:
    return start_brokers(
        broker_factory, f"memory:watch-{uuid.uuid4().hex[:8]}", ledgerStorageUrl=postgres_url
    )


@pytest.fixture
async def channel(cluster: list[BrokerMember]) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(cluster[0].grpc("internal")) as ch:
        yield ch


async def next_response(call: Watch) -> pb.WatchTopicOwnershipResponse:
    async with asyncio.timeout(30):
        response: pb.WatchTopicOwnershipResponse = await call.read()
    assert response is not grpc.aio.EOF
    return response


async def unload(owner: BrokerMember, range_str: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.put(f"{owner.http('internal')}{NS}/{range_str}/unload") as response,
    ):
        assert response.status == 204, await response.text()


def owner_of(cluster: list[BrokerMember], grpc_url: str) -> BrokerMember:
    (owner,) = [m for m in cluster if m.answer("internal")["grpc_url"] == grpc_url]
    return owner


async def test_the_watch_tells_placement_and_unload_with_the_listeners_addresses(
    cluster: list[BrokerMember], channel: grpc.aio.Channel
) -> None:
    topic = one_topic_per_bundle("watched")[1]
    call = stub(channel).WatchTopicOwnership(
        pb.WatchTopicOwnershipRequest(topics=[topic.full_name, "other"])
    )
    first = [await next_response(call), await next_response(call)]
    assert all(r.initial and r.state == pb.OWNERSHIP_STATE_UNOWNED for r in first)
    mine = next(r for r in first if topic.full_name in r.topics)
    assert mine.bundle == str(BUNDLES.bundle_for(topic)) and list(mine.topics) == [topic.full_name]

    # An external watch of the same topic: the owner's addresses for that listener.
    async with grpc.aio.insecure_channel(cluster[1].grpc("external")) as external:
        external_call = stub(external).WatchTopicOwnership(
            pb.WatchTopicOwnershipRequest(topics=[topic.full_name])
        )
        await next_response(external_call)
        async with Client(cluster[2].service_url) as client:
            url = (await client.lookup(topic.full_name)).grpc_url  # places the bundle
        owned = await next_response(call)
        assert owned.state == pb.OWNERSHIP_STATE_OWNED and not owned.initial
        assert owned.grpc_url == url
        owner = owner_of(cluster, url)
        seen = await next_response(external_call)
        external_call.cancel()
    assert (seen.grpc_url, seen.grpc_url_tls) == (
        owner.answer("external")["grpc_url"],
        owner.answer("external")["grpc_url_tls"],
    )

    await unload(owner, BUNDLES.bundle_for(topic).range_str)
    states = [(await next_response(call)).state]
    if states[0] == pb.OWNERSHIP_STATE_UNLOADING:  # may be replaced by UNOWNED before it is read
        states.append((await next_response(call)).state)
    assert states[-1] == pb.OWNERSHIP_STATE_UNOWNED
    call.cancel()


@pytest.mark.parametrize(
    ("request_bytes", "message"),
    [
        (pb.WatchTopicOwnershipRequest().SerializeToString(), "at least one topic"),
        (pb.WatchTopicOwnershipRequest(topics=["t", "t"]).SerializeToString(), "named twice"),
        (
            pb.WatchTopicOwnershipRequest(topics=["persistent://x"]).SerializeToString(),
            "invalid topic name",
        ),
        (
            pb.WatchTopicOwnershipRequest(topics=["t"] * 10_001).SerializeToString(),
            "at most 10000 topics",
        ),
        (b"\xff\xff", "WatchTopicOwnershipRequest"),
    ],
)
async def test_a_bad_watch_ends_invalid_argument_naming_what_is_wrong(
    channel: grpc.aio.Channel, request_bytes: bytes, message: str
) -> None:
    method = channel.unary_stream(
        "/pulsargrpc.v1.PulsarService/WatchTopicOwnership",
        request_serializer=lambda raw: raw,
        response_deserializer=pb.WatchTopicOwnershipResponse.FromString,
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await method(request_bytes).read()
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in (refused.value.details() or "")
    assert error_code(refused.value) in (ServerError.InvalidTopicName, ServerError.UnknownError)


async def test_a_standalone_broker_answers_unimplemented(broker: BrokerThread) -> None:
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        call = stub(ch).WatchTopicOwnership(pb.WatchTopicOwnershipRequest(topics=["t"]))
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await call.read()
    assert refused.value.code() == grpc.StatusCode.UNIMPLEMENTED


async def test_the_watch_is_authenticated_like_every_call(token_broker: BrokerThread) -> None:
    """A server-streaming call goes through the interceptors too: no credentials, no answer
    (before the broker even says it has nothing to watch)."""
    good = create_token(KEY, "alice", expires_at=int(time.time()) + 3600)
    request = pb.WatchTopicOwnershipRequest(topics=["t"])
    async with grpc.aio.insecure_channel(token_broker.grpc_address) as ch:
        for metadata, status in [
            ((), grpc.StatusCode.UNAUTHENTICATED),
            ((("authorization", f"Bearer {good}"),), grpc.StatusCode.UNIMPLEMENTED),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub(ch).WatchTopicOwnership(request, metadata=metadata).read()
            assert refused.value.code() == status


async def test_after_an_unload_producer_and_consumer_are_back_before_their_backoff(
    cluster: list[BrokerMember],
) -> None:
    """Their reconnects wait a minute (initial_backoff_interval_ms): only the event brings them
    back within the test."""
    topic = one_topic_per_bundle("moved")[2].full_name
    async with Client(
        cluster[0].service_url,
        initial_backoff_interval_ms=MINUTE_MS,
        max_backoff_interval_ms=MINUTE_MS,
    ) as client:
        consumer = await client.subscribe(topic, "s", initial_position="earliest")
        producer = await client.create_producer(topic, batching_enabled=False)
        await producer.send(b"before")
        assert (await consumer.receive(timeout_millis=30_000)).data() == b"before"
        await eventually(lambda: client.ownership_watch.topics == [topic], timeout=30)
        await eventually(lambda: client.ownership_watch.events >= 1, timeout=30)
        owner = owner_of(cluster, (await client.lookup(topic)).grpc_url)

        await unload(owner, BUNDLES.bundle_for(TopicName.get(topic)).range_str)
        async with asyncio.timeout(40):  # well before the minute's backoff
            await producer.send(b"after")
            # "before" again first if its ack had not been stored before the unload
            while (await consumer.receive()).data() != b"after":
                pass
        (produce,) = producer._partitions
        (consume,) = consumer._streams.values()
        assert produce.connection.reconnects_on_event == 1
        assert consume.connection.reconnects_on_event == 1
        assert client.ownership_watch.woken >= 2
