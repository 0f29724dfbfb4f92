"""The panels of Pulsar's public Grafana dashboards (overview, topic, messaging: their queries
in tests/data/grafana/) against a live broker: a real Prometheus scrapes it every second while
the test produces to and consumes from a topic, and every panel's query, with the dashboards'
template variables ($cluster, $namespace, $topic) set to the test's, returns data.

The few that cannot are listed in EXPECTED_EMPTY with the reason; a query listed there that
does return data fails the test too, so the list stays true.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pulsar_grpc.client import Client
from tests.prometheus_server import PrometheusServer
from tests.support import BrokerThread
from tests.waiting import eventually

DASHBOARDS = Path(__file__).parent.parent / "data" / "grafana"
JOB = "broker"  # the dashboards select job=~"broker"

_NODE_EXPORTER = "a host metric of Prometheus' node_exporter, not exported by a broker"
_OTHER_JOB = "counts another job's targets (a Pulsar cluster's {} processes): no such process here"
# A substring of the query -> why no broker can fill it.
EXPECTED_EMPTY = {
    "node_cpu_seconds_total": _NODE_EXPORTER,
    "node_memory_": _NODE_EXPORTER,
    'up{job="zookeeper"}': _OTHER_JOB.format("ZooKeeper"),
    'up{job="bookie"}': _OTHER_JOB.format("BookKeeper bookie; ledgers live in the ledger store"),
    'up{job="proxy"}': _OTHER_JOB.format("proxy"),
    "pulsar_replication_": "geo-replication between clusters: a feature the product lacks",
    "pulsar_entry_size_overflow": (
        "the dashboard's misspelling: Pulsar exports pulsar_entry_size_le_overflow (so does "
        "this broker), so the panel's series is empty against Pulsar too"
    ),
    "pulsar_storage_read_latency_count": (
        "Pulsar exports no such family (no read-latency buckets): empty against Pulsar too"
    ),
}


def panels() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, query) for every query of the three dashboards."""
    found = []
    for name in ("overview", "topic", "messaging"):
        dashboard = json.loads((DASHBOARDS / f"{name}.json").read_text())
        found += [(name, p["title"], p["expr"]) for p in dashboard["panels"]]
    return found


def expected_empty(query: str) -> str | None:
    return next((why for key, why in EXPECTED_EMPTY.items() if key in query), None)


@pytest.fixture
async def traffic(broker: BrokerThread) -> AsyncIterator[str]:
    """A topic being produced to and consumed from (and acked) until the test ends."""
    topic = f"persistent://public/default/dash-{uuid.uuid4().hex[:8]}"
    async with Client(broker.service_url) as client:
        consumer = await client.subscribe(topic, "dash-sub", initial_position="earliest")
        producer = await client.create_producer(topic, batching_enabled=False)

        async def produce() -> None:
            i = 0
            while True:
                await producer.send(b"dashboard-%06d" % i)
                i += 1
                await asyncio.sleep(0.01)

        async def consume() -> None:
            while True:
                message = await consumer.receive()
                await consumer.acknowledge(message)

        tasks = [asyncio.ensure_future(produce()), asyncio.ensure_future(consume())]
        try:
            yield topic
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await producer.close()
            await consumer.close()


@pytest.fixture
def prometheus(broker: BrokerThread) -> Callable[[], PrometheusServer]:
    return lambda: PrometheusServer(JOB, [broker.http_url.removeprefix("http://")])


async def test_every_dashboard_panel_query_returns_data(
    broker: BrokerThread, traffic: str, prometheus: Callable[[], PrometheusServer]
) -> None:
    values = {
        "$cluster": broker.config.clusterName,
        "$namespace": "public/default",
        "$topic": traffic,
    }
    server = await asyncio.to_thread(prometheus().start)
    try:

        async def scraped_with_rates() -> None:
            # Two scrapes at least, the second after a stats interval with traffic in it.
            rates = await asyncio.to_thread(
                server.query, f'pulsar_rate_in{{topic="{traffic}"}} > 0'
            )
            assert rates, "no scrape with a publish rate yet"
            count = await asyncio.to_thread(
                server.query, f'count_over_time(pulsar_rate_in{{topic="{traffic}"}}[1m]) >= 2'
            )
            assert count, "fewer than two scrapes yet"

        await eventually(scraped_with_rates, timeout=30, interval=0.5)
        empty, wrongly_listed = [], []
        for dashboard, title, query in panels():
            for variable, value in values.items():
                query = query.replace(variable, value)
            result = await asyncio.to_thread(server.query, query)
            why = expected_empty(query)
            if why is None and not result:
                empty.append(f"{dashboard} / {title}: {query}")
            elif why is not None and result:
                wrongly_listed.append(f"{dashboard} / {title}: {query} ({why})")
        assert not empty, "panels without data:\n" + "\n".join(empty)
        assert not wrongly_listed, "listed as empty but have data:\n" + "\n".join(wrongly_listed)
    finally:
        await asyncio.to_thread(server.stop)
