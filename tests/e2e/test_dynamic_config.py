"""Dynamic broker configuration at Pulsar's paths (/admin/v2/brokers/configuration...) and
through `pulsar-grpc admin brokers`: a broker-wide publish rate set on a running broker holds
an open producer stream at once and its removal frees it; bad names and values are refused
with 412; only super-users when authorization is on. The two-broker case is in
tests/e2e/test_cluster_rate_limits.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import grpc

from tests.e2e.ratelimit_support import Flood, within
from tests.e2e.test_authorization import (  # noqa: F401 - a fixture
    SUPER,
    authz_broker_fixture,
    http,
)
from tests.e2e.test_cli import cli
from tests.support import BrokerThread

CONFIG = "/admin/v2/brokers/configuration"
RATE = "brokerPublisherThrottlingMaxMessageRate"
# Low enough that an unlimited stream beats it several times over on a loaded 2-core machine
# (one measured 2,640 msg/s), high enough for a 10% accuracy over a 1.5 s window.
LIMIT = 300


async def call(
    broker: BrokerThread, method: str, path: str, role: str | None = None
) -> tuple[int, Any]:
    return await asyncio.to_thread(http, broker, method, path, role)


async def test_a_broker_rate_set_live_holds_an_open_stream_and_its_removal_frees_it(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory()
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        flood = await Flood(channel, "dynamic", per_request=10, size=100).start()
        await flood.receipts.wait_until(1.0)
        free = flood.receipts.rate(0.5, 1.0)
        assert await call(broker, "POST", f"{CONFIG}/{RATE}/{LIMIT}") == (204, None)
        # The first second after the change may take the new bucket's burst (one second's
        # worth); the rate that follows is the limit.
        await flood.receipts.wait_until(3.5)
        held = flood.receipts.rate(2.0, 3.5)
        assert await call(broker, "DELETE", f"{CONFIG}/{RATE}") == (204, None)
        await flood.receipts.wait_until(4.5)
        freed = flood.receipts.rate(4.0, 4.5)
        await flood.stop()
    assert free > 5 * LIMIT, free
    assert within(held, LIMIT), held
    assert freed > 5 * LIMIT, freed


async def test_names_values_and_runtime_answer_what_is_in_effect(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory(dispatchThrottlingRateInMsg=5)
    status, names = await call(broker, "GET", CONFIG)
    assert status == 200 and RATE in names and "clusterName" not in names
    assert await call(broker, "GET", f"{CONFIG}/values") == (200, {})
    assert await call(broker, "POST", f"{CONFIG}/dispatchThrottlingRateInMsg/50") == (204, None)
    assert await call(broker, "GET", f"{CONFIG}/values") == (
        200,
        {"dispatchThrottlingRateInMsg": "50"},
    )
    status, runtime = await call(broker, "GET", f"{CONFIG}/runtime")
    assert status == 200
    assert runtime["dispatchThrottlingRateInMsg"] == "50"
    assert runtime["clusterName"] == "standalone"
    assert runtime["tokenSecretKey"] == "******"
    # Removed: broker.conf's value (here the broker's start-up setting) holds again.
    assert await call(broker, "DELETE", f"{CONFIG}/dispatchThrottlingRateInMsg") == (204, None)
    status, runtime = await call(broker, "GET", f"{CONFIG}/runtime")
    assert runtime["dispatchThrottlingRateInMsg"] == "5"
    # The brokers listing next to these paths still answers.
    assert (await call(broker, "GET", "/admin/v2/brokers/standalone"))[0] == 200


async def test_a_topics_applied_rates_show_a_dynamic_default(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    """The admin API's applied view answers with the default in effect, not broker.conf's."""
    broker = broker_factory(dispatchThrottlingRatePerTopicInMsg=5)
    applied = "/admin/v2/persistent/public/default/dynamic-default/dispatchRate?applied=true"
    assert (await call(broker, "GET", applied))[1]["dispatchThrottlingRateInMsg"] == 5
    name = "dispatchThrottlingRatePerTopicInMsg"
    assert await call(broker, "POST", f"{CONFIG}/{name}/40") == (204, None)
    assert (await call(broker, "GET", applied))[1]["dispatchThrottlingRateInMsg"] == 40
    assert await call(broker, "DELETE", f"{CONFIG}/{name}") == (204, None)
    assert (await call(broker, "GET", applied))[1]["dispatchThrottlingRateInMsg"] == 5


async def test_bad_names_and_values_are_refused_with_412(broker: BrokerThread) -> None:
    cases = {
        ("POST", f"{CONFIG}/clusterName/other"): "Can't update non-dynamic configuration",
        ("POST", f"{CONFIG}/noSuchThing/1"): "is not a dynamic property",
        ("POST", f"{CONFIG}/{RATE}/fast"): "Invalid dynamic-config value",
        ("POST", f"{CONFIG}/{RATE}/-3"): "less than the minimum 0",
        ("DELETE", f"{CONFIG}/clusterName"): "Can't delete non-dynamic configuration",
    }
    for (method, path), reason in cases.items():
        status, answer = await call(broker, method, path)
        assert status == 412 and reason in answer["reason"], (path, status, answer)
    assert await call(broker, "GET", f"{CONFIG}/values") == (200, {})


async def test_only_super_users_see_or_change_the_configuration(
    authz_broker: BrokerThread,
) -> None:
    for method, path in (
        ("GET", CONFIG),
        ("GET", f"{CONFIG}/values"),
        ("GET", f"{CONFIG}/runtime"),
        ("POST", f"{CONFIG}/{RATE}/10"),
        ("DELETE", f"{CONFIG}/{RATE}"),
    ):
        status, answer = await call(authz_broker, method, path, "someone")
        assert status == 403 and "needs a super-user" in answer["reason"], (path, answer)
    assert await call(authz_broker, "POST", f"{CONFIG}/{RATE}/10", SUPER) == (204, None)
    assert await call(authz_broker, "GET", f"{CONFIG}/values", SUPER) == (200, {RATE: "10"})


def test_cli_updates_lists_and_deletes_dynamic_config(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    url = ("admin", "--admin-url", broker_factory().http_url, "brokers")
    done = cli(*url, "update-dynamic-config", "--config", RATE, "--value", "300")
    assert done.returncode == 0, done.stderr
    assert RATE in cli(*url, "list-dynamic-config").stdout.split()
    assert json.loads(cli(*url, "get-all-dynamic-config").stdout) == {RATE: "300"}
    assert json.loads(cli(*url, "get-runtime-config").stdout)[RATE] == "300"
    assert cli(*url, "delete-dynamic-config", "--config", RATE).returncode == 0
    assert json.loads(cli(*url, "get-all-dynamic-config").stdout) == {}
    bad = cli(*url, "update-dynamic-config", "--config", RATE, "--value", "x y")
    assert bad.returncode == 1 and "is not an integer" in bad.stderr, bad.stderr
