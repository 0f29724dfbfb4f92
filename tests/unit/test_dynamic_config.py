"""Dynamic configuration: which names and values are taken, and how overrides in the metadata
store reach each broker as a change its listeners apply, the configuration as loaded left
unwritten (two brokers' views of one in-memory store); the REST paths and live limits are in
tests/e2e/test_dynamic_config.py."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from pulsar_grpc.broker.config import ServiceConfiguration, load_config
from pulsar_grpc.broker.dynamic_config import (
    DYNAMIC_CONFIG_PATH,
    MASK,
    DynamicConfig,
    check_dynamic,
    parse_node,
)
from pulsar_grpc.broker.errors import PreconditionFailedError
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from tests.waiting import eventually

RATE = "brokerPublisherThrottlingMaxMessageRate"


def test_only_dynamic_properties_with_valid_values_are_taken() -> None:
    assert check_dynamic(RATE, "1000") == 1000
    assert check_dynamic("dispatchThrottlingRateInByte", " 0 ") == 0
    refused = {
        ("clusterName", "x"): "Can't update non-dynamic configuration",
        ("noSuchProperty", "1"): "is not a dynamic property",
        (RATE, "fast"): "Invalid dynamic-config value: brokerPublisherThrottlingMaxMessageRate: "
        "'fast' is not an integer",
        (RATE, "1.5"): "is not an integer",
        (RATE, "-1"): "-1 is less than the minimum 0",
    }
    for (name, value), reason in refused.items():
        with pytest.raises(PreconditionFailedError, match=reason):
            check_dynamic(name, value)


def test_a_node_written_by_another_tool_is_read_as_far_as_it_makes_sense() -> None:
    assert parse_node(b'{"a": "1", "b": 2}') == {"a": "1"}
    assert parse_node(b"[1]") == {}
    assert parse_node(b"not json") == {}
    assert parse_node(b"") == {}


async def test_overrides_reach_every_broker_and_a_removal_restores_the_file_value() -> None:
    name = f"dyn-{uuid.uuid4().hex}"
    configs = [load_config(None, {}, {RATE: "7"}) for _ in range(2)]
    stores = [MemoryMetadataStore(name) for _ in range(2)]
    told: list[list[ServiceConfiguration]] = [[], []]  # what each broker's listener was told

    def listener(i: int) -> Callable[[ServiceConfiguration], None]:
        return told[i].append

    def applied(i: int) -> ServiceConfiguration:
        return told[i][-1] if told[i] else configs[i]

    brokers = [DynamicConfig(configs[i], stores[i], [listener(i)]) for i in range(2)]
    for broker in brokers:
        await broker.start()
    assert told == [[], []]  # nothing stored: broker.conf's values hold
    await brokers[0].update(RATE, "500")
    assert applied(0).brokerPublisherThrottlingMaxMessageRate == 500  # applied before answering
    assert brokers[0].effective is applied(0)
    # The configuration as loaded is not written: only the listeners apply a change.
    assert configs[0].brokerPublisherThrottlingMaxMessageRate == 7

    async def sees(i: int, value: int) -> None:
        await eventually(lambda: applied(i).brokerPublisherThrottlingMaxMessageRate == value)

    await sees(1, 500)
    assert brokers[1].overrides == {RATE: "500"}
    assert await brokers[1].stored() == {RATE: "500"}
    assert brokers[1].runtime()[RATE] == "500"
    assert brokers[1].runtime()["tokenSecretKey"] == MASK
    await brokers[1].delete(RATE)
    assert applied(1).brokerPublisherThrottlingMaxMessageRate == 7  # applied before answering
    await sees(0, 7)
    assert len(told[0]) >= 2 and len(told[1]) >= 2
    # A bad value written by another tool is ignored (logged), the others applied.
    await stores[0].put(
        DYNAMIC_CONFIG_PATH,
        json.dumps({RATE: "lots", "dispatchThrottlingRateInMsg": "9"}).encode(),
        (await stores[0].get(DYNAMIC_CONFIG_PATH)).version,  # type: ignore[union-attr]
    )
    await eventually(lambda: applied(1).dispatchThrottlingRateInMsg == 9)
    assert applied(1).brokerPublisherThrottlingMaxMessageRate == 7
    assert brokers[1].overrides == {"dispatchThrottlingRateInMsg": "9"}
    for i in range(2):
        await brokers[i].close()
        await stores[i].close()


async def test_the_runtime_view_masks_passwords_in_urls() -> None:
    config = load_config(None, {}, {"ledgerStorageUrl": "postgresql://app:s3cr:et@db:5432/pg"})
    store = MemoryMetadataStore(f"mask-{uuid.uuid4().hex}")
    runtime = DynamicConfig(config, store, []).runtime()
    assert runtime["ledgerStorageUrl"] == "postgresql://app:******@db:5432/pg"
    assert runtime["metadataStoreUrl"] == config.metadataStoreUrl  # no password: unchanged
