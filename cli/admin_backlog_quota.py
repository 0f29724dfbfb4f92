"""`pulsar-grpc admin` verbs for backlog quotas, with pulsar-admin's names and flags:

    admin namespaces set-backlog-quota NS [-l|--limit|--limitSize SIZE] [-lt|--limitTime TIME]
                                          -p|--policy POLICY [-t|--type TYPE]
    admin namespaces get-backlog-quotas NS
    admin namespaces remove-backlog-quota NS [-t|--type TYPE]

and the same verbs under ``admin topics`` with a TOPIC (``get-backlog-quotas`` takes
``-ap``/``--applied`` there: the quotas in effect, from whichever level). SIZE is bytes or
with a unit (``10M``, ``16G``: Pulsar's k, m, g, t, powers of 1024); TIME is seconds or with a
unit (``100m``, ``3h``, ``2d``, ``5w``). TYPE is ``destination_storage`` (the default: the size
limit) or ``message_age`` (the time limit); POLICY one of ``producer_request_hold``,
``producer_exception``, ``consumer_backlog_eviction``.
"""

from __future__ import annotations

import argparse
import json

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.cli.admin_rates import policy_target
from pulsar_grpc.cli.admin_topics import TARGET_HELP
from pulsar_grpc.cli.rest import request

VERBS = ("set-backlog-quota", "get-backlog-quotas", "remove-backlog-quota")
TYPES = ("destination_storage", "message_age")
POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")
_SIZE_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _scaled(text: str, units: dict[str, int], what: str) -> int:
    """``text`` as a number with an optional one-letter unit (none: the base unit); -1 and
    other non-positive numbers mean no limit, as in pulsar-admin."""
    text = text.strip().lower()
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "")
    try:
        value = int(number)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a {what}: {text[:40]!r}") from None
    return value * units[unit] if unit and value > 0 else value


def size(text: str) -> int:
    return _scaled(text, _SIZE_UNITS, "size (e.g. 10M, 16G)")


def seconds(text: str) -> int:
    return _scaled(text, _TIME_UNITS, "time (e.g. 100m, 3h, 2d)")


def add_verbs(verbs: argparse._SubParsersAction, target: str) -> None:  # type: ignore[type-arg]
    """The backlog-quota verbs of ``admin namespaces`` (``target`` "namespace") or ``topics``."""
    setter = verbs.add_parser("set-backlog-quota", help=f"set a backlog quota of the {target}")
    setter.add_argument(target, help=TARGET_HELP[target])
    setter.add_argument(
        "-l", "--limit", "--limitSize", dest="limit_size", type=size, default=-1,
        help="the size limit, bytes or with a unit (10M, 16G); for destination_storage",
    )  # fmt: skip
    setter.add_argument(
        "-lt", "--limitTime", dest="limit_time", type=seconds, default=-1,
        help="the time limit, seconds or with a unit (100m, 3h, 2d); for message_age",
    )  # fmt: skip
    setter.add_argument("-p", "--policy", required=True, choices=POLICIES, help="past the limit")
    setter.add_argument("-t", "--type", default=TYPES[0], choices=TYPES, help="the quota's type")
    getter = verbs.add_parser("get-backlog-quotas", help=f"print the {target}'s backlog quotas")
    getter.add_argument(target, help=TARGET_HELP[target])
    if target == "topic":
        getter.add_argument(
            "-ap", "--applied", action="store_true", help="the quotas in effect, from any level"
        )
    remover = verbs.add_parser(
        "remove-backlog-quota", help=f"remove a backlog quota of the {target}"
    )
    remover.add_argument(target, help=TARGET_HELP[target])
    remover.add_argument("-t", "--type", default=TYPES[0], choices=TYPES, help="the quota's type")


def handles(args: argparse.Namespace) -> bool:
    return args.group in ("namespaces", "topics") and args.verb in VERBS


def run(args: argparse.Namespace, base: str) -> int:
    target, url = policy_target(args, base)
    if args.verb == "get-backlog-quotas":
        applied = "?applied=true" if getattr(args, "applied", False) else ""
        print(json.dumps(request("GET", f"{url}/backlogQuotaMap{applied}"), indent=2))
        return 0
    url = f"{url}/backlogQuota?backlogQuotaType={args.type}"
    if args.verb == "remove-backlog-quota":
        request("DELETE", url)
        print(f"removed the {args.type} backlog quota of {target}")
        return 0
    if args.type == "destination_storage" and args.limit_size <= 0:
        raise InvalidArgumentError("a destination_storage quota needs a size limit (-l, --limit)")
    if args.type == "message_age" and args.limit_time <= 0:
        raise InvalidArgumentError("a message_age quota needs a time limit (-lt, --limitTime)")
    body = {"limitSize": args.limit_size, "limitTime": args.limit_time, "policy": args.policy}
    request("POST", url, json.dumps(body).encode())
    print(f"set the {args.type} backlog quota of {target}")
    return 0
