"""Admin requests whose declared counts or bodies would cost the broker out of proportion to
what they sent (issue 25's last audit item): each is refused with a 4xx and Pulsar's
``{"reason": ...}``, never a 500 with a traceback. Before: 10**9 partitions were accepted (a
stats or delete of 100,000 partitions then held the event loop 9-16 s and did not end in
two minutes), a body of 2,000 ``[`` answered 500 from every handler that parsed one, and a
rate of 10**40 was stored."""

from __future__ import annotations

import io
from collections.abc import Callable

import aiohttp
import pytest

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.partition_limits import PARTITIONS_CEILING
from tests.e2e.admin_support import call, shared_broker, unique
from tests.support import BrokerThread
from tests.waiting import eventually

__all__ = ["shared_broker"]

BASE = "/admin/v2/persistent/public/default"
# Past the recursion limit, within the 4 KiB a rate's body may have (and a body's 1 MiB).
NESTED = "[" * 2_000 + "]" * 2_000


async def test_partition_counts_over_the_safety_ceiling_are_refused(
    shared_broker: BrokerThread,
) -> None:
    b = shared_broker
    topic = unique("wide")
    refusal = {
        "reason": f"Number of partitions should be less than or equal to {PARTITIONS_CEILING}"
    }
    assert await call(b, "PUT", f"{BASE}/{topic}/partitions", 10**9) == (406, refusal)
    assert await call(b, "GET", f"{BASE}/{topic}/partitions") == (200, {"partitions": 0})

    assert await call(b, "PUT", f"{BASE}/{topic}/partitions", 2) == (204, None)
    assert await call(b, "POST", f"{BASE}/{topic}/partitions", PARTITIONS_CEILING + 1) == (
        406,
        refusal,
    )
    assert await call(b, "GET", f"{BASE}/{topic}/partitions") == (200, {"partitions": 2})
    below = {"reason": "Number of partitions should be more than 0"}
    assert await call(b, "PUT", f"{BASE}/{unique('none')}/partitions", 0) == (406, below)


async def test_max_num_partitions_per_partitioned_topic_is_pulsars_limit(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    b = broker_factory(maxNumPartitionsPerPartitionedTopic=4)
    refusal = {"reason": "Number of partitions should be less than or equal to 4"}
    assert await call(b, "PUT", f"{BASE}/five/partitions", 5) == (406, refusal)
    assert await call(b, "PUT", f"{BASE}/four/partitions", 4) == (204, None)
    assert await call(b, "POST", f"{BASE}/four/partitions", 5) == (406, refusal)
    assert await call(b, "GET", f"{BASE}/four/partitions") == (200, {"partitions": 4})


async def test_max_num_partitions_is_dynamic_within_the_ceiling(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """Dynamic in Pulsar too; the next create is held to the new value."""
    b = broker_factory()
    config = "/admin/v2/brokers/configuration/maxNumPartitionsPerPartitionedTopic"
    assert await call(b, "POST", f"{config}/2") == (204, None)
    assert b.service is not None
    resources = b.service.resources
    await eventually(lambda: resources.max_partitions == 2)
    refusal = {"reason": "Number of partitions should be less than or equal to 2"}
    assert await call(b, "PUT", f"{BASE}/three/partitions", 3) == (406, refusal)
    status, answer = await call(b, "POST", f"{config}/{PARTITIONS_CEILING + 1}")
    assert status == 412
    assert f"is over the maximum {PARTITIONS_CEILING}" in answer["reason"]


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"maxNumPartitionsPerPartitionedTopic": PARTITIONS_CEILING + 1},
            f"{PARTITIONS_CEILING + 1} is over the maximum {PARTITIONS_CEILING}",
        ),
        (
            {
                "allowAutoTopicCreationType": "partitioned",
                "defaultNumPartitions": 8,
                "maxNumPartitionsPerPartitionedTopic": 4,
            },
            "defaultNumPartitions: 8 is over the 4 partitions",
        ),
    ],
)
def test_a_configuration_asking_for_more_partitions_than_allowed_is_refused(
    broker_factory: Callable[..., BrokerThread], overrides: dict[str, object], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        broker_factory(**overrides)


@pytest.mark.parametrize(
    ("bundles", "reason"),
    [
        ({"numBundles": 10**9}, "numBundles asks for 1000000000 bundles"),
        (
            {"boundaries": [f"0x{i * 2**22:08x}" for i in range(1024)] + ["0xffffffff"]},
            "boundaries make 1024 bundles",
        ),
    ],
)
async def test_a_namespace_asking_for_more_bundles_than_allowed_is_refused(
    shared_broker: BrokerThread, bundles: dict[str, object], reason: str
) -> None:
    ns = "public/" + unique("bundles")
    path = f"/admin/v2/namespaces/{ns}"
    status, answer = await call(shared_broker, "PUT", path, {"bundles": bundles})
    assert status == 412
    assert answer["reason"] == (
        f"Invalid bundles: {reason}, over loadBalancerNamespaceMaximumBundles 128"
    )
    assert (await call(shared_broker, "GET", path))[0] == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/admin/v2/tenants/{name}"),
        ("PUT", "/admin/v2/clusters/{name}"),
        ("PUT", "/admin/v2/namespaces/public/{name}"),
        ("POST", "/admin/v2/namespaces/public/default/deduplication"),
        ("POST", "/admin/v2/namespaces/public/default/permissions/{name}"),
        ("POST", "/admin/v2/namespaces/public/default/publishRate"),
        ("PUT", BASE + "/{name}/partitions"),
        ("POST", "/admin/v2/schemas/public/default/{name}/schema"),
        ("POST", "/admin/v2/schemas/public/default/{name}/version"),
        ("POST", "/admin/v2/schemas/public/default/{name}/compatibility"),
        ("PUT", "/admin/v2/namespaces/public/default/0x00000000_0xffffffff/split"),
    ],
)
async def test_a_body_nested_past_the_recursion_limit_is_bad_input(
    shared_broker: BrokerThread, method: str, path: str
) -> None:
    status, answer = await call(
        shared_broker, method, path.format(name=unique("nested")), raw=NESTED
    )
    assert status == 400, answer
    assert answer["reason"]


async def test_a_subscription_reset_to_a_nested_body_is_bad_input(
    shared_broker: BrokerThread,
) -> None:
    b = shared_broker
    topic = unique("reset")
    assert await call(b, "PUT", f"{BASE}/{topic}") == (204, None)
    assert await call(b, "PUT", f"{BASE}/{topic}/subscription/s") == (204, None)
    status, answer = await call(b, "POST", f"{BASE}/{topic}/subscription/s/resetcursor", raw=NESTED)
    assert status == 400 and "not JSON" in answer["reason"]


async def test_a_body_over_the_web_services_limit_answers_413_with_a_reason(
    shared_broker: BrokerThread,
) -> None:
    url = f"{shared_broker.http_url}/admin/v2/tenants/{unique('big')}"
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.put(url, data=io.BytesIO(b"x" * (2 << 20))) as response,
    ):
        assert response.status == 413
        answer = await response.json()
    assert "Maximum request body size" in answer["reason"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            {"publishThrottlingRateInMsg": 2**31},
            "publishThrottlingRateInMsg 2147483648 is out of range of a Java int",
        ),
        (
            {"publishThrottlingRateInByte": 10**30},
            f"publishThrottlingRateInByte {10**30} is out of range of a Java long",
        ),
    ],
)
async def test_a_rate_out_of_pulsars_field_range_is_refused(
    shared_broker: BrokerThread, body: dict[str, int], reason: str
) -> None:
    path = "/admin/v2/namespaces/public/default/publishRate"
    assert await call(shared_broker, "POST", path, body) == (400, {"reason": reason})


@pytest.mark.parametrize(
    "path",
    [
        "/admin/v2/schemas/public/default/{name}/schema/%C2%B2",  # "²": str.isdigit, not int
        "/admin/v2/brokers/{cluster}/localhost:%C2%B2/ownedNamespaces",
    ],
)
async def test_a_number_in_a_path_that_only_unicode_calls_a_digit_is_bad_input(
    shared_broker: BrokerThread, path: str
) -> None:
    cluster = shared_broker.config.clusterName
    url = path.format(name=unique("digits"), cluster=cluster)
    status, answer = await call(shared_broker, "GET", url)
    assert status == 400, answer
    assert answer["reason"]
