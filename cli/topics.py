"""`pulsar-grpc topics`: an alias of `pulsar-grpc admin topics` (create, list, delete, stats,
subscriptions and the rest of pulsar-admin's topic verbs), over the admin REST API."""

from __future__ import annotations

import argparse

from pulsar_grpc.cli import admin_topics
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.cli.rest import reporting_errors


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics")
    add_connection_args(p, [UrlFlag.ADMIN])
    admin_topics.add_verbs(p.add_subparsers(dest="verb", required=True, metavar="VERB"))
    p.set_defaults(run=run, group="topics")


def run(args: argparse.Namespace) -> int:
    return reporting_errors(
        "topics", lambda: admin_topics.run(args, args.admin_url.rstrip("/")), args
    )
