"""One broker per data directory: a second one refuses to start; a dead one's lock is gone."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc

from pulsar_grpc.cli.standalone import EXIT_DATA_DIRECTORY_IN_USE
from tests.e2e.test_durability import drain
from tests.e2e.wire import batch, stub
from tests.support import BrokerThread, StandaloneProcess, broker_config

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "persistent://public/default/locked"


def second_standalone(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "pulsar_grpc.cli.main", "standalone", "--data", str(data_dir),
            "--set", "grpcServicePort=0", "--set", "webServicePort=0",
        ],
        cwd=ROOT, env=os.environ.copy(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


async def produce(address: str, payloads: list[bytes]) -> None:
    async with grpc.aio.insecure_channel(address) as ch:
        producer = stub(ch).Produce(metadata=(("x-pulsar-topic", TOPIC),))
        await producer.read()
        await producer.write(batch(0, payloads))
        assert (await producer.read()).HasField("receipt")
        await producer.done_writing()


def test_second_standalone_on_a_held_directory_exits_with_a_clear_message(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    first = standalone_factory(tmp_path / "data")
    second = second_standalone(tmp_path / "data")
    assert second.returncode == EXIT_DATA_DIRECTORY_IN_USE, second.stderr
    assert "in use by another broker" in second.stderr
    assert f"pid {first.proc.pid if first.proc else '?'}" in second.stderr
    assert "ready" not in second.stdout and "Traceback" not in second.stderr
    assert first.proc is not None and first.proc.poll() is None  # the first one is untouched


def test_an_in_process_broker_is_refused_a_directory_a_process_holds(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    standalone_factory(tmp_path / "data")
    second = BrokerThread(broker_config(tmp_path / "data"))
    try:
        second.start()
    except Exception as exc:
        assert "in use by another broker" in str(exc)
    else:
        raise AssertionError("a second broker started on a held data directory")
    finally:
        second.stop()


async def test_restart_after_kill_9_and_after_a_clean_stop_is_not_blocked(
    standalone_factory: Callable[..., StandaloneProcess], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    # Kept without a subscription: with Pulsar's default retention a topic nobody subscribes
    # to keeps only its current ledger, and each restart starts a new one.
    keep = ("--set", "defaultRetentionTimeInMinutes=-1", "--set", "defaultRetentionSizeInMB=-1")
    first = standalone_factory(data, *keep)
    await produce(first.grpc_address, [b"before-kill"])
    first.kill9()
    assert (data / "LOCK").exists()  # the file stays; the kernel dropped the lock

    restarted = standalone_factory(data, *keep)
    await produce(restarted.grpc_address, [b"after-restart"])
    assert restarted.stop() == 0
    again = standalone_factory(data, *keep)
    assert await drain(again.grpc_address, TOPIC, "sub", 2) == [b"before-kill", b"after-restart"]


def test_a_broker_that_failed_to_start_gives_the_directory_back(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed = BrokerThread(broker_config(tmp_path / "data", grpcServicePort=port))
        try:
            try:
                failed.start()
            except Exception:
                pass
            else:
                raise AssertionError("a broker started on a taken port")
        finally:
            failed.stop()
    retry = BrokerThread(broker_config(tmp_path / "data"))
    try:
        retry.start()
    finally:
        retry.stop()
