"""A gRPC client pointed at the web service port: the broker logs one line, no traceback."""

from __future__ import annotations

import logging

import grpc
import pytest

from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.wire import stub
from tests.support import BrokerThread
from tests.waiting import eventually


async def test_a_grpc_client_on_the_http_port_is_one_log_line(
    broker: BrokerThread, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="pulsar_grpc.broker.web.server")
    address = broker.http_url.removeprefix("http://")
    async with grpc.aio.insecure_channel(address) as channel:
        with pytest.raises(grpc.aio.AioRpcError):
            await stub(channel).Lookup(pb.LookupRequest(topic="t"), timeout=5)

    def logged() -> logging.LogRecord:
        records = [r for r in caplog.records if r.name == "pulsar_grpc.broker.web.server"]
        assert records
        return records[0]

    record = await eventually(logged)
    assert record.exc_info is None and record.exc_text is None
    assert "a gRPC client on the web service port?" in record.getMessage(), record.getMessage()
    assert "\n" not in record.getMessage()
