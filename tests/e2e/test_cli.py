"""The `pulsar-grpc` command as a user runs it: a child process, its output and exit code."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faultproxy import free_port
from tests.support import READY, BrokerThread, StandaloneProcess
from tests.waiting import eventually_sync

ROOT = Path(__file__).resolve().parents[2]


def cli(
    *args: str, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_grpc.cli.main", *args],
        cwd=ROOT,
        env=env if env is not None else os.environ.copy(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def http_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def assert_one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# ------------------------------------------------------------------------------- produce/consume


def test_produce_then_consume_prints_payloads_keys_and_properties(broker: BrokerThread) -> None:
    topic = unique("cli")
    url = broker.service_url
    produced = cli(
        "produce", topic, "-m", "hello", "-m", "wörld", "-n", "3",
        "-k", "user-1", "-p", "source=cli", "-p", "n=1", "--service-url", url,
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert "6 messages successfully produced" in produced.stdout

    consumed = cli(
        "consume", topic, "-s", "sub", "-p", "earliest", "-n", "6",
        "--timeout", "20", "-v", "--service-url", url,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    blocks = consumed.stdout.split("----- got message -----")[1:]
    assert len(blocks) == 6, consumed.stdout
    contents = [re.search(r"content:(.*)", b).group(1) for b in blocks]  # type: ignore[union-attr]
    assert contents == ["hello", "wörld"] * 3
    for block in blocks:
        assert "key:[user-1]" in block
        assert "properties:[n=1, source=cli]" in block
        assert re.search(r"message id: \d+:\d+:-1:\d+", block), block

    # Every message was acked: nothing left for the subscription.
    def backlog_is_empty() -> None:
        stats = http_json(f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats")
        assert stats["msgInCounter"] == 6
        assert stats["subscriptions"]["sub"]["msgBacklog"] == 0, stats

    eventually_sync(backlog_is_empty)


def test_produce_verbose_prints_every_message_id(broker: BrokerThread) -> None:
    result = cli(
        "produce", unique("ids"), "-m", "a", "-n", "3", "-v", "--service-url", broker.service_url
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4, result.stdout
    assert all(re.fullmatch(r"\d+:\d+:-1:\d+", line) for line in lines[:3]), lines
    assert len(set(lines[:3])) == 3
    assert lines[3] == "3 messages successfully produced"


def test_consume_hex_prints_a_hex_dump(broker: BrokerThread, tmp_path: Path) -> None:
    topic = unique("hex")
    payload = tmp_path / "payload.bin"
    payload.write_bytes(b"\x00\x01binary\xff")
    produced = cli("produce", topic, "-f", str(payload), "--service-url", broker.service_url)
    assert produced.returncode == 0, produced.stderr
    consumed = cli(
        "consume", topic, "-s", "s", "-p", "earliest", "--hex", "--timeout", "20",
        "--service-url", broker.service_url,
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert "00 01 62 69 6e 61 72 79 ff" in consumed.stdout
    assert "|..binary.|" in consumed.stdout


def test_consume_latest_sees_only_later_messages_and_times_out(broker: BrokerThread) -> None:
    topic = unique("latest")
    url = broker.service_url
    assert cli("produce", topic, "-m", "before", "--service-url", url).returncode == 0
    result = cli("consume", topic, "-s", "s", "-n", "0", "--timeout", "0.5", "--service-url", url)
    assert result.returncode == 0, result.stderr
    assert "got message" not in result.stdout
    assert "no message within 0.5 s; 0 messages successfully consumed" in result.stderr


def test_consume_shared_subscription_type_reaches_the_broker(broker: BrokerThread) -> None:
    topic = unique("shared")
    url = broker.service_url
    assert cli("produce", topic, "-m", "x", "-n", "2", "--service-url", url).returncode == 0
    result = cli(
        "consume", topic, "-s", "s", "-t", "Key_Shared", "-p", "earliest", "-n", "2",
        "--timeout", "20", "--service-url", url,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    stats = http_json(f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats")
    assert stats["subscriptions"]["s"]["type"] == "Key_Shared"


def test_consume_forever_stops_cleanly_on_ctrl_c(broker: BrokerThread) -> None:
    topic = unique("sigint")
    stats_url = f"{broker.http_url}/admin/v2/persistent/public/default/{topic}/stats"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_grpc.cli.main", "consume", topic, "-s", "s", "-n", "0",
         "--service-url", broker.service_url],
        cwd=ROOT, env=os.environ.copy(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:

        def subscribed() -> None:
            assert proc.poll() is None, proc.communicate()
            try:
                stats = http_json(stats_url)
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"no topic yet: {exc}") from None
            assert "s" in stats["subscriptions"], stats
            assert len(stats["subscriptions"]["s"]["consumers"]) == 1

        eventually_sync(subscribed, timeout=20)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert "interrupted; 0 messages successfully consumed" in err

    def consumer_gone() -> None:
        assert http_json(stats_url)["subscriptions"]["s"]["consumers"] == []

    eventually_sync(consumer_gone)


# ------------------------------------------------------------------------------- bad input


def test_broker_unreachable_is_one_line_and_exit_1() -> None:
    url = f"grpc://127.0.0.1:{free_port()}"
    # A refused connection is retried (the broker may be restarting) until the operation
    # timeout: a short one keeps the test quick.
    quick = ("--service-url", url, "--operation-timeout-ms", "1500")
    for args in (("produce", "t", "-m", "x", *quick), ("consume", "t", "-s", "s", *quick)):
        result = cli(*args)
        assert result.returncode == 1, result
        line = assert_one_line_error(result)
        assert "cannot reach the broker" in line and url in line, line


@pytest.mark.parametrize(
    "args",
    [
        ("produce", "persistent://public/default", "-m", "x"),
        ("produce", "bogus://public/default/t", "-m", "x"),
        ("consume", "persistent://a/b/c/d", "-s", "s"),
        ("produce", "", "-m", "x"),
    ],
)
def test_bad_topic_name_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    # The name is checked before connecting: the service URL points nowhere.
    result = cli(*args, "--service-url", f"grpc://127.0.0.1:{free_port()}")
    assert result.returncode == 2, result
    line = assert_one_line_error(result)
    assert "invalid" in line and "topic name" in line, line


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("produce",), "the following arguments are required: topic"),
        (("produce", "t", "-n", "zero"), "not an integer"),
        (("produce", "t", "-m", "x", "-n", "0"), "must be at least 1"),
        (("consume", "t"), "-s/--subscription-name"),
        (
            ("consume", "t", "-s", "s", "-t", "Sharde"),
            "'Sharde' is not one of Exclusive, Shared, Failover, Key_Shared",
        ),
        (("consume", "t", "-s", "s", "-p", "middle"), "'middle' is not one of Latest, Earliest"),
        (("consume", "t", "-s", "s", "--timeout", "-1"), "must be greater than 0"),
        (("frobnicate",), "invalid choice: 'frobnicate'"),
        ((), "required: COMMAND"),
        (("topics",), "required: VERB"),
    ],
)
def test_bad_usage_is_argparse_message_and_exit_2(args: tuple[str, ...], needle: str) -> None:
    result = cli(*args)
    assert result.returncode == 2, result
    assert "usage: pulsar-grpc" in result.stderr
    assert needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("produce", "t"), "give at least one -m MESSAGE or -f FILE"),
        (("produce", "t", "-m", "x", "-p", "novalue"), "expected KEY=VALUE"),
        (("produce", "t", "-f", "/nonexistent/file"), "/nonexistent/file"),
        (("produce", "t", "-m", "x", "--service-url", "pulsar://127.0.0.1:1"), "binary protocol"),
    ],
)
def test_bad_values_are_one_line_and_exit_2(args: tuple[str, ...], needle: str) -> None:
    result = cli(*args)
    assert result.returncode == 2, result
    assert needle in assert_one_line_error(result)


# ------------------------------------------------------------------------------- topics


def test_topics_create_list_stats_delete(broker: BrokerThread) -> None:
    admin = ("topics", "--admin-url", broker.http_url)
    plain, partitioned = unique("plain"), unique("parted")

    result = cli(*admin, "create", plain)
    assert result.returncode == 0, result.stderr
    assert f"created persistent://public/default/{plain}" in result.stdout
    result = cli(*admin, "create", partitioned, "-p", "3")
    assert result.returncode == 0, result.stderr

    listed = cli(*admin, "list", "public/default")
    assert listed.returncode == 0, listed.stderr
    names = listed.stdout.split()
    assert f"persistent://public/default/{plain}" in names
    assert f"persistent://public/default/{partitioned}" in names

    assert (
        cli("produce", plain, "-m", "x", "-n", "2", "--service-url", broker.service_url).returncode
        == 0
    )
    stats = cli(*admin, "stats", plain)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["msgInCounter"] == 2
    parted_stats = json.loads(cli(*admin, "stats", partitioned).stdout)
    assert parted_stats["metadata"] == {"partitions": 3}

    again = cli(*admin, "create", partitioned, "-p", "3")
    assert again.returncode == 1
    assert "409" in again.stderr and "already exists" in again.stderr

    deleted = cli(*admin, "delete", plain)
    assert deleted.returncode == 0, deleted.stderr
    assert f"persistent://public/default/{plain}" not in cli(*admin, "list").stdout.split()
    absent = cli(*admin, "stats", plain)
    assert absent.returncode == 1
    assert "404" in absent.stderr


def test_topics_bad_name_and_unreachable_admin() -> None:
    bad = cli("topics", "create", "persistent://a/b")
    assert bad.returncode == 2
    assert "invalid topic name" in bad.stderr
    bad_namespace = cli("topics", "list", "no-tenant")
    assert bad_namespace.returncode == 2
    assert "invalid namespace 'no-tenant'" in assert_one_line_error(bad_namespace)
    down = cli("topics", "--admin-url", f"http://127.0.0.1:{free_port()}", "list")
    assert down.returncode == 1
    assert "cannot reach" in assert_one_line_error(down)


# ------------------------------------------------------------------------------- standalone


@pytest.fixture
def held_ports() -> Iterator[tuple[int, int]]:
    """Two listening sockets: a broker that tried to bind them would fail with exit code 1."""
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen()
        socks.append(s)
    yield socks[0].getsockname()[1], socks[1].getsockname()[1]
    for s in socks:
        s.close()


@pytest.mark.parametrize(
    ("bad_line", "needle"),
    [
        ("maxMessageSzie=1024", "unknown property 'maxMessageSzie'"),
        ("managedLedgerMaxEntriesPerLedger=lots", "managedLedgerMaxEntriesPerLedger: 'lots'"),
        ("grpcServicePort=65536x", "grpcServicePort"),
    ],
)
def test_standalone_bad_config_names_property_and_line_and_starts_nothing(
    tmp_path: Path, held_ports: tuple[int, int], bad_line: str, needle: str
) -> None:
    grpc_port, web_port = held_ports
    data = tmp_path / "data"
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a broker.conf\n"
        f"grpcServicePort={grpc_port}\n"
        f"webServicePort={web_port}\n"
        f"dataDirectory={data}\n"
        f"{bad_line}\n"
    )
    result = cli("standalone", "--config", str(conf), timeout=30)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert needle in output, output
    assert f"{conf}:5" in output, output  # the file and the line
    assert "ready" not in output and "Traceback" not in output
    assert not data.exists()  # not even the data directory was made


def test_standalone_missing_config_is_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "missing.conf"
    result = cli("standalone", "--config", str(missing), timeout=30)
    assert result.returncode == 2
    assert str(missing) in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_standalone_bad_set_flag_is_exit_2(tmp_path: Path) -> None:
    result = cli("standalone", "--data", str(tmp_path / "d"), "--set", "webServicePort", timeout=30)
    assert result.returncode == 2
    assert "--set 'webServicePort'" in result.stdout + result.stderr


def start_standalone(
    args: list[str], env: dict[str, str], timeout: float = 30
) -> tuple[subprocess.Popen[str], re.Match[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_grpc.cli.main", "standalone", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    lines: list[str] = []
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            match = READY.search(line)
            if match:
                threading.Thread(target=proc.stdout.read, daemon=True).start()
                return proc, match, lines
    finally:
        timer.cancel()
    proc.wait(5)
    raise AssertionError("standalone did not start:\n" + "".join(lines))


@pytest.fixture
def config_file_broker(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`standalone --config FILE` with Pulsar's property names; yields (grpc URL, HTTP URL)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# Pulsar's names\n"
        "clusterName=cli-test-cluster\n"
        "bindAddress=127.0.0.1\n"
        "grpcServicePort=0\n"
        "webServicePort=0\n"
        f"dataDirectory={tmp_path / 'data'}\n"
        "allowAutoTopicCreation=false\n"
        "maxMessageSize=2048\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULSAR_PREFIX_")}
    proc, match, _ = start_standalone(["--config", str(conf), "--log-level", "WARNING"], env)
    try:
        assert (tmp_path / "data").is_dir()
        yield f"grpc://{match.group(1)}", match.group(2)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        assert proc.stdout is not None
        proc.stdout.close()  # waits for the draining thread to reach the end of the output
    assert code == 0  # SIGTERM is a clean shutdown


def test_standalone_honours_a_config_file_with_pulsar_property_names(
    config_file_broker: tuple[str, str],
) -> None:
    grpc_url, http_url = config_file_broker
    assert http_json(f"{http_url}/admin/v2/clusters") == ["cli-test-cluster"]
    # allowAutoTopicCreation=false: producing to an unknown topic is refused...
    refused = cli("produce", "not-created", "-m", "x", "--service-url", grpc_url)
    assert refused.returncode == 1
    assert "TopicNotFound" in assert_one_line_error(refused)
    # ...and works once the (partitioned) topic is created through the admin API.
    assert cli("topics", "--admin-url", http_url, "create", "made", "-p", "1").returncode == 0
    ok = cli("produce", "made", "-m", "x" * 100, "--service-url", grpc_url)
    assert ok.returncode == 0, ok.stderr
    # maxMessageSize=2048
    too_big = cli("produce", "made", "-m", "x" * 4096, "--service-url", grpc_url)
    assert too_big.returncode == 1
    assert "MessageTooBig" in assert_one_line_error(too_big)


def test_admin_creates_a_topic_when_auto_creation_is_off(
    config_file_broker: tuple[str, str],
) -> None:
    """Pulsar: auto-creation governs producers and consumers, never the admin API."""
    grpc_url, http_url = config_file_broker
    created = cli("topics", "--admin-url", http_url, "create", "made-by-admin")
    assert created.returncode == 0, created.stderr
    ok = cli("produce", "made-by-admin", "-m", "x", "--service-url", grpc_url)
    assert ok.returncode == 0, ok.stderr


def test_pulsar_prefix_env_overrides_max_message_size(
    monkeypatch: pytest.MonkeyPatch, standalone_factory: Callable[..., StandaloneProcess]
) -> None:
    monkeypatch.setenv("PULSAR_PREFIX_maxMessageSize", "1024")
    standalone = standalone_factory()
    url = standalone.service_url
    small = cli("produce", "env-topic", "-m", "x" * 512, "--service-url", url)
    assert small.returncode == 0, small.stderr
    big = cli("produce", "env-topic", "-m", "x" * 2048, "--service-url", url)
    assert big.returncode == 1, big
    line = assert_one_line_error(big)
    assert "MessageTooBig" in line and "1024" in line, line
    assert standalone.stop() == 0


def test_pulsar_prefix_env_with_unknown_property_is_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "PULSAR_PREFIX_noSuchProperty": "1"}
    result = cli("standalone", "--data", str(tmp_path / "d"), timeout=30, env=env)
    assert result.returncode == 2
    assert "env PULSAR_PREFIX_noSuchProperty: unknown property 'noSuchProperty'" in result.stderr


def test_standalone_with_unreadable_tls_files_is_exit_2_and_binds_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    result = cli(
        "standalone", "--data", str(data), "--set", "grpcServicePortTls=0",
        "--set", f"tlsCertificateFilePath={tmp_path / 'absent.pem'}",
        "--set", f"tlsKeyFilePath={tmp_path / 'absent.key'}",
        timeout=30,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "tlsCertificateFilePath" in result.stderr and "absent.pem" in result.stderr
    assert "Traceback" not in result.stderr
    assert not data.exists()


def test_standalone_on_a_taken_port_says_so_and_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "standalone", "--data", str(tmp_path / "d"), "--set", f"grpcServicePort={port}",
            "--set", "webServicePort=0", timeout=30,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "cannot start" in result.stderr and str(port) in result.stderr
    assert "Traceback" not in result.stderr
