"""A declared schema is parsed only once the call is authenticated: a caller with no
credentials is refused before the broker parses (and validates, with Avro's parser) the
definition it sent in ``x-pulsar-schema-bin``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from pulsar_grpc.interceptors import parameters
from pulsargrpc.v1 import pulsar_pb2 as pb
from tests.e2e.schemas import USER_V1, open_producer, refusal, schema_bin, version
from tests.e2e.test_authorization import AUTHZ, SUPER, token
from tests.support import BrokerThread


async def test_a_stranger_cannot_make_the_broker_parse_a_schema(
    broker_factory: Callable[..., BrokerThread], monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = broker_factory(**AUTHZ)
    parsed: list[int] = []
    real = parameters.schema_from_wire

    def counting(schema: pb.Schema) -> Any:  # the real parse, counted
        parsed.append(schema.type)
        return real(schema)

    monkeypatch.setattr(parameters, "schema_from_wire", counting)
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        for credentials in ([], [("authorization", "Bearer not-a-token")]):
            error = await refusal(channel, "typed", schema_bin(USER_V1), *credentials)
            assert error.code() is grpc.StatusCode.UNAUTHENTICATED
        assert parsed == []
        _, ready = await open_producer(
            channel, "typed", schema_bin(USER_V1), ("authorization", f"Bearer {token(SUPER)}")
        )
        assert parsed == [pb.SCHEMA_TYPE_AVRO] and ready.schema_version == version(0)
