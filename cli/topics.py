"""`pulsar-grpc topics`: create, list, delete and inspect topics through the admin REST API."""

from __future__ import annotations

import argparse
import json
import sys
import urllib.error
import urllib.request

from pulsar_grpc.broker.errors import InvalidTopicNameError
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.endpoints import ADMIN_URL_HELP, default_admin_url


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("topics", help="create, list, delete and inspect topics")
    p.add_argument("--admin-url", default=default_admin_url(), help=ADMIN_URL_HELP)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    create = verbs.add_parser("create", help="create a topic (partitioned with -p N)")
    create.add_argument("topic")
    create.add_argument("-p", "--partitions", type=int, default=0)
    listing = verbs.add_parser("list", help="list the topics of a namespace")
    listing.add_argument("namespace", nargs="?", default="public/default")
    stats = verbs.add_parser("stats", help="print a topic's stats as JSON")
    stats.add_argument("topic")
    delete = verbs.add_parser("delete", help="delete a non-partitioned topic")
    delete.add_argument("topic")
    p.set_defaults(run=run)


def _request(method: str, url: str, body: bytes | None = None) -> object:
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=30) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


def run(args: argparse.Namespace) -> int:
    base = args.admin_url.rstrip("/")
    try:
        if args.verb == "list":
            ns = NamespaceName.get(args.namespace)
            names = _request("GET", f"{base}/admin/v2/persistent/{ns}")
            assert isinstance(names, list)
            for name in names:
                print(name)
            return 0
        topic = TopicName.get(args.topic)
        url = f"{base}/admin/v2/{topic.rest_path}"
        if args.verb == "create":
            if args.partitions < 0:
                print("pulsar-grpc topics create: --partitions must be >= 0", file=sys.stderr)
                return 2
            if args.partitions:
                _request("PUT", f"{url}/partitions", str(args.partitions).encode())
            else:
                _request("PUT", url)
            print(f"created {topic}")
        elif args.verb == "stats":
            print(json.dumps(_request("GET", f"{url}/stats"), indent=2))
        elif args.verb == "delete":
            _request("DELETE", url)
            print(f"deleted {topic}")
        return 0
    except (InvalidTopicNameError, ValueError) as exc:
        print(f"pulsar-grpc topics: {exc}", file=sys.stderr)
        return 2
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace")
        try:
            reason = json.loads(reason)["reason"]
        except (ValueError, KeyError, TypeError):
            pass
        print(f"pulsar-grpc topics: {exc.code} {reason}", file=sys.stderr)
        return 1
    except urllib.error.URLError as exc:
        print(f"pulsar-grpc topics: cannot reach {base}: {exc.reason}", file=sys.stderr)
        return 1
