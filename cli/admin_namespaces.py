"""`pulsar-grpc admin namespaces` verbs for a namespace's life, with pulsar-admin's names and
flags (CmdNamespaces):

    admin namespaces list TENANT
    admin namespaces policies NS
    admin namespaces create NS [-b|--bundles N] [-c|--clusters c]
    admin namespaces delete NS [-f|--force]
    admin namespaces get-encryption-required NS
    admin namespaces set-encryption-required NS -e|--enable | -d|--disable
    admin namespaces get-deduplication NS
    admin namespaces set-deduplication NS -e|--enable | -d|--disable
    admin namespaces remove-deduplication NS
"""

from __future__ import annotations

import argparse
import json
from urllib.parse import quote

from pulsar_grpc.broker.naming import NamespaceName
from pulsar_grpc.cli.rest import print_lines, request

VERBS = (
    "list",
    "policies",
    "create",
    "delete",
    "get-encryption-required",
    "set-encryption-required",
    "get-deduplication",
    "set-deduplication",
    "remove-deduplication",
)


def add_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    verbs.add_parser("list", help="the namespaces of a tenant").add_argument(
        "tenant", help="the tenant"
    )
    verbs.add_parser("policies", help="the namespace's policies as JSON").add_argument(
        "namespace", help="tenant/namespace"
    )
    create = verbs.add_parser("create", help="create a namespace")
    create.add_argument("namespace", help="tenant/namespace")
    create.add_argument(
        "-b", "--bundles", type=int, help="how many bundles (default: the broker's default)"
    )
    create.add_argument(
        "-c", "--clusters", help="comma-separated replication clusters (this cluster only)"
    )
    delete = verbs.add_parser("delete", help="delete a namespace")
    delete.add_argument("namespace", help="tenant/namespace")
    delete.add_argument(
        "-f", "--force", action="store_true", help="delete its topics too (else refused)"
    )

    verbs.add_parser(
        "get-encryption-required", help="whether the namespace refuses unencrypted messages"
    ).add_argument("namespace", help="tenant/namespace")
    _add_switch(
        verbs,
        "set-encryption-required",
        "make the namespace refuse unencrypted messages, or not",
        ("refuse unencrypted messages", "accept them again"),
    )
    verbs.add_parser(
        "get-deduplication", help="the namespace's deduplication policy (null: not set)"
    ).add_argument("namespace", help="tenant/namespace")
    _add_switch(
        verbs, "set-deduplication", "turn deduplication on or off", ("deduplicate", "do not")
    )
    verbs.add_parser(
        "remove-deduplication", help="remove the policy: brokerDeduplicationEnabled holds"
    ).add_argument("namespace", help="tenant/namespace")


def _add_switch(
    verbs: argparse._SubParsersAction,  # type: ignore[type-arg]
    verb: str,
    help: str,
    switch_help: tuple[str, str],
) -> None:
    """A verb that turns a namespace's boolean policy on or off: ``-e`` / ``--enable`` or
    ``-d`` / ``--disable``, one of them required, as pulsar-admin's."""
    parser = verbs.add_parser(verb, help=help)
    parser.add_argument("namespace", help="tenant/namespace")
    switch = parser.add_mutually_exclusive_group(required=True)
    switch.add_argument("-e", "--enable", action="store_true", help=switch_help[0])
    switch.add_argument("-d", "--disable", action="store_true", help=switch_help[1])


def switched(args: argparse.Namespace) -> str:
    """What a verb made with ``_add_switch`` did, for its confirmation line."""
    return "enabled" if args.enable else "disabled"


def handles(args: argparse.Namespace) -> bool:
    return args.group == "namespaces" and args.verb in VERBS


def run(args: argparse.Namespace, base: str) -> int:
    if args.verb == "list":
        print_lines(request("GET", f"{base}/admin/v2/namespaces/{quote(args.tenant, safe='')}"))
        return 0
    ns = NamespaceName.get(args.namespace)
    url = f"{base}/admin/v2/namespaces/{ns}"
    if args.verb == "policies":
        print(json.dumps(request("GET", url), indent=2))
    elif args.verb == "get-encryption-required":
        print(json.dumps(request("GET", f"{url}/encryptionRequired")))
    elif args.verb == "set-encryption-required":
        request("POST", f"{url}/encryptionRequired", json.dumps(bool(args.enable)).encode())
        print(f"{switched(args)} encryption-required on {ns}")
    elif args.verb == "get-deduplication":
        print(json.dumps(request("GET", f"{url}/deduplication")))
    elif args.verb == "set-deduplication":
        request("POST", f"{url}/deduplication", json.dumps(bool(args.enable)).encode())
        print(f"{switched(args)} deduplication on {ns}")
    elif args.verb == "remove-deduplication":
        request("DELETE", f"{url}/deduplication")
        print(f"removed the deduplication policy of {ns}")
    elif args.verb == "create":
        policies: dict[str, object] = {}
        if args.bundles is not None:
            policies["bundles"] = {"numBundles": args.bundles}
        if args.clusters:
            policies["replication_clusters"] = [
                c.strip() for c in args.clusters.split(",") if c.strip()
            ]
        request("PUT", url, json.dumps(policies).encode())
        print(f"created {ns}")
    else:
        request("DELETE", f"{url}?force={str(args.force).lower()}")
        print(f"deleted {ns}")
    return 0
