"""The Produce RPC: one producer per call, one entry and one receipt per request (several
receipts may share a response: x-pulsar-grouped-receipts).

Rate limits (PIP-59): when the topic or the broker is over its publish rate, the handler stops
reading the stream until the rate allows more; HTTP/2 flow control then holds the client back,
as the binary protocol's stopped auto-read does. No error, nothing dropped, and what the
broker holds meanwhile is bounded by the stream's flow-control window.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator

from grpc import aio

from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.schema import encode_version
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.broker.topics import Producer, PublishReceipt
from pulsar_grpc.handler import codec
from pulsar_grpc.handler.access import authorize_topic, ended_when_revoked
from pulsar_grpc.handler.errors import abort, owner_trailers
from pulsar_grpc.interceptors import current
from pulsar_grpc.interceptors.context import ReceiptFraming
from pulsargrpc.v1 import pulsar_pb2 as pb

# Batches accepted but not yet durable, per producer. When full, the handler stops reading the
# stream and gRPC's flow control pushes back on the client: memory stays bounded.
MAX_PENDING_BATCHES = 1000

_END = object()


async def produce(
    broker: BrokerContext,
    requests: AsyncIterator[bytes],
    context: aio.ServicerContext,
    expiry: CredentialExpiryCheck,
) -> None:
    """Serve one producer. When the call's credentials expire (``expiry`` checks them), the
    producer is ended like one whose topic unloads: the receipts due are written first."""
    ctx = current()
    assert ctx.topic is not None and ctx.producer is not None
    try:
        await authorize_topic(broker, ctx.topic, TopicOperation.PRODUCE)
        topic = await broker.get_topic(ctx.topic)
        version = await broker.schemas.producer_schema(ctx.topic, ctx.producer.schema)
        producer = await topic.add_producer(
            ctx.producer.producer_name,
            ctx.peer,
            b"" if version is None else encode_version(version),
            ctx.client_version,
            ctx.producer.access_mode,
            ctx.producer.topic_epoch,
            ctx.producer.metadata,
        )
    except Exception as exc:
        await abort(context, exc, trailers=owner_trailers(broker, exc))
    unwatch = expiry.watch(ctx.auth_expires_at, producer.end)
    try:
        last = topic.last_sequence_id(producer.name)
        ready = pb.ProducerReady(
            producer_name=producer.name,
            last_sequence_id=last,
            topic=topic.name,
            schema_version=producer.schema_version,
            topic_epoch=producer.topic_epoch,
        )
        await context.write(pb.ProduceResponse(ready=ready))
        with ended_when_revoked(broker, ctx.topic, TopicOperation.PRODUCE, producer.end):
            await _serve(producer, requests, context, ctx.producer.receipts)
    finally:
        unwatch()
        await producer.close()


async def _serve(
    producer: Producer,
    requests: AsyncIterator[bytes],
    context: aio.ServicerContext,
    framing: ReceiptFraming,
) -> None:
    """Publish each request and write its receipt once durable, in order. When the broker ends
    the producer (``producer.ended``), reading stops, the receipts of what was already accepted
    are written, and the call ends with the broker's error: a client then resends only what
    has no receipt.

    A producer that asked for grouped receipts gets, in one response, the receipt of every
    batch that is durable by the time one is written: a group commit makes many durable at
    once, and each response written costs the broker and the client a stream message. At most
    ``MAX_PENDING_BATCHES`` are pending, which bounds a response (about 25 bytes a receipt)."""
    pending: deque[asyncio.Future[PublishReceipt] | object] = deque()
    arrived = asyncio.Event()
    room = asyncio.Semaphore(MAX_PENDING_BATCHES)  # taken before publishing: never lost
    partition = producer.partition
    failure: list[BaseException] = []
    limits = codec.BatchLimits(
        producer.max_messages_per_batch, producer.max_message_size, producer.fields_size
    )

    def queue(item: asyncio.Future[PublishReceipt] | object) -> None:
        pending.append(item)
        arrived.set()

    async def read() -> None:
        try:
            async for raw in requests:
                request = codec.parse_produce_request(raw)
                codec.check_batch(request, len(raw), limits)
                producer.check_encryption(codec.encrypted(request))
                await room.acquire()
                queue(producer.publish(raw, request.sequence_id, codec.message_count(request)))
                await producer.wait_for_publish_rate()
        except Exception as exc:
            failure.append(exc)
        finally:
            queue(_END)

    reader = asyncio.get_running_loop().create_task(read())
    producer.ended.add_done_callback(lambda _: reader.cancel())
    try:
        while True:
            while not pending:
                arrived.clear()
                await arrived.wait()
            item = pending.popleft()
            if item is _END:
                break
            room.release()
            assert isinstance(item, asyncio.Future)
            try:
                stored = [await item]
            except Exception as exc:
                failure.append(exc)
                break
            if framing is ReceiptFraming.GROUPED:
                stored += _stored_already(pending, room)
            await context.write(_response(stored, partition))
    finally:
        reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            pass
        for item in pending:  # no receipt will be written for them: nobody hears how they end
            if isinstance(item, asyncio.Future):
                item.add_done_callback(_outcome_unheard)
    if producer.ended.done():  # whatever else failed, the client must retry elsewhere
        await abort(context, producer.ended.result())
    if failure:
        await abort(context, failure[0])


def _outcome_unheard(publish: asyncio.Future[PublishReceipt]) -> None:
    """Retrieve the outcome of a publish whose stream ended first (its error was the stream's
    too, or the client left), so that asyncio does not log it as an error nobody saw."""
    if not publish.cancelled():
        publish.exception()


def _stored_already(
    pending: deque[asyncio.Future[PublishReceipt] | object], room: asyncio.Semaphore
) -> list[PublishReceipt]:
    """Take the receipts of the oldest pending batches that are durable already, in order; a
    batch not yet durable or failed stays for the writer loop to wait on or fail."""
    stored: list[PublishReceipt] = []
    while pending:
        item = pending[0]
        if not isinstance(item, asyncio.Future) or not item.done() or item.exception():
            break
        pending.popleft()
        room.release()
        stored.append(item.result())
    return stored


def _receipt(receipt: PublishReceipt, partition: int) -> pb.SendReceipt:
    position = receipt.position
    return pb.SendReceipt(
        sequence_id=receipt.sequence_id,
        highest_sequence_id=receipt.highest_sequence_id,
        ledger_id=position.ledger_id if position else 0,
        entry_id=position.entry_id if position else 0,
        partition=partition,
        batch_size=receipt.num_messages,
        duplicate=position is None,
    )


def _response(stored: list[PublishReceipt], partition: int) -> pb.ProduceResponse:
    """One receipt as ``receipt`` (what every client reads), several as ``receipts``."""
    if len(stored) == 1:
        return pb.ProduceResponse(receipt=_receipt(stored[0], partition))
    receipts = [_receipt(receipt, partition) for receipt in stored]
    return pb.ProduceResponse(receipts=pb.SendReceipts(receipts=receipts))
