"""`pulsar-grpc admin tenants|namespaces|topics` (and the `topics` alias) with pulsar-admin's
verbs and flags, round trips against a real broker through the CLI's own main(); refusals are
one line and exit 1, bad flags exit 2; every new verb's arguments have help text."""

from __future__ import annotations

import argparse
import json

import pytest

from pulsar_grpc.cli import admin_namespaces, admin_topics
from pulsar_grpc.cli.main import build_parser, main
from tests.e2e.admin_support import shared_broker, unique
from tests.support import BrokerThread

__all__ = ["shared_broker"]  # a fixture


class Cli:
    """Runs `pulsar-grpc admin --admin-url URL ...` in this process."""

    def __init__(self, broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> None:
        self.url = broker.http_url
        self.capsys = capsys

    def __call__(self, *args: str, command: str = "admin") -> tuple[int, str, str]:
        code = main([command, "--admin-url", self.url, *args])
        captured = self.capsys.readouterr()
        assert "Traceback" not in captured.err
        return code, captured.out, captured.err

    def ok(self, *args: str, command: str = "admin") -> str:
        code, out, err = self(*args, command=command)
        assert code == 0, err
        return out

    def refused(self, *args: str) -> str:
        code, _, err = self(*args)
        assert code == 1, err
        assert len(err.strip().splitlines()) == 1, err
        return err


@pytest.fixture
def cli(shared_broker: BrokerThread, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(shared_broker, capsys)


def test_tenant_and_namespace_verbs(cli: Cli) -> None:
    tenant = unique("tenant")
    ns = f"{tenant}/ns"
    assert cli.ok("tenants", "create", tenant, "-c", "standalone") == f"created tenant {tenant}\n"
    assert cli.ok("tenants", "update", tenant, "-r", "ops") == f"updated tenant {tenant}\n"
    assert cli.ok("namespaces", "create", ns, "-b", "8") == f"created {ns}\n"
    assert cli.ok("namespaces", "list", tenant).split() == [ns]
    policies = json.loads(cli.ok("namespaces", "policies", ns))
    assert policies["bundles"]["numBundles"] == 8
    assert "409 The tenant still has active namespaces" in cli.refused("tenants", "delete", tenant)
    assert "409" in cli.refused("namespaces", "create", ns)
    cli.ok("topics", "create", f"persistent://{ns}/t")
    assert "Cannot delete non empty namespace" in cli.refused("namespaces", "delete", ns)
    cli.ok("namespaces", "delete", ns, "-f")
    assert cli.ok("tenants", "delete", tenant) == f"deleted tenant {tenant}\n"
    assert tenant not in cli.ok("tenants", "list").split()


def test_topic_and_subscription_verbs(cli: Cli, shared_broker: BrokerThread) -> None:
    parted, plain = unique("parted"), unique("plain")
    cli.ok("topics", "create-partitioned-topic", parted, "-p", "2")
    assert f"persistent://public/default/{parted}" in cli.ok(
        "topics", "list-partitioned-topics", "public/default"
    )
    cli.ok("topics", "update-partitioned-topic", parted, "-p", "3")
    assert "must be more than existing 3" in cli.refused(
        "topics", "update-partitioned-topic", parted, "-p", "2"
    )
    stats = json.loads(cli.ok("topics", "partitioned-stats", parted, "--per-partition"))
    assert stats["metadata"] == {"partitions": 3} and len(stats["partitions"]) == 3

    full = f"persistent://public/default/{plain}"
    assert cli.ok("topics", "create", plain) == f"created {full}\n"
    assert cli.ok("topics", "create-subscription", plain, "-s", "s", "-m", "earliest") == (
        f"created subscription s on {full} at earliest\n"
    )
    for _ in range(3):  # three entries
        assert main(["produce", plain, "-m", "hello", "-u", shared_broker.service_url]) == 0
    cli.capsys.readouterr()
    assert cli.ok("topics", "subscriptions", plain).split() == ["s"]
    peeked = cli.ok("topics", "peek-messages", plain, "-s", "s", "-n", "2")
    assert peeked.count("hello") == 2 and peeked.count("Message ID:") == 2
    assert cli.ok("topics", "skip", plain, "-s", "s", "-n", "1") == (
        f"skipped 1 messages of subscription s on {full}\n"
    )
    internal = json.loads(cli.ok("topics", "internal-stats", plain))
    assert internal["numberOfEntries"] == 3
    last = json.loads(cli.ok("topics", "last-message-id", plain))
    first = f"{last['ledgerId']}:{last['entryId'] - 2}"
    assert internal["cursors"]["s"]["markDeletePosition"] == first
    assert "hello" in cli.ok("topics", "examine-message", plain, "-i", "earliest", "-m", "1")

    def backlog() -> int:
        return int(json.loads(cli.ok("topics", "stats", plain))["subscriptions"]["s"]["msgBacklog"])

    assert cli.ok("topics", "reset-cursor", plain, "-s", "s", "-t", "1h") == (
        f"reset subscription s on {full} to 3600 s ago\n"
    )
    assert backlog() == 3
    assert cli.ok("topics", "clear-backlog", plain, "-s", "s") == (
        f"cleared the backlog of subscription s on {full}\n"
    )
    assert backlog() == 0
    at = f"{last['ledgerId']}:{last['entryId']}"
    assert cli.ok("topics", "reset-cursor", plain, "-s", "s", "-m", at) == (
        f"reset subscription s on {full} to {at}\n"
    )
    assert backlog() == 1
    assert "404" in cli.refused("topics", "peek-messages", plain, "-s", "absent")
    assert "not a message id" in cli.refused(
        "topics", "create-subscription", plain, "-s", "x", "-m", "bogus"
    )
    assert cli.ok("topics", "unsubscribe", plain, "-s", "s") == (
        f"deleted subscription s of {full}\n"
    )
    # The `topics` command is the same verbs.
    assert cli.ok("subscriptions", plain, command="topics") == ""
    assert cli.ok("topics", "unload", plain) == f"unloaded {full}\n"
    cli.ok("topics", "delete", plain)
    cli.ok("topics", "delete-partitioned-topic", parted, "-f")
    listed = cli.ok("topics", "list", "public/default").split()
    assert not [n for n in listed if plain in n or parted in n]


def test_peek_counts_the_messages_of_a_batch(cli: Cli, shared_broker: BrokerThread) -> None:
    topic = unique("batched")
    cli.ok("topics", "create", topic)
    cli.ok("topics", "create-subscription", topic, "-s", "s", "-m", "earliest")
    assert main(["produce", topic, "-m", "b", "-n", "3", "-u", shared_broker.service_url]) == 0
    cli.capsys.readouterr()
    [entry] = json.loads(cli.ok("topics", "internal-stats", topic))["ledgers"][-1:]
    assert entry["entries"] == 1  # one batch of three messages
    peeked = cli.ok("topics", "peek-messages", topic, "-s", "s", "-n", "2").splitlines()
    ids = [line.removeprefix("Message ID: ") for line in peeked if line.startswith("Message ID")]
    assert [i.rsplit(":", 1)[1] for i in ids] == ["0", "1"]
    assert peeked.count("b") == 2
    five = cli.ok("topics", "peek-messages", topic, "-s", "s", "-n", "5").splitlines()
    assert five.count("b") == 3  # the backlog holds three


def test_bad_flags_exit_2(cli: Cli) -> None:
    for args in (
        ("topics", "reset-cursor", "t", "-s", "s", "-t", "soon"),
        ("topics", "reset-cursor", "t", "-s", "s"),
        ("topics", "skip", "t", "-s", "s"),
    ):
        with pytest.raises(SystemExit) as exited:
            cli(*args)
        assert exited.value.code == 2


def test_every_new_verb_argument_has_help() -> None:
    admin = _subparsers(build_parser())["admin"]
    groups = _subparsers(admin)
    for group, verbs in (("topics", admin_topics.VERBS), ("namespaces", admin_namespaces.VERBS)):
        parsers = _subparsers(groups[group])
        for verb in verbs:
            for action in parsers[verb]._actions:
                if not isinstance(action, argparse._HelpAction):
                    assert action.help, f"admin {group} {verb} {action.dest}"


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    raise AssertionError(f"{parser.prog} has no verbs")
