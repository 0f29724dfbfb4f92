"""pulsar-client's and pulsar-admin's habits in `pulsar-grpc`: produce's -m/-s/-p splitting and
-r pacing, consume's Pulsar-spelled values, the read verb, global flags before or after the
verb, and no user error ending in a traceback (a sweep over every verb)."""

from __future__ import annotations

import argparse
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pulsar_grpc.cli.main import build_parser, main
from pulsar_grpc.client import Client, MessageId
from tests.e2e.test_cli import cli, unique
from tests.support import BrokerThread


def blocks(stdout: str) -> list[str]:
    """The text of each ``----- got message -----`` block."""
    return [b.strip() for b in stdout.split("----- got message -----")[1:]]


def contents(stdout: str) -> list[str]:
    return [re.search(r"content:(.*)", b).group(1) for b in blocks(stdout)]  # type: ignore[union-attr]


async def read_all(url: str, topic: str, count: int) -> list[tuple[bytes, dict[str, str], int]]:
    """The payload, properties and publish time (ms) of a topic's first ``count`` messages."""
    async with Client(url) as client:
        reader = await client.create_reader(topic, MessageId.earliest)
        got = []
        for _ in range(count):
            msg = await reader.read_next(timeout_ms=20_000)
            got.append((msg.data(), msg.properties(), msg.publish_timestamp()))
        await reader.close()
    return got


# ------------------------------------------------------------------------------- produce


async def test_produce_splits_messages_and_properties_as_pulsar_client(
    broker: BrokerThread,
) -> None:
    topic = unique("split")
    url = broker.service_url
    first = cli("produce", topic, "-m", "a,b", "-m", "c", "-p", "k1=v1,k2=v2", "-p", "k3=v3",
                "--url", url)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "3 messages successfully produced" in first.stdout
    second = cli("produce", topic, "-m", "x,y|z", "-s", "|", "--url", url)
    assert second.returncode == 0, second.stderr
    got = await read_all(url, topic, 5)
    assert [payload for payload, _, _ in got] == [b"a", b"b", b"c", b"x,y", b"z"]
    assert got[0][1] == {"k1": "v1", "k2": "v2", "k3": "v3"}


async def test_produce_rate_paces_the_messages(broker: BrokerThread) -> None:
    topic = unique("rate")
    # 6 messages at 10 msg/s: the last is published at least 0.5 s after the first.
    result = cli("produce", topic, "-m", "m", "-n", "6", "-r", "10", "--url", broker.service_url)
    assert result.returncode == 0, result.stderr
    times = [t for _, _, t in await read_all(broker.service_url, topic, 6)]
    assert times[-1] - times[0] >= 450, times


# ------------------------------------------------------------------------------- consume, read


def test_consume_takes_pulsars_spellings_and_hides_content(broker: BrokerThread) -> None:
    topic = unique("spell")
    url = broker.service_url
    assert cli("produce", topic, "-m", "a,b,c", "--url", url).returncode == 0
    shared = cli("consume", topic, "-s", "s", "-t", "shared", "-p", "Earliest", "-n", "1",
                 "--timeout", "20", "--url", url)  # fmt: skip
    assert shared.returncode == 0, shared.stderr
    assert blocks(shared.stdout) == ["key:[null], properties:[], content:a"]
    assert "1 messages successfully consumed" in shared.stderr
    hidden = cli("consume", topic, "-s", "h", "-t", "KEY_SHARED", "-p", "EARLIEST", "-n", "3",
                 "--hide-content", "--timeout", "20", "--url", url)  # fmt: skip
    assert hidden.returncode == 0, hidden.stderr
    assert hidden.stdout == ""
    assert "3 messages successfully consumed" in hidden.stderr


def test_read_from_earliest_latest_and_a_message_id(broker: BrokerThread) -> None:
    topic = unique("read")
    url = broker.service_url
    ids = []
    for payload in "abc":  # one entry each (a batch's messages share their ledger:entry)
        produced = cli("produce", topic, "-m", payload, "-v", "--url", url)
        assert produced.returncode == 0, produced.stderr
        ids.append(produced.stdout.splitlines()[0])
    everything = cli("read", topic, "-m", "earliest", "-n", "0", "--timeout", "2", "--url", url)
    assert everything.returncode == 0, everything.stderr
    assert contents(everything.stdout) == ["a", "b", "c"]
    assert "no message within 2 s; 3 messages successfully read" in everything.stderr
    # ledger:entry of b: after it, c; with -i, b and c. Reading acknowledges nothing.
    ledger_entry = ":".join(ids[1].split(":")[:2])
    after = cli("read", topic, "-m", ledger_entry, "-n", "1", "--timeout", "20", "--url", url)
    assert contents(after.stdout) == ["c"], after.stderr
    inclusive = cli("read", topic, "-m", ledger_entry, "-i", "-n", "2", "-v", "--timeout", "20",
                    "--url", url)  # fmt: skip
    assert contents(inclusive.stdout) == ["b", "c"], inclusive.stderr
    assert f"message id: {ids[1]}" in inclusive.stdout
    latest = cli("read", topic, "-n", "0", "--timeout", "1", "--url", url)
    assert latest.returncode == 0 and blocks(latest.stdout) == [], latest


def test_consume_and_read_rate_limit_what_they_print(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = unique("slow")
    url = broker.service_url
    assert main(["produce", topic, "-m", "a,b,c,d,e,f", "--url", url]) == 0

    def seconds(*argv: str) -> float:
        began = time.monotonic()
        assert main([*argv, "-n", "6", "--url", url]) == 0
        return time.monotonic() - began

    for verb, position in (
        ("read", ["-m", "earliest"]),
        ("consume", ["-s", "paced", "-p", "Earliest"]),
    ):
        # 6 messages at 10 a second: 5 gaps of 0.1 s at least. A lower bound only, so a loaded
        # machine cannot fail it (unpaced, the 6 messages arrive together after the connect).
        assert seconds(verb, topic, *position, "-r", "10") >= 0.45, verb
        assert capsys.readouterr().out.count("got message") == 6


# ------------------------------------------------------------------------------- global flags


def test_global_flags_before_or_after_the_verb(broker: BrokerThread, tmp_path: Path) -> None:
    topic = unique("global")
    before = cli("--url", broker.service_url, "produce", topic, "-m", "x")
    assert before.returncode == 0, before.stderr
    after = cli("produce", topic, "-m", "y", "--url", broker.service_url)
    assert after.returncode == 0, after.stderr
    # Both URLs are taken after any verb, as before the command, the unused one too.
    both = ("--url", broker.service_url, "--admin-url", broker.http_url)
    with_both = cli("produce", topic, "-m", "z", *both)
    assert with_both.returncode == 0, with_both.stderr
    full = f"persistent://public/default/{topic}"
    for argv in (
        ("--admin-url", broker.http_url, "topics", "list"),
        ("topics", "--admin-url", broker.http_url, "list"),
        ("topics", "list", "--admin-url", broker.http_url),
        ("topics", "list", *both),
    ):
        listed = cli(*argv)
        assert listed.returncode == 0 and full in listed.stdout.split(), (argv, listed)
    tenants = cli("admin", "tenants", "list", "--admin-url", broker.http_url)
    assert tenants.returncode == 0 and "public" in tenants.stdout.split(), tenants
    conf = tmp_path / "client.conf"
    conf.write_text(f"webServiceUrl={broker.http_url}\nbrokerServiceUrl={broker.service_url}\n")
    with_conf = cli("--conf", str(conf), "read", topic, "-m", "earliest", "-n", "2")
    assert contents(with_conf.stdout) == ["x", "y"], with_conf.stderr
    # After the verb for every connecting command, long forms included: -p is consume's
    # position here (produce's properties above), as in pulsar-client.
    url = ("--service-url", broker.service_url)
    read = cli("read", topic, "--start-message-id", "earliest", "-n", "2", *url)
    assert contents(read.stdout) == ["x", "y"], read.stderr
    consumed = cli("consume", topic, "-s", "s", "--subscription-position", "Earliest", "-n", "2",
                   "--url", broker.service_url)  # fmt: skip
    assert contents(consumed.stdout) == ["x", "y"], consumed.stderr
    owner = broker.http_url.removeprefix("http://")
    owned = cli("admin", "brokers", "namespaces", "standalone", "-u", owner, "--admin-url",
                broker.http_url)  # fmt: skip
    assert owned.returncode == 0, owned.stderr
    assert any(bundle.startswith("public/default/") for bundle in json.loads(owned.stdout))
    nowhere = cli("--admin-url", broker.http_url, "tokens", "create-secret-key")
    assert nowhere.returncode == 2
    assert "--admin-url: this command connects to no broker" in nowhere.stderr


# ------------------------------------------------------------------------------- wrong ports


def test_urls_pointed_at_the_wrong_port_say_so_in_one_line(broker: BrokerThread) -> None:
    grpc_port = broker.service_url.removeprefix("grpc://")
    http_port = broker.http_url.removeprefix("http://")
    admin = cli("topics", "list", "--admin-url", f"http://{grpc_port}")
    assert admin.returncode == 1
    line = one_line(admin.stderr)
    assert "HTTP/2 (gRPC?)" in line and "web service URL" in line, line
    service = cli("produce", "t", "-m", "x", "--url", f"grpc://{http_port}",
                  "--operation-timeout-ms", "5000")  # fmt: skip
    assert service.returncode == 1
    line = one_line(service.stderr)
    assert "HTTP/1.x server" in line and "gRPC URL" in line, line


@pytest.fixture
def not_http() -> Iterator[str]:
    """host:port of a server that answers every connection with a line that is not HTTP (nor
    HTTP/2), as an SSH server or a database would."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        server.close()


def test_urls_pointed_at_a_server_that_is_neither_say_so_in_one_line(not_http: str) -> None:
    admin = cli("topics", "list", "--admin-url", f"http://{not_http}")
    assert admin.returncode == 1
    line = one_line(admin.stderr)
    assert "does not answer in HTTP" in line and "--admin-url" in line, line
    service = cli("produce", "t", "-m", "x", "--url", f"grpc://{not_http}",
                  "--operation-timeout-ms", "3000")  # fmt: skip
    assert service.returncode == 1
    line = one_line(service.stderr)
    assert "does not speak gRPC" in line, line


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# ------------------------------------------------------------------------------- the sweep


def leaf_commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[tuple[str, ...], argparse.ArgumentParser]
]:  # fmt: skip
    """Every runnable command line prefix (``admin topics stats``) and its parser."""
    groups = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not groups:
        yield path, parser
        return
    seen: set[int] = set()
    for name, child in groups[0].choices.items():
        if id(child) not in seen:
            seen.add(id(child))
            yield from leaf_commands(child, (*path, name))


# Plausible values for the arguments each verb requires: what is wrong is the broker address.
_POSITIONAL = {"namespace": "public/default", "tenant": "public", "cluster": "standalone"}
_OPTION = {"--actions": "produce", "-b": "0x00000000_0xffffffff", "--url": "127.0.0.1:8080",
           "-c": "FULL", "-f": "/nonexistent/schema.json", "--messages": "1"}  # fmt: skip
# Names the naming rules refuse, for the sweep with the right addresses.
_BAD_NAMES = {
    "namespace": "no-tenant",
    "topic": "persistent://a/b",
    "topic_names": "persistent://a/b",
}


def _argv(
    path: tuple[str, ...],
    parser: argparse.ArgumentParser,
    admin_at: str,
    service_at: str,
    names: dict[str, str] = _POSITIONAL,
) -> list[str]:
    """The command line of one verb: its required arguments filled in from ``names`` (else
    plausible values), --admin-url http://ADMIN_AT and --service-url grpc://SERVICE_AT."""
    argv = list(path)
    for action in parser._actions:
        if not action.option_strings and action.dest != "help":
            argv.append(names.get(action.dest, _POSITIONAL.get(action.dest, "sweep-topic")))
        elif action.required:
            flag = action.option_strings[0]
            argv += [flag, _OPTION.get(flag, "x")]
    options = parser._option_string_actions
    if "--admin-url" in options:
        argv += ["--admin-url", f"http://{admin_at}"]
    if "--service-url" in options:
        argv += ["--service-url", f"grpc://{service_at}"]
    if "--operation-timeout-ms" in options:
        argv += ["--operation-timeout-ms", "3000"]
    return argv


def connecting_commands() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = []
    for path, parser in leaf_commands(build_parser()):
        options = parser._option_string_actions
        if "--admin-url" in options or "--service-url" in options:
            found.append((path, parser))
    return found


def sweep(capsys: pytest.CaptureFixture[str], argvs: list[list[str]]) -> list[str]:
    """Run each command line in this process: those that did not fail with one clear line
    (argparse's usage lines aside) and a non-zero exit code, or that raised, as problems."""
    problems = []
    for argv in argvs:
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage error
            code = exc.code if isinstance(exc.code, int) else 2
        _out, err = capsys.readouterr()
        lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("usage:", " "))]
        if code == 0 or "Traceback" in err or len(lines) != 1:
            problems.append(f"{' '.join(argv)}: exit {code}, stderr {err!r}")
    return problems


def test_every_connecting_verb_fails_in_one_line_on_wrong_ports(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    grpc = broker.service_url.removeprefix("grpc://")
    http = broker.http_url.removeprefix("http://")
    commands = connecting_commands()
    assert len(commands) > 20  # produce, consume, read, topics, admin, perf, scram
    # The ports swapped: the gRPC port as the admin URL, the HTTP port as the service URL.
    problems = sweep(capsys, [_argv(path, parser, grpc, http) for path, parser in commands])
    assert not problems, "\n".join(problems)


def test_every_verb_taking_a_name_fails_in_one_line_on_a_bad_one(
    broker: BrokerThread, capsys: pytest.CaptureFixture[str]
) -> None:
    grpc = broker.service_url.removeprefix("grpc://")
    http = broker.http_url.removeprefix("http://")
    named = [
        (path, parser)
        for path, parser in connecting_commands()
        if any(a.dest in _BAD_NAMES for a in parser._actions if not a.option_strings)
    ]
    assert len(named) > 20
    # The right addresses this time: what is wrong is the topic or namespace name.
    argvs = [_argv(path, parser, http, grpc, _BAD_NAMES) for path, parser in named]
    problems = sweep(capsys, argvs)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "argv",
    [
        ("tokens", "show", "garbage"),
        ("tokens", "create-secret-key", "--output", "/nonexistent/dir/key"),
        ("scram", "add-user", "u", "--credentials-file", "/nonexistent/f", "--password", "p"),
        ("perf", "ceiling", "--size", "0"),
        ("perf", "all", "--messages", "-5"),
        ("perf", "cluster", "--brokers", "x"),
        ("broker", "--data", "/nonexistent/data"),
        ("standalone", "--config", "/nonexistent/standalone.conf"),
    ],
)
def test_verbs_that_connect_nowhere_fail_in_one_line_on_bad_input(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    problems = sweep(capsys, [list(argv)])
    assert not problems, "\n".join(problems)


def test_every_argument_of_every_verb_has_help_text() -> None:
    missing = [
        f"{' '.join(path)} {action.option_strings or action.dest}"
        for path, parser in leaf_commands(build_parser())
        for action in parser._actions
        if not action.help and action.dest != "help"
    ]
    assert not missing, missing
