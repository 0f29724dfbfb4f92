"""`pulsar-grpc broker` starts a cluster member and refuses to start as one without a shared
metadata store; producer names stay unique across a restart of a broker on its embedded store."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.metadata import ZooKeeperMetadataStore
from pulsar_grpc.client import Client
from tests.support import BrokerThread
from tests.zookeeper import ZooKeeperServer, zk_chroot, zookeeper

__all__ = ["zk_chroot", "zookeeper"]  # fixtures, imported to be found

ROOT = Path(__file__).resolve().parents[2]
READY = re.compile(r"pulsar-grpc broker ready grpc=grpc://(\S+) http=http://(\S+)")


def broker_command(config: Path) -> list[str]:
    return [
        sys.executable, "-m", "pulsar_grpc.cli.main", "broker", "--config", str(config),
        "--log-level", "WARNING",
    ]  # fmt: skip


def test_broker_without_a_cluster_metadata_store_refuses_to_start(tmp_path: Path) -> None:
    config = tmp_path / "broker.conf"
    config.write_text(f"dataDirectory={tmp_path / 'data'}\ngrpcServicePort=0\nwebServicePort=0\n")
    result = subprocess.run(
        broker_command(config),
        cwd=ROOT,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "metadataStoreUrl" in lines[0], result.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was opened


async def test_broker_joins_the_cluster_on_zookeeper_and_leaves_on_sigterm(
    zookeeper: ZooKeeperServer, zk_chroot: str, tmp_path: Path
) -> None:
    config = tmp_path / "broker.conf"
    config.write_text(
        f"metadataStoreUrl=zk:{zookeeper.hosts}{zk_chroot}\n"
        f"dataDirectory={tmp_path / 'data'}\n"
        "grpcServicePort=0\nwebServicePort=0\n"
    )
    store = await ZooKeeperMetadataStore.connect(zookeeper.hosts, zk_chroot)
    process = await asyncio.create_subprocess_exec(
        *broker_command(config),
        cwd=ROOT,
        env=os.environ.copy(),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    drain: asyncio.Task[bytes] | None = None
    try:
        assert process.stdout is not None
        output = process.stdout
        lines = []

        async def next_line() -> str:
            return (await asyncio.wait_for(output.readline(), 60)).decode()

        while not (match := READY.search(line := await next_line())):
            lines.append(line)
            assert line, "the broker did not start:\n" + "".join(lines)
        drain = asyncio.create_task(output.read())  # what it logs later cannot fill the pipe
        http_port = match.group(2).rsplit(":", 1)[1]
        assert await store.get_children(LOADBALANCE_BROKERS_ROOT) == [f"127.0.0.1:{http_port}"]
        found = await store.get(f"{LOADBALANCE_BROKERS_ROOT}/127.0.0.1:{http_port}")
        assert found is not None
        assert json.loads(found.value)["pulsarServiceUrl"] == f"grpc://{match.group(1)}"
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 60) == 0
        assert await store.get_children(LOADBALANCE_BROKERS_ROOT) == []
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        if drain is not None:
            await drain
        await store.close()


async def test_producer_names_stay_unique_across_a_restart_on_the_embedded_store(
    broker_factory: Callable[..., BrokerThread], tmp_path: Path
) -> None:
    data = tmp_path / "standalone"
    names = []
    for _ in range(2):
        broker = broker_factory(data_dir=data)
        async with Client(broker.service_url) as client:
            producer = await client.create_producer("names")
            names.append(producer.producer_name())
            await producer.close()
        assert broker.service is not None
        await broker.call(broker.service.close())  # frees the data directory for the next
    # <clusterName>-<instance>-<counter>: each start took a new instance number from the store.
    instances = [re.fullmatch(r"standalone-(\d+)-0", name) for name in names]
    assert all(instances), names
    assert len({m.group(1) for m in instances if m}) == 2, names
