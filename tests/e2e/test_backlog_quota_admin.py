"""Backlog quotas through Pulsar's admin API v2 paths and `pulsar-grpc admin` (pulsar-admin's
verbs): round trips at both levels, the applied quotas, refusals (bad type, policy or body:
400; a quota over the retention: 412 with Pulsar's message; a partition: 400), and quotas that
survive a broker restart and hold from the first producer after it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pulsar_grpc.broker.naming import NamespaceName
from pulsar_grpc.cli.main import main
from pulsar_grpc.client import Client, InitialPosition
from pulsar_grpc.client.exceptions import ProducerBlockedQuotaExceededException
from tests.e2e.test_authorization import (  # noqa: F401 - a fixture
    SUPER,
    authz_broker_fixture,
    http,
)
from tests.e2e.test_backlog_quota import BY_HAND, NS, PAYLOAD, set_quota
from tests.support import BrokerThread

TOPIC = "/admin/v2/persistent/public/default/quota-admin"
UNLIMITED = {"limit": -1, "limitSize": -1, "limitTime": -1, "policy": "producer_request_hold"}


async def call(
    broker: BrokerThread, method: str, path: str, body: Any = None, role: str | None = None
) -> tuple[int, Any]:
    return await asyncio.to_thread(http, broker, method, path, role, body)


def admin_cli(broker: BrokerThread, group: str, *args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["admin", "--admin-url", broker.http_url, group, *args])
    assert code == 0, out.getvalue()
    return out.getvalue()


async def test_namespace_quotas_round_trip(broker: BrokerThread) -> None:
    assert await call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})
    size = {"limitSize": 10_000, "policy": "producer_exception"}
    assert await call(broker, "POST", f"{NS}/backlogQuota", size) == (204, None)
    age = {"limitTime": 3600, "policy": "consumer_backlog_eviction"}
    path = f"{NS}/backlogQuota?backlogQuotaType=message_age"
    assert await call(broker, "POST", path, age) == (204, None)
    quotas = {
        "destination_storage": {**UNLIMITED, "limit": 10_000, **size},
        "message_age": {**UNLIMITED, **age},
    }
    assert await call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, quotas)
    status, policies = await call(broker, "GET", NS)
    assert status == 200 and policies["backlog_quota_map"] == quotas
    assert await call(broker, "DELETE", path) == (204, None)
    assert await call(broker, "DELETE", f"{NS}/backlogQuota") == (204, None)
    assert await call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})
    missing = await call(broker, "GET", "/admin/v2/namespaces/public/nope/backlogQuotaMap")
    assert missing == (404, {"reason": "Namespace public/nope does not exist"})


async def test_topic_quotas_override_and_show_applied(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(backlogQuotaDefaultLimitBytes=5_000_000)
    applied = f"{TOPIC}/backlogQuotaMap?applied=true"
    status, found = await call(broker, "GET", applied)
    assert status == 200
    assert found["destination_storage"] == {**UNLIMITED, "limit": 5_000_000, "limitSize": 5_000_000}
    await set_quota(broker, None, {"limitSize": 4000, "policy": "producer_exception"})
    assert (await call(broker, "GET", applied))[1]["destination_storage"]["limitSize"] == 4000
    own = {"limitSize": 2000, "policy": "consumer_backlog_eviction"}
    assert await call(broker, "POST", f"{TOPIC}/backlogQuota", own) == (204, None)
    expected = {**UNLIMITED, "limit": 2000, **own}
    assert await call(broker, "GET", f"{TOPIC}/backlogQuotaMap") == (
        200,
        {"destination_storage": expected},
    )
    assert (await call(broker, "GET", applied))[1]["destination_storage"] == expected
    assert await call(broker, "DELETE", f"{TOPIC}/backlogQuota") == (204, None)
    assert await call(broker, "GET", f"{TOPIC}/backlogQuotaMap") == (200, {})
    assert (await call(broker, "GET", applied))[1]["destination_storage"]["limitSize"] == 4000
    status, answer = await call(broker, "POST", f"{TOPIC}-partition-0/backlogQuota", own)
    assert status == 400 and "partition" in answer["reason"]


@pytest.mark.parametrize(
    ("query", "body", "reason"),
    [
        ("?backlogQuotaType=disk", {"limitSize": 1, "policy": "producer_exception"}, "one of"),
        ("", {"limitSize": 1, "policy": "drop_everything"}, "policy must be one of"),
        ("", {"limitSize": "1G", "policy": "producer_exception"}, "must be an integer"),
        ("", {"limitSizes": 1, "policy": "producer_exception"}, "unknown BacklogQuota field"),
        ("", [1], "must be a JSON object"),
    ],
)
async def test_bad_requests_are_refused_with_400(
    broker: BrokerThread, query: str, body: Any, reason: str
) -> None:
    status, answer = await call(broker, "POST", f"{NS}/backlogQuota{query}", body)
    assert status == 400 and reason in answer["reason"], answer
    assert await call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})


async def test_a_quota_over_the_retention_is_refused_with_412(broker: BrokerThread) -> None:
    """The retention is written straight into the Policies node: its own admin path is
    another part of issue 28's."""
    assert broker.service is not None
    retention = {"retentionTimeInMinutes": 60, "retentionSizeInMB": 1}

    def keep(node: dict[str, Any]) -> None:
        node["retention_policies"] = retention

    await broker.call(
        broker.service.permissions.update_namespace(NamespaceName.get("public/default"), keep)
    )
    too_big = {"limitSize": 1024 * 1024, "policy": "producer_exception"}
    status, answer = await call(broker, "POST", f"{NS}/backlogQuota", too_big)
    assert status == 412
    assert answer["reason"] == (
        "Backlog Quota exceeds configured retention quota for namespace. "
        "Please increase retention quota and retry"
    )
    status, answer = await call(broker, "POST", f"{TOPIC}/backlogQuota", too_big)
    assert status == 412 and "for topic" in answer["reason"]
    too_old = {"limitTime": 3600, "policy": "producer_exception"}
    path = f"{NS}/backlogQuota?backlogQuotaType=message_age"
    assert (await call(broker, "POST", path, too_old))[0] == 412
    fits = {"limitSize": 1024 * 1024 - 1, "policy": "producer_exception"}
    assert await call(broker, "POST", f"{NS}/backlogQuota", fits) == (204, None)


async def test_cli_verbs(broker: BrokerThread) -> None:
    ns, topic = "public/default", "persistent://public/default/quota-cli"
    done = await asyncio.to_thread(
        admin_cli, broker, "namespaces", "set-backlog-quota", ns, "-l", "10M", "-p",
        "producer_request_hold",
    )  # fmt: skip
    assert done == f"set the destination_storage backlog quota of {ns}\n"
    await asyncio.to_thread(
        admin_cli, broker, "namespaces", "set-backlog-quota", ns, "--limitTime", "2h",
        "--policy", "producer_exception", "--type", "message_age",
    )  # fmt: skip
    quotas = json.loads(
        await asyncio.to_thread(admin_cli, broker, "namespaces", "get-backlog-quotas", ns)
    )
    assert quotas["destination_storage"]["limitSize"] == 10 * 1024 * 1024
    assert quotas["message_age"]["limitTime"] == 7200
    await asyncio.to_thread(
        admin_cli, broker, "namespaces", "remove-backlog-quota", ns, "-t", "message_age"
    )
    quotas = json.loads(
        await asyncio.to_thread(admin_cli, broker, "namespaces", "get-backlog-quotas", ns)
    )
    assert list(quotas) == ["destination_storage"]
    await asyncio.to_thread(
        admin_cli, broker, "topics", "set-backlog-quota", topic, "--limitSize", "1k", "-p",
        "consumer_backlog_eviction",
    )  # fmt: skip
    applied = json.loads(
        await asyncio.to_thread(admin_cli, broker, "topics", "get-backlog-quotas", topic, "-ap")
    )
    assert applied["destination_storage"]["limitSize"] == 1024
    assert applied["destination_storage"]["policy"] == "consumer_backlog_eviction"
    await asyncio.to_thread(admin_cli, broker, "topics", "remove-backlog-quota", topic)
    own = await asyncio.to_thread(admin_cli, broker, "topics", "get-backlog-quotas", topic)
    assert json.loads(own) == {}


async def test_quotas_survive_a_restart(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    data = tmp_path / "restarted"
    broker = broker_factory(data_dir=data, **BY_HAND)
    await set_quota(broker, None, {"limitSize": 1000, "policy": "producer_exception"})
    async with Client(broker.service_url) as client:
        await client.subscribe("kept", "slow", initial_position=InitialPosition.Earliest)
        producer = await client.create_producer("kept", batching_enabled=False)
        for _ in range(4):
            await producer.send(PAYLOAD)
    assert broker.service is not None
    await broker.call(broker.service.close())  # the data directory is free again
    again = broker_factory(data_dir=data, **BY_HAND)
    status, quotas = await call(again, "GET", f"{NS}/backlogQuotaMap")
    assert status == 200 and quotas["destination_storage"]["limitSize"] == 1000
    async with Client(again.service_url) as client:
        with pytest.raises(ProducerBlockedQuotaExceededException):
            await client.create_producer("kept")


async def test_only_tenant_admins_read_and_change_quotas(authz_broker: BrokerThread) -> None:
    quota = {"limitSize": 1000, "policy": "producer_exception"}
    cases = (
        ("POST", f"{NS}/backlogQuota", quota),
        ("GET", f"{NS}/backlogQuotaMap", None),
        ("DELETE", f"{NS}/backlogQuota", None),
        ("POST", f"{TOPIC}/backlogQuota", quota),
        ("GET", f"{TOPIC}/backlogQuotaMap", None),
    )
    for method, path, body in cases:
        status, answer = await call(authz_broker, method, path, body, "stranger")
        assert status == 403 and "stranger" in answer["reason"], (method, path, status, answer)
    assert await call(authz_broker, "POST", f"{NS}/backlogQuota", quota, SUPER) == (204, None)


def test_cli_refuses_a_quota_without_its_limit(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["admin", "--admin-url", broker.http_url, "namespaces", "set-backlog-quota"]
    assert main([*args, "public/default", "-p", "producer_exception"]) == 2
    assert "needs a size limit" in capsys.readouterr().err
    age = ["public/default", "-p", "producer_exception", "-t", "message_age", "-l", "1M"]
    assert main([*args, *age]) == 2
    assert "needs a time limit" in capsys.readouterr().err
