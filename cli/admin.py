"""`pulsar-grpc admin`: pulsar-admin's verbs for bundles and brokers, over the admin REST API.

    admin namespaces bundles NS
    admin namespaces unload NS [-b BUNDLE]
    admin namespaces split-bundle NS -b BUNDLE [-u] [--split-algorithm-name NAME]
                                             [--split-boundaries POS,POS]
    admin brokers list CLUSTER
    admin brokers namespaces CLUSTER -u|--url BROKER   (the broker asked about)
    admin brokers leader-broker
    admin topics bundle-range TOPIC

and the tenants and permissions verbs of cli/admin_permissions.py, the namespace verbs of
cli/admin_namespaces.py, the topic and subscription verbs of cli/admin_topics.py, the schema
verbs of cli/admin_schemas.py, the rate-limit verbs of cli/admin_rates.py, the backlog-quota
verbs of cli/admin_backlog_quota.py and the
dynamic-configuration verbs of cli/admin_brokers.py.

A request sent to a broker that does not own the bundle is redirected to the owner and followed.
"""

from __future__ import annotations

import argparse
import json

from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceName, TopicName
from pulsar_grpc.cli import (
    admin_backlog_quota,
    admin_brokers,
    admin_namespaces,
    admin_permissions,
    admin_rates,
    admin_schemas,
    admin_topics,
)
from pulsar_grpc.cli.admin_topics import NAMESPACE_HELP, TOPIC_HELP
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.cli.rest import print_lines, reporting_errors, request

CLUSTER_HELP = "the cluster's name (the brokers' clusterName)"
SPLIT_ALGORITHMS = (
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "admin",
    )
    add_connection_args(p, [UrlFlag.ADMIN])
    groups = p.add_subparsers(dest="group", required=True, metavar="GROUP")

    admin_permissions.add_tenant_verbs(_verbs(groups, "tenants", "tenants and their admins"))
    ns_verbs = _verbs(
        groups, "namespaces", "namespaces, their policies, permissions, schema policies, bundles"
    )
    admin_namespaces.add_verbs(ns_verbs)
    admin_permissions.add_namespace_verbs(ns_verbs)
    admin_schemas.add_namespace_verbs(ns_verbs)
    admin_rates.add_verbs(ns_verbs, "namespace")
    admin_backlog_quota.add_verbs(ns_verbs, "namespace")
    bundles = ns_verbs.add_parser("bundles", help="print the namespace's bundles (BundlesData)")
    bundles.add_argument("namespace", help=NAMESPACE_HELP)
    unload = ns_verbs.add_parser("unload", help="unload a bundle, or every bundle of the namespace")
    unload.add_argument("namespace", help=NAMESPACE_HELP)
    unload.add_argument("-b", "--bundle", help="the bundle range, e.g. 0x00000000_0x40000000")
    split = ns_verbs.add_parser("split-bundle", help="split a bundle")
    split.add_argument("namespace", help=NAMESPACE_HELP)
    split.add_argument("-b", "--bundle", required=True, help="the bundle range to split")
    split.add_argument("-u", "--unload", action="store_true", help="unload the new bundles")
    split.add_argument(
        "-san", "--split-algorithm-name", choices=SPLIT_ALGORITHMS, help="how to split it"
    )
    split.add_argument(
        "-sb",
        "--split-boundaries",
        type=_positions,
        help="comma-separated hash positions, for specified_positions_divide",
    )

    br_verbs = _verbs(groups, "brokers", "the cluster's brokers")
    listing = br_verbs.add_parser("list", help="the cluster's active brokers")
    listing.add_argument("cluster", help=CLUSTER_HELP)
    owned = br_verbs.add_parser("namespaces", help="the bundles a broker owns")
    owned.add_argument("cluster", help=CLUSTER_HELP)
    owned.add_argument(
        "-u", "--url", required=True, metavar="BROKER",
        help="the broker asked about, host:port as `brokers list` prints it (pulsar-admin's "
        "--url: a broker's id, not where this command connects, which is --admin-url)",
    )  # fmt: skip
    br_verbs.add_parser("leader-broker", help="the cluster's leader broker")
    admin_brokers.add_verbs(br_verbs)

    tp_verbs = _verbs(groups, "topics", "topics, subscriptions, stats, permissions, bundle")
    admin_topics.add_verbs(tp_verbs)
    admin_permissions.add_topic_verbs(tp_verbs)
    admin_rates.add_verbs(tp_verbs, "topic")
    admin_backlog_quota.add_verbs(tp_verbs, "topic")
    bundle_range = tp_verbs.add_parser("bundle-range", help="the bundle a topic belongs to")
    bundle_range.add_argument("topic", help=TOPIC_HELP)
    admin_schemas.add_schema_verbs(_verbs(groups, "schemas", "topics' schemas"))
    p.set_defaults(run=run)


def _verbs(
    groups: argparse._SubParsersAction,  # type: ignore[type-arg]
    group: str,
    help: str,
) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    """The verbs of ``admin GROUP``: each one's parser is added to what this returns."""
    return groups.add_parser(group, help=help).add_subparsers(
        dest="verb", required=True, metavar="VERB"
    )


def _positions(text: str) -> list[int]:
    try:
        return [int(p, 0) for p in text.split(",") if p.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of numbers: {text!r}") from None


def run(args: argparse.Namespace) -> int:
    return reporting_errors("admin", lambda: _run(args), args)


def _run(args: argparse.Namespace) -> int:
    base = args.admin_url.rstrip("/")
    if admin_permissions.handles(args):
        return admin_permissions.run(args, base)
    if admin_schemas.handles(args):
        return admin_schemas.run(args, base)
    if admin_rates.handles(args):
        return admin_rates.run(args, base)
    if admin_backlog_quota.handles(args):
        return admin_backlog_quota.run(args, base)
    if admin_brokers.handles(args):
        return admin_brokers.run(args, base)
    if admin_namespaces.handles(args):
        return admin_namespaces.run(args, base)
    if admin_topics.handles(args):
        return admin_topics.run(args, base)
    if args.group == "namespaces":
        ns = NamespaceName.get(args.namespace)
        url = f"{base}/admin/v2/namespaces/{ns}"
        if args.verb == "bundles":
            print(json.dumps(request("GET", f"{url}/bundles"), indent=2))
        elif args.verb == "unload":
            if args.bundle:
                bundle = NamespaceBundle.parse(ns, args.bundle)
                request("PUT", f"{url}/{bundle.range_str}/unload")
                print(f"unloaded bundle {bundle.range_str} of {ns}")
            else:
                request("PUT", f"{url}/unload")
                print(f"unloaded {ns}")
        else:
            bundle = NamespaceBundle.parse(ns, args.bundle)
            query = f"unload={str(args.unload).lower()}"
            if args.split_algorithm_name:
                query += f"&splitAlgorithmName={args.split_algorithm_name}"
            body = json.dumps(args.split_boundaries).encode() if args.split_boundaries else None
            request("PUT", f"{url}/{bundle.range_str}/split?{query}", body)
            print(f"split bundle {bundle.range_str} of {ns}")
    elif args.group == "brokers":
        if args.verb == "list":
            print_lines(request("GET", f"{base}/admin/v2/brokers/{args.cluster}"))
        elif args.verb == "namespaces":
            owned = request(
                "GET", f"{base}/admin/v2/brokers/{args.cluster}/{args.url}/ownedNamespaces"
            )
            print(json.dumps(owned, indent=2))
        else:
            print(json.dumps(request("GET", f"{base}/admin/v2/brokers/leaderBroker"), indent=2))
    else:
        topic = TopicName.get(args.topic)
        print(request("GET", f"{base}/lookup/v2/topic/{topic.rest_path}/bundle"))
    return 0
