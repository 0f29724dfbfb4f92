"""Several receipts per ProduceResponse (x-pulsar-grouped-receipts), on the wire: a producer
that asks gets the receipts of batches stored together in one response, in order; one that
does not (every client before it) keeps getting one ``receipt`` per response."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from pulsar_grpc import Client
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import batch, stub
from tests.support import BrokerThread

# Batches written back to back before reading: the broker stores many in one group commit.
BATCHES = 300


async def _pipelined(
    channel: grpc.aio.Channel, topic: str, *grouped: tuple[str, str]
) -> list[pb.ProduceResponse]:
    """Write BATCHES one-message batches without waiting, then read every receipt."""
    call = stub(channel).Produce(metadata=(("x-pulsar-topic", topic), *grouped))
    assert (await call.read()).HasField("ready")
    for i in range(BATCHES):
        await call.write(batch(i, [b"m%d" % i]))
    responses: list[pb.ProduceResponse] = []
    receipted = 0
    while receipted < BATCHES:
        response = await call.read()
        assert response is not grpc.aio.EOF, f"the stream ended after {receipted} receipts"
        responses.append(response)
        kind = response.WhichOneof("response")
        receipted += len(response.receipts.receipts) if kind == "receipts" else 1
    await call.done_writing()
    return responses


def _receipts(responses: list[pb.ProduceResponse]) -> list[pb.SendReceipt]:
    out: list[pb.SendReceipt] = []
    for response in responses:
        if response.WhichOneof("response") == "receipts":
            out.extend(response.receipts.receipts)
        else:
            out.append(response.receipt)
    return out


async def test_a_producer_that_does_not_ask_gets_one_receipt_per_response(
    channel: grpc.aio.Channel,
) -> None:
    responses = await _pipelined(channel, "one-each")
    assert [r.WhichOneof("response") for r in responses] == ["receipt"] * BATCHES
    assert [r.receipt.sequence_id for r in responses] == list(range(BATCHES))


async def test_a_producer_that_asks_gets_receipts_of_batches_stored_together_at_once(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    # An fsync per group commit: batches arriving while one runs are stored by the next.
    broker = broker_factory(journalSyncData=True)
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        responses = await _pipelined(channel, "grouped", ("x-pulsar-grouped-receipts", "true"))
    receipts = _receipts(responses)
    assert [r.sequence_id for r in receipts] == list(range(BATCHES))  # each once, in order
    positions = [(r.ledger_id, r.entry_id) for r in receipts]
    assert positions == sorted(set(positions)) and not any(r.duplicate for r in receipts)
    assert {r.batch_size for r in receipts} == {1}
    # 300 batches written back to back are stored by a few dozen group commits, not 300.
    assert len(responses) < BATCHES / 2, [len(r.receipts.receipts) for r in responses]
    assert any(len(r.receipts.receipts) > 1 for r in responses)


async def test_a_value_other_than_true_or_false_is_refused(channel: grpc.aio.Channel) -> None:
    metadata = (("x-pulsar-topic", "t"), ("x-pulsar-grouped-receipts", "yes"))
    call = stub(channel).Produce(metadata=metadata)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call.read()
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "x-pulsar-grouped-receipts" in (info.value.details() or "")


async def test_the_sdk_asks_and_resolves_every_send_with_its_id(broker: BrokerThread) -> None:
    """The SDK producer reads grouped receipts: every one of many pipelined sends resolves
    with its own id (entry per batch, index within it), in order."""
    async with Client(broker.service_url) as client:
        producer = await client.create_producer(
            "grouped-sdk", batching_max_messages=10, max_pending_messages=5000
        )
        futures = [await producer.enqueue(b"%d" % i) for i in range(3000)]
        await producer.flush()
        ids = [f.result() for f in futures]
        await producer.close()
    assert ids == sorted(ids) and len(set(ids)) == 3000
    assert {i.batch_index() for i in ids} == set(range(10))
