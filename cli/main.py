"""The `pulsar-grpc` command. Bad usage or configuration: a message naming it and exit code 2."""

from __future__ import annotations

import argparse
import sys

from pulsar_grpc.cli import (
    admin,
    broker,
    clients,
    cluster,
    inspect,
    perf,
    proxy,
    scram,
    standalone,
    tokens,
    topics,
)
from pulsar_grpc.cli.client_conf import add_global_connection_args, resolve


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulsar-grpc",
        description="A Pulsar-model message broker whose client protocol is gRPC.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (
        standalone,
        broker,
        cluster,
        proxy,
        clients,
        topics,
        admin,
        perf,
        inspect,
        tokens,
        scram,
    ):
        command.add_parser(sub)
    add_global_connection_args(parser)  # --url, --admin-url, --conf, ... before or after verbs
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        resolve(args)  # a command that connects: client.conf and the defaults fill in its flags
    except ValueError as exc:
        print(f"pulsar-grpc {args.command}: {exc}", file=sys.stderr)
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
