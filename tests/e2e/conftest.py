"""Fixtures shared by end-to-end modules."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from tests.support import BrokerThread

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def session() -> Iterator[object]:
    """One local SparkSession for every Spark test: JVM start-up is the expensive part."""
    from pyspark.sql import SparkSession

    import pulsar_grpc.spark as pulsar_grpc_spark

    # Python workers must use this venv and import spark/ and client/ from this checkout.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pulsar-grpc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        # a progress event per idle trigger too (default: one per 10 s), which tests wait on
        .config("spark.sql.streaming.noDataProgressEventInterval", "50ms")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    pulsar_grpc_spark.register(spark)
    yield spark
    spark.stop()


@pytest.fixture
async def channel(broker: BrokerThread) -> AsyncIterator[grpc.aio.Channel]:
    """A raw channel to the test's broker, for tests that speak the wire protocol directly."""
    async with grpc.aio.insecure_channel(broker.grpc_address) as ch:
        yield ch
