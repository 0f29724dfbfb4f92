"""`pulsar-grpc admin` verbs for tenants and permissions, with pulsar-admin's names and flags:

    admin tenants list | get TENANT | delete TENANT
    admin tenants create|update TENANT [-r|--admin-roles a,b] [-c|--allowed-clusters c]
    admin namespaces permissions NS
    admin namespaces grant-permission NS --role R --actions produce,consume
    admin namespaces revoke-permission NS --role R
    admin namespaces grant-subscription-permission NS --subscription S --roles a,b
    admin namespaces revoke-subscription-permission NS --subscription S --role R
    admin topics permissions TOPIC
    admin topics grant-permission TOPIC --role R --actions produce,consume
    admin topics revoke-permission TOPIC --role R

As pulsar-admin's, ``tenants update`` keeps what a flag does not give.
"""

from __future__ import annotations

import argparse
import json
from urllib.parse import quote

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.admin_topics import NAMESPACE_HELP, TARGET_HELP, TOPIC_HELP
from pulsar_grpc.cli.rest import print_lines, request

NAMESPACE_VERBS = (
    "permissions",
    "grant-permission",
    "revoke-permission",
    "grant-subscription-permission",
    "revoke-subscription-permission",
)
TOPIC_VERBS = ("permissions", "grant-permission", "revoke-permission")


def _names(text: str) -> list[str]:
    return [n.strip() for n in text.split(",") if n.strip()]


TENANT_HELP = "the tenant's name"
ROLE_HELP = "the role whose grant goes"
SUBSCRIPTION_HELP = "the subscription's name"


def add_tenant_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    verbs.add_parser("list", help="every tenant")
    verbs.add_parser("get", help="a tenant's admin roles and allowed clusters").add_argument(
        "tenant", help=TENANT_HELP
    )
    deleting = verbs.add_parser("delete", help="delete a tenant (refused while it has namespaces)")
    deleting.add_argument("tenant", help="the tenant, once its namespaces are deleted")
    for verb in ("create", "update"):
        p = verbs.add_parser(verb, help=f"{verb} a tenant")
        p.add_argument("tenant", help=TENANT_HELP)
        p.add_argument("-r", "--admin-roles", type=_names, help="comma-separated roles")
        p.add_argument("-c", "--allowed-clusters", type=_names, help="comma-separated clusters")


def add_namespace_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    verbs.add_parser("permissions", help="the namespace's grants").add_argument(
        "namespace", help=NAMESPACE_HELP
    )
    grant = verbs.add_parser("grant-permission", help="grant actions on the namespace to a role")
    _grant_args(grant, "namespace")
    revoke = verbs.add_parser("revoke-permission", help="revoke a role's grant on the namespace")
    revoke.add_argument("namespace", help=NAMESPACE_HELP)
    revoke.add_argument("--role", required=True, help=ROLE_HELP)
    sub_grant = verbs.add_parser(
        "grant-subscription-permission", help="only these roles may consume a subscription"
    )
    sub_grant.add_argument("namespace", help=NAMESPACE_HELP)
    sub_grant.add_argument("--subscription", required=True, help=SUBSCRIPTION_HELP)
    sub_grant.add_argument("--roles", required=True, type=_names, help="comma-separated roles")
    sub_revoke = verbs.add_parser(
        "revoke-subscription-permission", help="take a role off a subscription's roles"
    )
    sub_revoke.add_argument("namespace", help=NAMESPACE_HELP)
    sub_revoke.add_argument("--subscription", required=True, help=SUBSCRIPTION_HELP)
    sub_revoke.add_argument("--role", required=True, help="the role to take off")


def add_topic_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    verbs.add_parser("permissions", help="the topic's grants").add_argument(
        "topic", help=TOPIC_HELP
    )
    _grant_args(verbs.add_parser("grant-permission", help="grant actions on the topic"), "topic")
    revoke = verbs.add_parser("revoke-permission", help="revoke a role's grant on the topic")
    revoke.add_argument("topic", help=TOPIC_HELP)
    revoke.add_argument("--role", required=True, help=ROLE_HELP)


def _grant_args(p: argparse.ArgumentParser, target: str) -> None:
    p.add_argument(target, help=TARGET_HELP[target])
    p.add_argument("--role", required=True, help="the role to grant to (a/b-* patterns match)")
    p.add_argument("--actions", required=True, type=_names, help="e.g. produce,consume")


def handles(args: argparse.Namespace) -> bool:
    if args.group == "tenants":
        return True
    if args.group == "namespaces":
        return args.verb in NAMESPACE_VERBS
    return args.group == "topics" and args.verb in TOPIC_VERBS


def run(args: argparse.Namespace, base: str) -> int:
    if args.group == "tenants":
        _tenants(args, f"{base}/admin/v2/tenants")
    elif args.group == "namespaces":
        ns = NamespaceName.get(args.namespace)
        _namespace(args, str(ns), f"{base}/admin/v2/namespaces/{ns}")
    else:
        topic = TopicName.get(args.topic)
        _topic(args, str(topic), f"{base}/admin/v2/{topic.rest_path}")
    return 0


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _tenants(args: argparse.Namespace, url: str) -> None:
    if args.verb == "list":
        print_lines(request("GET", url))
        return
    url = f"{url}/{quote(args.tenant, safe='')}"
    if args.verb == "get":
        print(json.dumps(request("GET", url), indent=2))
        return
    if args.verb == "delete":
        request("DELETE", url)
        print(f"deleted tenant {args.tenant}")
        return
    info: dict[str, object] = {"adminRoles": [], "allowedClusters": []}
    if args.verb == "update":
        current = request("GET", url)
        if isinstance(current, dict):
            info.update(current)
    if args.admin_roles is not None:
        info["adminRoles"] = args.admin_roles
    if args.allowed_clusters is not None:
        info["allowedClusters"] = args.allowed_clusters
    request("PUT" if args.verb == "create" else "POST", url, _json(info))
    print(f"{args.verb}d tenant {args.tenant}")  # created, updated


def _namespace(args: argparse.Namespace, ns: str, url: str) -> None:
    if args.verb in ("permissions", "grant-permission", "revoke-permission"):
        _role_permissions(args, ns, url)
    elif args.verb == "grant-subscription-permission":
        sub = quote(args.subscription, safe="")
        request("POST", f"{url}/permission/{sub}", _json(args.roles))
        roles = ", ".join(args.roles)
        print(f"granted subscription {args.subscription} of {ns} to {roles}")
    else:
        sub, role = quote(args.subscription, safe=""), quote(args.role, safe="")
        request("DELETE", f"{url}/permission/{sub}/{role}")
        print(f"revoked subscription {args.subscription} of {ns} from {args.role}")


def _topic(args: argparse.Namespace, topic: str, url: str) -> None:
    _role_permissions(args, topic, url)


def _role_permissions(args: argparse.Namespace, target: str, url: str) -> None:
    """A namespace's or a topic's permissions verb; a grant or revoke says so in one line."""
    role_url = f"{url}/permissions/{quote(getattr(args, 'role', ''), safe='')}"
    if args.verb == "permissions":
        print(json.dumps(request("GET", f"{url}/permissions"), indent=2))
    elif args.verb == "grant-permission":
        request("POST", role_url, _json(args.actions))
        print(f"granted {', '.join(args.actions)} on {target} to {args.role}")
    else:
        request("DELETE", role_url)
        print(f"revoked the permissions of {args.role} on {target}")
