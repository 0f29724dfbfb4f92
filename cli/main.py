"""The `pulsar-grpc` command. Bad usage or configuration: a message naming it and exit code 2.

A command's module is imported only when that command runs: the broker, the SDK, grpc and
protobuf take a second or more to import, which an admin verb (an HTTP request) or ``--help``
should not pay (issue 29; docs/benchmarks.md, "CLI start-up"). The other commands stay in the
parser as stubs, so the listing, ``--help`` and "invalid choice" read as before.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection

from pulsar_grpc.cli.client_conf import add_global_connection_args, resolve

# Each command: the module (under pulsar_grpc.cli) whose add_parser() builds it, and its line
# in the listing.
COMMANDS: dict[str, tuple[str, str]] = {
    "standalone": ("standalone", "run a broker with embedded metadata and storage"),
    "broker": ("broker", "run a broker that is a member of a cluster (metadataStoreUrl=zk:...)"),
    "cluster": (
        "cluster",
        "run ZooKeeper, PostgreSQL and three brokers on this machine until Ctrl-C",
    ),
    "proxy": ("proxy", "run the stateless proxy in front of a cluster's brokers (PIP-1)"),
    "produce": ("clients", "send messages to a topic"),
    "consume": ("clients", "print and acknowledge messages of a subscription"),
    "read": ("clients", "print messages with a reader (no subscription, no acknowledgements)"),
    "topics": ("topics", "topics and their subscriptions (= admin topics)"),
    "admin": (
        "admin",
        "tenants, permissions, schemas, rate limits, bundles and brokers (pulsar-admin's)",
    ),
    "perf": ("perf", "measure throughput and latency (pulsar-perf's flags)"),
    "inspect": (
        "inspect",
        "read a topic's ledgers, cursors and entries straight from storage (read-only)",
    ),
    "tokens": ("tokens", "create keys and JSON Web Tokens as Pulsar's tokens tool"),
    "scram": ("scram", "SCRAM users and the cluster's role-token keys"),
}


def build_parser(built: Collection[str] = COMMANDS.keys()) -> argparse.ArgumentParser:
    """The whole parser, with the commands in ``built`` complete (their modules imported) and
    the others as stubs that only name themselves."""
    parser = argparse.ArgumentParser(
        prog="pulsar-grpc",
        description="A Pulsar-model message broker whose client protocol is gRPC.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = {COMMANDS[name][0] for name in built}
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        if module in modules:
            importlib.import_module(f"pulsar_grpc.cli.{module}").add_parser(sub)
    for name, (module, _) in COMMANDS.items():
        if module not in modules:
            sub.add_parser(name, add_help=False)
    sub._choices_actions[:] = [  # the listing: COMMANDS' lines, whichever were built
        sub._ChoicesPseudoAction(name, (), help) for name, (_, help) in COMMANDS.items()
    ]
    add_global_connection_args(parser)  # --url, --admin-url, --conf, ... before or after verbs
    return parser


def main(argv: list[str] | None = None) -> int:
    command = build_parser(()).parse_known_args(argv)[0].command  # --help stops here
    args = build_parser((command,)).parse_args(argv)
    try:
        resolve(args)  # a command that connects: client.conf and the defaults fill in its flags
    except ValueError as exc:
        print(f"pulsar-grpc {args.command}: {exc}", file=sys.stderr)
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
