"""Rate limits through the admin API at Pulsar's paths and through `pulsar-grpc admin`: round
trips, bad bodies answered 400, tenant admins only under authorization, and a change that
reaches a producer's open stream within a second."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import grpc

from tests.e2e.ratelimit_support import Drain, Flood, within
from tests.e2e.test_authorization import (  # noqa: F401 - a fixture
    SUPER,
    authz_broker_fixture,
    http,
)
from tests.e2e.test_cli import cli
from tests.support import BrokerThread

NS = "/admin/v2/namespaces/public/default"
TOPIC = "/admin/v2/persistent/public/default/limited"
UNSET_DISPATCH = {
    "dispatchThrottlingRateInMsg": -1,
    "dispatchThrottlingRateInByte": -1,
    "relativeToPublishRate": False,
    "ratePeriodInSecond": 1,
}


async def call(
    broker: BrokerThread, method: str, path: str, body: Any = None, role: str | None = None
) -> tuple[int, Any]:
    return await asyncio.to_thread(http, broker, method, path, role, body)


def post_text(broker: BrokerThread, path: str, text: str) -> tuple[int, str]:
    request = urllib.request.Request(f"{broker.http_url}{path}", text.encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())["reason"]


async def test_namespace_rates_round_trip(broker: BrokerThread) -> None:
    publish = {"publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": -1}
    assert await call(broker, "GET", f"{NS}/publishRate") == (204, None)
    assert await call(broker, "POST", f"{NS}/publishRate", publish) == (204, None)
    assert await call(broker, "GET", f"{NS}/publishRate") == (200, publish)
    dispatch = {"dispatchThrottlingRateInMsg": 50, "ratePeriodInSecond": 2}
    for path in ("dispatchRate", "subscriptionDispatchRate"):
        assert await call(broker, "POST", f"{NS}/{path}", dispatch) == (204, None)
        assert await call(broker, "GET", f"{NS}/{path}") == (200, {**UNSET_DISPATCH, **dispatch})
    # The stats of a topic show the limits in effect.
    status, _ = await call(broker, "GET", f"{TOPIC}/stats")
    assert status == 404  # not loaded yet: load it by creating it
    assert (await call(broker, "PUT", TOPIC))[0] == 204
    status, stats = await call(broker, "GET", f"{TOPIC}/stats")
    assert status == 200
    assert stats["publishRateLimit"] == publish
    assert stats["dispatchRateLimit"] == {**UNSET_DISPATCH, **dispatch}
    for path in ("publishRate", "dispatchRate", "subscriptionDispatchRate"):
        assert await call(broker, "DELETE", f"{NS}/{path}") == (204, None)
        assert await call(broker, "GET", f"{NS}/{path}") == (204, None)
    assert await call(broker, "GET", "/admin/v2/namespaces/public/nope/publishRate") == (
        404,
        {"reason": "Namespace public/nope does not exist"},
    )


async def test_topic_rates_override_the_namespace_and_show_applied(broker: BrokerThread) -> None:
    assert await call(broker, "POST", f"{NS}/dispatchRate", {"dispatchThrottlingRateInMsg": 10})
    applied = await call(broker, "GET", f"{TOPIC}/dispatchRate?applied=true")
    assert applied == (200, {**UNSET_DISPATCH, "dispatchThrottlingRateInMsg": 10})
    assert await call(broker, "GET", f"{TOPIC}/dispatchRate") == (204, None)
    own = {**UNSET_DISPATCH, "dispatchThrottlingRateInByte": 4096}
    assert await call(broker, "POST", f"{TOPIC}/dispatchRate", own) == (204, None)
    assert await call(broker, "GET", f"{TOPIC}/dispatchRate") == (200, own)
    assert await call(broker, "GET", f"{TOPIC}/dispatchRate?applied=true") == (200, own)
    assert await call(broker, "DELETE", f"{TOPIC}/dispatchRate") == (204, None)
    assert (await call(broker, "GET", f"{TOPIC}/dispatchRate?applied=true"))[1] == applied[1]
    status, answer = await call(
        broker, "POST", f"{TOPIC}-partition-0/publishRate", {"publishThrottlingRateInMsg": 1}
    )
    assert status == 400 and "partition" in answer["reason"]


async def test_bad_bodies_are_refused_with_400(broker: BrokerThread) -> None:
    cases = {
        "not json": "not JSON",
        "": "a JSON body is required",
        "[1]": "must be a JSON object",
        '{"publishThrottlingRateInMsg": "100"}': "must be an integer",
        '{"publishThrottlingRateInMsg": 1.5}': "must be an integer",
        '{"publishThrottlingRateInMsgs": 100}': "unknown PublishRate field",
    }
    for body, reason in cases.items():
        status, answer = await asyncio.to_thread(post_text, broker, f"{NS}/publishRate", body)
        assert status == 400 and reason in answer, (body, status, answer)
    dispatch_cases = {
        '{"ratePeriodInSecond": 0}': "ratePeriodInSecond must be 1",
        '{"relativeToPublishRate": "yes"}': "true or false",
    }
    for body, reason in dispatch_cases.items():
        status, answer = await asyncio.to_thread(post_text, broker, f"{TOPIC}/dispatchRate", body)
        assert status == 400 and reason in answer, (body, status, answer)
    assert await call(broker, "GET", f"{NS}/publishRate") == (204, None)


async def test_only_tenant_admins_read_and_change_rates(authz_broker: BrokerThread) -> None:
    rate = {"publishThrottlingRateInMsg": 5}
    for method, body in (("POST", rate), ("GET", None), ("DELETE", None)):
        status, answer = await call(authz_broker, method, f"{NS}/publishRate", body, "stranger")
        assert status == 403 and "stranger" in answer["reason"], (method, status, answer)
    assert await call(authz_broker, "POST", f"{TOPIC}/publishRate", rate, SUPER) == (204, None)
    assert (await call(authz_broker, "GET", f"{TOPIC}/publishRate", None, "stranger"))[0] == 403


async def test_a_raised_limit_reaches_an_open_stream_within_a_second(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory()
    assert await call(broker, "POST", f"{NS}/publishRate", {"publishThrottlingRateInMsg": 500})
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        flood = await Flood(channel, "raised", per_request=10, size=400).start()
        await flood.receipts.wait_until(2.5)
        before = flood.receipts.rate(1.5, 2.5)
        raised = {"publishThrottlingRateInMsg": 2000}
        assert await call(broker, "POST", f"{NS}/publishRate", raised) == (204, None)
        # Within a second of the change, the stream runs at the new rate.
        await flood.receipts.wait_until(4.5)
        after = flood.receipts.rate(3.5, 4.5)
        await flood.stop()
    assert within(before, 500), before
    assert within(after, 2000), after
    status, stats = await call(broker, "GET", "/admin/v2/persistent/public/default/raised/stats")
    assert status == 200
    assert stats["publishRateLimitedTimes"] > 0 and stats["publishThrottledTimeMs"] > 1000
    # The current rate: over the last complete seconds, between the two limits.
    assert 400 < stats["msgRateIn"] < 2500, stats["msgRateIn"]
    assert stats["publishRateLimit"]["publishThrottlingRateInMsg"] == 2000
    metrics = await asyncio.to_thread(_text, f"{broker.http_url}/metrics")
    line = next(
        m
        for m in metrics.splitlines()
        if m.startswith("pulsar_publish_rate_limit_times{") and "/raised" in m
    )
    assert (
        float(line.split()[-1]) == stats["publishRateLimitedTimes"] or float(line.split()[-1]) > 0
    )


def _text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:
        return str(response.read().decode())


def test_cli_sets_gets_and_removes_rates(broker: BrokerThread) -> None:
    url = ("--admin-url", broker.http_url)
    done = cli("admin", *url, "namespaces", "set-publish-rate", "public/default", "-m", "300")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "set the publish-rate of public/default\n"
    got = cli("admin", *url, "namespaces", "get-publish-rate", "public/default")
    assert json.loads(got.stdout) == {
        "publishThrottlingRateInMsg": 300,
        "publishThrottlingRateInByte": -1,
    }
    done = cli(
        "admin", *url, "topics", "set-subscription-dispatch-rate", "limited",
        "--msg-dispatch-rate", "20", "--byte-dispatch-rate", "1000", "-dt", "5", "-rp",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = cli("admin", *url, "topics", "get-subscription-dispatch-rate", "limited", "--applied")
    assert json.loads(got.stdout) == {
        "dispatchThrottlingRateInMsg": 20,
        "dispatchThrottlingRateInByte": 1000,
        "relativeToPublishRate": True,
        "ratePeriodInSecond": 5,
    }
    assert cli("admin", *url, "namespaces", "remove-publish-rate", "public/default").returncode == 0
    got = cli("admin", *url, "namespaces", "get-publish-rate", "public/default")
    assert got.stdout.strip() == "null"
    bad = cli("admin", *url, "namespaces", "set-dispatch-rate", "public/default", "-dt", "0")
    assert bad.returncode == 1 and "ratePeriodInSecond must be 1" in bad.stderr, bad.stderr


async def test_a_raised_dispatch_rate_reaches_a_waiting_consumer(
    broker_factory: Callable[..., BrokerThread],
) -> None:
    broker = broker_factory()
    slow = {"dispatchThrottlingRateInMsg": 200}
    assert await call(broker, "POST", f"{NS}/subscriptionDispatchRate", slow) == (204, None)
    async with grpc.aio.insecure_channel(broker.grpc_address) as channel:
        flood = await Flood(channel, "paced", per_request=10).start()
        await flood.until_stored(4000)
        await flood.stop()
        drain = await Drain(channel, "paced", "Shared").start(permits=100_000)
        await drain.arrivals.wait_until(2.5)
        before = drain.arrivals.rate(1.5, 2.5)
        fast = {"dispatchThrottlingRateInMsg": 1000}
        assert await call(broker, "POST", f"{NS}/subscriptionDispatchRate", fast) == (204, None)
        await drain.arrivals.wait_until(4.5)
        after = drain.arrivals.rate(3.5, 4.5)
        await drain.stop()
    assert within(before, 200), before
    assert within(after, 1000), after
    status, stats = await call(broker, "GET", "/admin/v2/persistent/public/default/paced/stats")
    assert status == 200
    sub = stats["subscriptions"]["sub"]
    assert sub["dispatchThrottledMsgEventsBySubscriptionLimit"] > 0
    assert sub["dispatchThrottledMsgEventsByTopicLimit"] == 0
    # Paced for about 4.5 s, the dispatcher spends most of it waiting for the rate.
    assert 1500 < sub["dispatchThrottledTimeMs"] < 6000, sub["dispatchThrottledTimeMs"]
    assert sub["dispatchRateLimit"]["dispatchThrottlingRateInMsg"] == 1000
