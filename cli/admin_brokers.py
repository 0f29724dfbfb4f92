"""`pulsar-grpc admin brokers` verbs for the dynamic configuration, with pulsar-admin's names:

    admin brokers update-dynamic-config --config NAME --value VALUE
    admin brokers delete-dynamic-config --config NAME
    admin brokers list-dynamic-config        (the names that may be changed)
    admin brokers get-all-dynamic-config     (the overrides stored for the cluster)
    admin brokers get-runtime-config         (every value in effect on the broker asked)

They need a super-user when authorization is on; see broker/web/brokers_config_admin.py.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse

from pulsar_grpc.cli.rest import print_lines, request

BASE = "/admin/v2/brokers/configuration"
VERBS = (
    "update-dynamic-config",
    "delete-dynamic-config",
    "list-dynamic-config",
    "get-all-dynamic-config",
    "get-runtime-config",
)


def add_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    update = verbs.add_parser("update-dynamic-config", help="change a property on every broker")
    update.add_argument("--config", required=True, help="the property's name")
    update.add_argument("--value", required=True, help="its value, as in broker.conf")
    delete = verbs.add_parser(
        "delete-dynamic-config", help="remove an override: broker.conf's value holds again"
    )
    delete.add_argument("--config", required=True, help="the property's name")
    verbs.add_parser("list-dynamic-config", help="the properties that may be changed")
    verbs.add_parser("get-all-dynamic-config", help="the overrides stored for the cluster")
    verbs.add_parser("get-runtime-config", help="every property's value on this broker")


def handles(args: argparse.Namespace) -> bool:
    return args.group == "brokers" and args.verb in VERBS


def _part(text: str) -> str:
    return urllib.parse.quote(text, safe="")


def run(args: argparse.Namespace, base: str) -> int:
    url = f"{base}{BASE}"
    if args.verb == "update-dynamic-config":
        request("POST", f"{url}/{_part(args.config)}/{_part(args.value)}")
        print(f"set {args.config} to {args.value} on every broker")
    elif args.verb == "delete-dynamic-config":
        request("DELETE", f"{url}/{_part(args.config)}")
        print(f"deleted the override of {args.config}: broker.conf's value holds")
    elif args.verb == "list-dynamic-config":
        print_lines(request("GET", url))
    else:
        path = "values" if args.verb == "get-all-dynamic-config" else "runtime"
        print(json.dumps(request("GET", f"{url}/{path}"), indent=2, sort_keys=True))
    return 0
