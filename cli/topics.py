"""`pulsar-grpc topics`: create, list, delete and inspect topics through the admin REST API."""

from __future__ import annotations

import argparse
import json
import sys

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.cli.rest import print_lines, reporting_errors, request

TOPIC_HELP = "topic name, e.g. my-topic or persistent://tenant/namespace/topic"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics", help="create, list, delete and inspect topics")
    add_connection_args(p, [UrlFlag.ADMIN])
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = verbs.add_parser("create", help="create a topic (partitioned with -p N)")
    create.add_argument("topic", help=TOPIC_HELP)
    create.add_argument(
        "-p", "--partitions", type=int, default=0,
        help="create a partitioned topic of N partitions (default 0: not partitioned)",
    )  # fmt: skip
    listing = verbs.add_parser("list", help="list the topics of a namespace")
    listing.add_argument(
        "namespace", nargs="?", default="public/default",
        help="tenant/namespace (default public/default)",
    )  # fmt: skip
    stats = verbs.add_parser("stats", help="print a topic's stats as JSON")
    stats.add_argument("topic", help=TOPIC_HELP)
    delete = verbs.add_parser("delete", help="delete a non-partitioned topic")
    delete.add_argument("topic", help=TOPIC_HELP)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return reporting_errors("topics", lambda: _run(args), args)


def _run(args: argparse.Namespace) -> int:
    base = args.admin_url.rstrip("/")
    if args.verb == "list":
        ns = NamespaceName.get(args.namespace)
        print_lines(request("GET", f"{base}/admin/v2/persistent/{ns}"))
        return 0
    topic = TopicName.get(args.topic)
    url = f"{base}/admin/v2/{topic.rest_path}"
    if args.verb == "create":
        if args.partitions < 0:
            print("pulsar-grpc topics create: --partitions must be >= 0", file=sys.stderr)
            return 2
        if args.partitions:
            request("PUT", f"{url}/partitions", str(args.partitions).encode())
        else:
            request("PUT", url)
        print(f"created {topic}")
    elif args.verb == "stats":
        print(json.dumps(request("GET", f"{url}/stats"), indent=2))
    elif args.verb == "delete":
        request("DELETE", url)
        print(f"deleted {topic}")
    return 0
