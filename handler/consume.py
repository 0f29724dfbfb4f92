"""The Consume RPC: one consumer per call; flow, acks and the rest arrive on the stream."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable

from grpc import aio

from broker.errors import BrokerError, InvalidArgumentError
from broker.ledger import Position
from broker.service import BrokerService
from broker.topics import AckId, Consumer, ConsumerOptions, Delivery
from handler import codec
from handler.errors import abort
from interceptors import ConsumerParams, current
from pulsargrpc.v1 import pulsar_pb2 as pb

_names = itertools.count(1)


class GrpcConsumerTransport:
    """The broker pushes into ``outbound``; the call writes it out. Permits bound its size."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.outbound: asyncio.Queue[bytes | pb.ConsumeResponse | BrokerError | None] = (
            asyncio.Queue()
        )

    def send_messages(self, deliveries: list[Delivery]) -> None:
        for response in codec.encode_message_batches(deliveries, self.partition):
            self.outbound.put_nowait(response)

    def send_active_change(self, is_active: bool) -> None:
        change = pb.ActiveConsumerChange(is_active=is_active)
        self.outbound.put_nowait(pb.ConsumeResponse(active_consumer_change=change))

    def close(self, error: BrokerError | None = None) -> None:
        self.outbound.put_nowait(error)

    def reply(self, response: pb.ConsumeResponse) -> None:
        self.outbound.put_nowait(response)


def _options(params: ConsumerParams) -> ConsumerOptions:
    return ConsumerOptions(
        name=params.consumer_name or f"consumer-{next(_names)}",
        priority_level=params.priority_level,
        ack_timeout_ms=params.ack_timeout_ms,
        negative_ack_delay_ms=params.negative_ack_delay_ms,
        max_redeliver_count=params.max_redeliver_count,
        dead_letter_topic=params.dead_letter_topic,
    )


async def consume(
    service: BrokerService, requests: AsyncIterator[pb.ConsumeRequest], context: aio.ServicerContext
) -> None:
    ctx = current()
    params = ctx.consumer
    assert ctx.topic is not None and params is not None
    transport = GrpcConsumerTransport(ctx.topic.partition_index)
    try:
        topic = await service.get_topic(ctx.topic)
        subscription = params.subscription or f"reader-{next(_names)}"
        consumer = await topic.subscribe(
            subscription,
            params.sub_type,
            _options(params),
            transport,
            initial_position=params.initial_position,
            durable=params.durable,
            start=params.start_message_id,
            start_inclusive=params.start_inclusive,
            start_batch_index=params.start_batch_index,
            client_address=ctx.peer,
        )
    except Exception as exc:
        await abort(context, exc)
    subscribed = pb.ConsumerSubscribed(
        consumer_name=consumer.name, topic=topic.name, subscription=subscription
    )
    reader = asyncio.get_running_loop().create_task(_read(consumer, transport, requests))
    try:
        await context.write(pb.ConsumeResponse(subscribed=subscribed))
        while True:
            item = await transport.outbound.get()
            if item is None:
                break
            if isinstance(item, BrokerError):
                await abort(context, item)
            await context.write(item)
    finally:
        reader.cancel()
        try:
            await reader
        except asyncio.CancelledError:
            pass
        await consumer.subscription.remove_consumer(consumer)


async def _read(
    consumer: Consumer, transport: GrpcConsumerTransport, requests: AsyncIterator[pb.ConsumeRequest]
) -> None:
    """Apply the client's requests; any error ends the call with it."""
    try:
        async for request in requests:
            await _apply(consumer, transport, request)
        transport.close(None)
    except asyncio.CancelledError:
        raise
    except BrokerError as exc:
        transport.close(exc)
    except Exception as exc:
        transport.close(BrokerError(f"internal error: {exc}"))


def _request_error(request_id: int, error: BrokerError) -> pb.ConsumeResponse:
    failure = pb.RequestError(request_id=request_id, code=int(error.code), message=error.message)
    return pb.ConsumeResponse(request_error=failure)


def _ack_reply(
    transport: GrpcConsumerTransport, request_id: int
) -> Callable[[asyncio.Future[None]], None]:
    """Once an ack is durable, answer its receipt (when asked for); a failed ack ends the call."""

    def reply(done: asyncio.Future[None]) -> None:
        if done.cancelled():
            return
        if (exc := done.exception()) is not None:
            transport.close(
                exc if isinstance(exc, BrokerError) else BrokerError(f"ack failed: {exc}")
            )
        elif request_id:
            transport.reply(pb.ConsumeResponse(ack_receipt=pb.AckReceipt(request_id=request_id)))

    return reply


async def _apply(
    consumer: Consumer, transport: GrpcConsumerTransport, request: pb.ConsumeRequest
) -> None:
    subscription = consumer.subscription
    kind = request.WhichOneof("request")
    if kind == "flow":
        subscription.flow(consumer, request.flow.permits)
    elif kind == "ack":
        ack = request.ack
        ids: list[AckId] = [
            (Position(i.ledger_id, i.entry_id), i.batch_index if i.batch_index >= 0 else -1)
            for i in ack.ids
        ]
        try:
            done = await subscription.acknowledge(consumer, ids, ack.type == pb.Cumulative)
        except BrokerError as exc:
            # A refused ack changes nothing; the consumer stays open (request_id 0 when the
            # client asked for no receipt).
            transport.reply(_request_error(ack.request_id, exc))
            return
        done.add_done_callback(_ack_reply(transport, ack.request_id))
    elif kind == "negative_ack":
        positions = [Position(i.ledger_id, i.entry_id) for i in request.negative_ack.ids]
        subscription.negative_acknowledge(consumer, positions)
    elif kind == "redeliver":
        subscription.redeliver(consumer)
        done = pb.RedeliverDone(request_id=request.redeliver.request_id)
        transport.reply(pb.ConsumeResponse(redeliver_done=done))
    elif kind == "seek":
        seek = request.seek
        done = pb.ConsumeResponse(seek_done=pb.SeekDone(request_id=seek.request_id))
        try:
            if seek.WhichOneof("target") == "message_id":
                target = seek.message_id
                await subscription.seek(
                    lambda: transport.reply(done),
                    position=Position(target.ledger_id, target.entry_id),
                    batch_index=target.batch_index,
                )
            elif seek.WhichOneof("target") == "publish_time":
                await subscription.seek(
                    lambda: transport.reply(done), publish_time=seek.publish_time
                )
            else:
                raise InvalidArgumentError("Seek needs a message_id or a publish_time")
        except BrokerError as exc:
            transport.reply(_request_error(seek.request_id, exc))
    elif kind == "unsubscribe":
        request_id = request.unsubscribe.request_id
        try:
            await subscription.unsubscribe(consumer)
        except BrokerError as exc:
            transport.reply(_request_error(request_id, exc))
            return
        transport.reply(pb.ConsumeResponse(unsubscribed=pb.Unsubscribed(request_id=request_id)))
        transport.close(None)
    else:
        raise InvalidArgumentError("empty ConsumeRequest")
