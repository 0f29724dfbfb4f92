"""`pulsar-grpc admin` verbs for rate limits, with pulsar-admin's names and flags:

    admin namespaces set-publish-rate NS [-m|--msg-publish-rate N] [-b|--byte-publish-rate N]
    admin namespaces get-publish-rate | remove-publish-rate NS
    admin namespaces set-dispatch-rate NS [-md|--msg-dispatch-rate N]
                                          [-bd|--byte-dispatch-rate N]
                                          [-dt|--dispatch-rate-period SECONDS]
                                          [-rp|--relative-to-publish-rate]
    admin namespaces get-dispatch-rate | remove-dispatch-rate NS
    admin namespaces set-subscription-dispatch-rate NS (the same flags)
    admin namespaces get-subscription-dispatch-rate | remove-subscription-dispatch-rate NS

and the same verbs under ``admin topics`` with a TOPIC (``get-...`` takes ``--applied`` there:
the limit in effect, from whichever level). -1 (the default) means no limit of that kind.
"""

from __future__ import annotations

import argparse
import json

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.admin_topics import TARGET_HELP
from pulsar_grpc.cli.rest import request

# verb suffix -> the REST path's last part
RATES = {
    "publish-rate": "publishRate",
    "dispatch-rate": "dispatchRate",
    "subscription-dispatch-rate": "subscriptionDispatchRate",
}
VERBS = tuple(f"{action}-{rate}" for rate in RATES for action in ("set", "get", "remove"))


def add_verbs(verbs: argparse._SubParsersAction, target: str) -> None:  # type: ignore[type-arg]
    """The rate verbs of ``admin namespaces`` (``target`` "namespace") or ``admin topics``."""
    for rate in RATES:
        setter = verbs.add_parser(f"set-{rate}", help=f"set the {target}'s {rate}")
        setter.add_argument(target, help=TARGET_HELP[target])
        if rate == "publish-rate":
            setter.add_argument(
                "-m", "--msg-publish-rate", type=int, default=-1, help=_per_second("messages")
            )
            setter.add_argument(
                "-b", "--byte-publish-rate", type=int, default=-1, help=_per_second("bytes")
            )
        else:
            setter.add_argument(
                "-md", "--msg-dispatch-rate", type=int, default=-1, help=_per_period("messages")
            )
            setter.add_argument(
                "-bd", "--byte-dispatch-rate", type=int, default=-1, help=_per_period("bytes")
            )
            setter.add_argument(
                "-dt",
                "--dispatch-rate-period",
                type=int,
                default=1,
                help="the period the dispatch rates count over, in seconds (default 1)",
            )
            setter.add_argument(
                "-rp",
                "--relative-to-publish-rate",
                action="store_true",
                help="allow the topic's current publish rate plus the given rates",
            )
        getter = verbs.add_parser(f"get-{rate}", help=f"print the {target}'s {rate}")
        getter.add_argument(target, help=TARGET_HELP[target])
        if target == "topic":
            getter.add_argument(
                "--applied", action="store_true", help="the limit in effect, from any level"
            )
        verbs.add_parser(f"remove-{rate}", help=f"remove the {target}'s {rate}").add_argument(
            target, help=TARGET_HELP[target]
        )


def _per_second(unit: str) -> str:
    return f"at most this many {unit} a second (-1, the default, or 0: no limit)"


def _per_period(unit: str) -> str:
    return (
        f"at most this many {unit} every --dispatch-rate-period (-1, the default, or 0: no limit)"
    )


def handles(args: argparse.Namespace) -> bool:
    return args.group in ("namespaces", "topics") and args.verb in VERBS


def _body(args: argparse.Namespace, rate: str) -> bytes:
    if rate == "publish-rate":
        body = {
            "publishThrottlingRateInMsg": args.msg_publish_rate,
            "publishThrottlingRateInByte": args.byte_publish_rate,
        }
    else:
        body = {
            "dispatchThrottlingRateInMsg": args.msg_dispatch_rate,
            "dispatchThrottlingRateInByte": args.byte_dispatch_rate,
            "ratePeriodInSecond": args.dispatch_rate_period,
            "relativeToPublishRate": args.relative_to_publish_rate,
        }
    return json.dumps(body).encode()


def policy_target(args: argparse.Namespace, base: str) -> tuple[str, str]:
    """The namespace or topic a policy verb names, and its admin URL (without the policy)."""
    if args.group == "namespaces":
        target = str(NamespaceName.get(args.namespace))
        return target, f"{base}/admin/v2/namespaces/{target}"
    topic = TopicName.get(args.topic)
    return str(topic), f"{base}/admin/v2/{topic.rest_path}"


def run(args: argparse.Namespace, base: str) -> int:
    target, url = policy_target(args, base)
    action, _, rate = args.verb.partition("-")
    url = f"{url}/{RATES[rate]}"
    if action == "set":
        request("POST", url, _body(args, rate))
        print(f"set the {rate} of {target}")
    elif action == "remove":
        request("DELETE", url)
        print(f"removed the {rate} of {target}")
    else:
        applied = "?applied=true" if getattr(args, "applied", False) else ""
        print(json.dumps(request("GET", url + applied), indent=2))
    return 0
