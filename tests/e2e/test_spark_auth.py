"""The Spark source and sink against a broker with token authentication: the credentials given
as Pulsar's Spark connector names them (``pulsar.client.authPluginClassName`` /
``pulsar.client.authParams``) or short (``authPlugin`` / ``authParams``) serve the write, the
batch and streaming reads and the admin listing of ``topicsPattern``; without them the query
fails with the broker's AuthenticationError; bad credentials options fail at planning."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pulsar_grpc.spark as pulsar_grpc_spark
from pulsar_grpc.broker.security.tokens import create_secret_key, create_token
from tests.e2e.sparkcheck import fresh_topic
from tests.e2e.test_spark_options import refused
from tests.support import BrokerThread
from tests.waiting import eventually_sync

FMT = pulsar_grpc_spark.FORMAT
KEY = create_secret_key()

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def token_broker(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(
        authenticationEnabled="true",
        authenticationProviders="token",
        tokenSecretKey="data:;base64," + base64.b64encode(KEY).decode(),
    )


def credentials(pulsar_names: bool) -> dict[str, str]:
    token = create_token(KEY, "spark-job", expires_at=int(time.time()) + 3600)
    if pulsar_names:
        return {
            "pulsar.client.authPluginClassName": (
                "org.apache.pulsar.client.impl.auth.AuthenticationToken"
            ),
            "pulsar.client.authParams": f"token:{token}",
        }
    return {"authPlugin": "token", "authParams": f"token:{token}"}


def read(session: SparkSession, broker: BrokerThread, **options: str) -> Any:
    reader = session.read.format(FMT).option("service.url", broker.service_url)
    return reader.options(**options).load()


def test_credentials_serve_writes_reads_and_the_admin_listing(
    session: SparkSession, token_broker: BrokerThread, tmp_path: Path
) -> None:
    target = fresh_topic("auth")
    df = session.range(0, 20).select(F.col("id").cast("string").alias("value"))
    df.write.format(FMT).option("service.url", token_broker.service_url).option(
        "topic", target
    ).options(**credentials(pulsar_names=True)).mode("append").save()

    rows = read(session, token_broker, topic=target, **credentials(pulsar_names=False))
    assert sorted(int(r.value) for r in rows.select(F.col("value").cast("string")).collect()) == (
        list(range(20))
    )
    # topicsPattern lists the namespace's topics over admin.url: the same credentials go there.
    pattern = read(
        session,
        token_broker,
        topicsPattern=target,  # a full name is a pattern matching itself
        **{"admin.url": token_broker.http_url},
        **credentials(pulsar_names=True),
    )
    assert pattern.count() == 20

    # A streaming read with the credentials sees the messages too.
    name = f"auth_stream_{time.time_ns() % 10**9}"
    query = (
        session.readStream.format(FMT)
        .option("service.url", token_broker.service_url)
        .option("topic", target)
        .option("startingOffsets", "earliest")
        .options(**credentials(pulsar_names=False))
        .load()
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        eventually_sync(
            lambda: session.table(name).count() == 20,
            timeout=120,
            what="the stream reads the 20 messages",
        )
    finally:
        query.stop()


def test_without_credentials_the_query_is_refused(
    session: SparkSession, token_broker: BrokerThread
) -> None:
    target = fresh_topic("noauth")
    line = refused(
        lambda: read(session, token_broker, topic=target, operationTimeoutMs="5000").collect()
    )
    assert "AuthenticationError" in line or "authentication" in line.lower(), line
    bad = {
        "authPlugin": ("kerberos", "authPlugin: unknown plugin 'kerberos'"),
        "authParams": ("userId:u", "authParams given without authPlugin"),
    }
    for option, (value, expected) in bad.items():
        line = refused(
            lambda o=option, v=value: read(session, token_broker, topic=target, **{o: v}).collect()
        )
        assert expected in line, line
    both = {"authToken": "x", "authPlugin": "token", "authParams": "token:y"}
    line = refused(lambda: read(session, token_broker, topic=target, **both).collect())
    assert "authToken: expected either authToken or authPlugin/authParams" in line, line
