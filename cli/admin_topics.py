"""`pulsar-grpc admin topics` verbs with pulsar-admin's names and flags (CmdTopics):

    list NS | list-partitioned-topics NS
    create TOPIC [-p N] | create-partitioned-topic TOPIC -p N | update-partitioned-topic TOPIC -p N
    delete TOPIC [-f] | delete-partitioned-topic TOPIC [-f] | unload TOPIC
    stats TOPIC | partitioned-stats TOPIC [--per-partition] | internal-stats TOPIC
    last-message-id TOPIC | subscriptions TOPIC
    create-subscription TOPIC -s SUB [-m latest|earliest|LEDGER:ENTRY[:PARTITION[:BATCH]]]
    unsubscribe TOPIC -s SUB [-f] | skip TOPIC -s SUB -n N | clear-backlog TOPIC -s SUB
    reset-cursor TOPIC -s SUB (-t 10m | -m LEDGER:ENTRY[:PARTITION[:BATCH]] [-e])
    peek-messages TOPIC -s SUB [-n N] | examine-message TOPIC [-i earliest|latest] [-m N]

`pulsar-grpc topics ...` is the same verbs (an alias kept from before the admin command).
"""

from __future__ import annotations

import argparse
import base64
import json
import re
import time
from urllib.parse import quote, unquote

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.rest import AdminRequestError, print_lines, request, request_raw

VERBS = (
    "list",
    "list-partitioned-topics",
    "create",
    "create-partitioned-topic",
    "update-partitioned-topic",
    "delete",
    "delete-partitioned-topic",
    "unload",
    "stats",
    "partitioned-stats",
    "internal-stats",
    "last-message-id",
    "subscriptions",
    "create-subscription",
    "unsubscribe",
    "skip",
    "clear-backlog",
    "reset-cursor",
    "peek-messages",
    "examine-message",
)

LONG_MAX = (1 << 63) - 1
_UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
TOPIC_HELP = "the topic: NAME, tenant/namespace/NAME or persistent://tenant/namespace/NAME"
NAMESPACE_HELP = "the namespace: tenant/namespace"
# The help of a verb's positional argument, by what it names (verbs shared by both groups).
TARGET_HELP = {"namespace": NAMESPACE_HELP, "topic": TOPIC_HELP}


def add_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Register every verb of VERBS on ``verbs``."""
    for verb, help in (
        ("list", "the topics of a namespace (partitions and partitioned topics alike)"),
        ("list-partitioned-topics", "the partitioned topics of a namespace"),
    ):
        verbs.add_parser(verb, help=help).add_argument(
            "namespace", nargs="?", default="public/default", help="tenant/namespace"
        )
    create = _topic_verb(verbs, "create", "create a topic (a partitioned one with -p N)")
    create.add_argument(
        "-p", "--partitions", type=int, default=0, help="partitions (0: not partitioned)"
    )
    for verb, help in (
        ("create-partitioned-topic", "create a partitioned topic"),
        ("update-partitioned-topic", "raise a partitioned topic's partition count"),
    ):
        p = _topic_verb(verbs, verb, help)
        p.add_argument("-p", "--partitions", type=int, required=True, help="the partition count")
    for verb, help in (
        ("delete", "delete a non-partitioned topic"),
        ("delete-partitioned-topic", "delete a partitioned topic and every partition"),
    ):
        _topic_verb(verbs, verb, help).add_argument(
            "-f", "--force", action="store_true", help="disconnect its clients first"
        )
    _topic_verb(verbs, "unload", "unload the topic: its clients reconnect")
    _topic_verb(verbs, "stats", "the topic's stats (TopicStats) as JSON")
    _topic_verb(verbs, "partitioned-stats", "a partitioned topic's stats, summed").add_argument(
        "--per-partition", action="store_true", help="each partition's stats too"
    )
    _topic_verb(verbs, "internal-stats", "the managed ledger's internal stats as JSON")
    _topic_verb(verbs, "last-message-id", "the id of the topic's last message")
    _topic_verb(verbs, "subscriptions", "the topic's subscriptions")
    sub = _subscription_verb(verbs, "create-subscription", "create a subscription")
    sub.add_argument(
        "-m", "--messageId", default="latest",
        help="where it starts: latest (default), earliest or LEDGER:ENTRY[:PARTITION[:BATCH]]",
    )  # fmt: skip
    _subscription_verb(verbs, "unsubscribe", "delete a subscription").add_argument(
        "-f", "--force", action="store_true", help="disconnect its consumers first"
    )
    _subscription_verb(verbs, "skip", "skip messages of a subscription").add_argument(
        "-n", "--count", type=int, required=True, help="how many messages to skip"
    )
    _subscription_verb(verbs, "clear-backlog", "skip every message of a subscription")
    reset = _subscription_verb(verbs, "reset-cursor", "move a subscription back or forth")
    target = reset.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "-t", "--time", type=_relative_s, help="this long ago: 100s, 10m, 3h, 2d, 5w, 1y"
    )
    target.add_argument("-m", "--messageId", help="LEDGER:ENTRY[:PARTITION[:BATCH]]")
    reset.add_argument(
        "-e", "--exclude-message", action="store_true", help="start after the message id"
    )
    peek = _subscription_verb(verbs, "peek-messages", "print the next messages, unacknowledged")
    peek.add_argument("-n", "--count", type=int, default=1, help="how many (default 1)")
    examine = _topic_verb(verbs, "examine-message", "print a message by its place in the topic")
    examine.add_argument(
        "-i", "--initialPosition", choices=("earliest", "latest"), default="latest",
        help="count from the first or the last message (default latest)",
    )  # fmt: skip
    examine.add_argument(
        "-m", "--messagePosition", type=int, default=1, help="which one, from 1 (default 1)"
    )


def _topic_verb(
    verbs: argparse._SubParsersAction,  # type: ignore[type-arg]
    verb: str,
    help: str,
) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = verbs.add_parser(verb, help=help)
    p.add_argument("topic", help=TOPIC_HELP)
    return p


def _subscription_verb(
    verbs: argparse._SubParsersAction,  # type: ignore[type-arg]
    verb: str,
    help: str,
) -> argparse.ArgumentParser:
    p = _topic_verb(verbs, verb, help)
    p.add_argument("-s", "--subscription", required=True, help="the subscription's name")
    return p


def _relative_s(text: str) -> int:
    """pulsar-admin's relative time (RelativeTimeUtil): a number and a unit, seconds."""
    match = re.fullmatch(r"(\d+)([smhdwy]?)", text.strip().lower())
    if match is None:
        raise argparse.ArgumentTypeError(f"not a time like 10m, 3h or 2d: {text!r}")
    return int(match[1]) * _UNITS_S[match[2] or "s"]


def handles(args: argparse.Namespace) -> bool:
    return args.group == "topics" and args.verb in VERBS


def _message_id(text: str) -> dict[str, int]:
    """latest, earliest or LEDGER:ENTRY[:PARTITION[:BATCH]] (the SDK's MessageId text form,
    Pulsar's) as Pulsar's MessageId JSON."""
    lowered = text.strip().lower()
    if lowered == "latest":
        return {"ledgerId": LONG_MAX, "entryId": LONG_MAX, "partitionIndex": -1}
    if lowered == "earliest":
        return {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    from pulsar_grpc.client import MessageId  # the SDK, only for a verb that parses an id

    try:
        message_id = MessageId.parse(text)
    except ValueError:
        raise AdminRequestError(
            f"not a message id: {text!r} (latest, earliest or LEDGER:ENTRY[:PARTITION[:BATCH]])"
        ) from None
    return {
        "ledgerId": message_id.ledger_id(),
        "entryId": message_id.entry_id(),
        "partitionIndex": message_id.partition(),
        "batchIndex": message_id.batch_index(),
    }


def _json(value: object) -> bytes:
    return json.dumps(value).encode()


def _print_json(value: object) -> None:
    print(json.dumps(value, indent=2))


def run(args: argparse.Namespace, base: str) -> int:
    if args.verb in ("list", "list-partitioned-topics"):
        ns = NamespaceName.get(args.namespace)
        suffix = "/partitioned" if args.verb == "list-partitioned-topics" else ""
        print_lines(request("GET", f"{base}/admin/v2/persistent/{ns}{suffix}"))
        return 0
    topic = TopicName.get(args.topic)
    url = f"{base}/admin/v2/{topic.rest_path}"
    if args.verb in ("create", "create-partitioned-topic", "update-partitioned-topic"):
        return _create(args, topic, url)
    if args.verb in ("delete", "delete-partitioned-topic"):
        path = f"{url}/partitions" if args.verb == "delete-partitioned-topic" else url
        request("DELETE", f"{path}?force={str(args.force).lower()}")
        print(f"deleted {topic}")
    elif args.verb == "unload":
        request("PUT", f"{url}/unload")
        print(f"unloaded {topic}")
    elif args.verb == "stats":
        _print_json(request("GET", f"{url}/stats"))
    elif args.verb == "partitioned-stats":
        per = str(args.per_partition).lower()
        _print_json(request("GET", f"{url}/partitioned-stats?perPartition={per}"))
    elif args.verb == "internal-stats":
        _print_json(request("GET", f"{url}/internalStats"))
    elif args.verb == "last-message-id":
        _print_json(request("GET", f"{url}/lastMessageId"))
    elif args.verb == "subscriptions":
        print_lines(request("GET", f"{url}/subscriptions"))
    elif args.verb == "examine-message":
        query = f"initialPosition={args.initialPosition}&messagePosition={args.messagePosition}"
        _print_message(request_raw("GET", f"{url}/examinemessage?{query}"))
    else:
        _subscription(args, topic, f"{url}/subscription/{quote(args.subscription, safe='')}")
    return 0


def _create(args: argparse.Namespace, topic: TopicName, url: str) -> int:
    if args.partitions < 0 or (args.verb != "create" and args.partitions < 1):
        raise AdminRequestError(f"--partitions must be at least 1, got {args.partitions}")
    if args.verb == "update-partitioned-topic":
        request("POST", f"{url}/partitions", str(args.partitions).encode())
        print(f"updated {topic} to {args.partitions} partitions")
    elif args.partitions:
        request("PUT", f"{url}/partitions", str(args.partitions).encode())
        print(f"created {topic} with {args.partitions} partitions")
    else:
        request("PUT", url)
        print(f"created {topic}")
    return 0


def _subscription(args: argparse.Namespace, topic: TopicName, url: str) -> None:
    """A subscription verb; one that changes the subscription says what it did in one line."""
    sub = args.subscription
    if args.verb == "create-subscription":
        request("PUT", url, _json(_message_id(args.messageId)))
        print(f"created subscription {sub} on {topic} at {args.messageId}")
    elif args.verb == "unsubscribe":
        request("DELETE", f"{url}?force={str(args.force).lower()}")
        print(f"deleted subscription {sub} of {topic}")
    elif args.verb == "skip":
        request("POST", f"{url}/skip/{args.count}")
        print(f"skipped {args.count} messages of subscription {sub} on {topic}")
    elif args.verb == "clear-backlog":
        request("POST", f"{url}/skip_all")
        print(f"cleared the backlog of subscription {sub} on {topic}")
    elif args.verb == "reset-cursor":
        if args.time is not None:
            request("POST", f"{url}/resetcursor/{int(time.time() * 1000) - args.time * 1000}")
            where = f"{args.time} s ago"
        else:
            body = _message_id(args.messageId) | {"isExcluded": args.exclude_message}
            request("POST", f"{url}/resetcursor", _json(body))
            where = args.messageId
        print(f"reset subscription {sub} on {topic} to {where}")
    else:
        _peek(url, args.count)


def _peek(url: str, count: int) -> None:
    """The subscription's next ``count`` messages, entry after entry (a batch counts as its
    messages, as pulsar-admin's peekMessages); fewer when the backlog runs out first."""
    if count < 1:
        raise AdminRequestError(f"--count must be at least 1, got {count}")
    shown, position = 0, 1
    while shown < count:
        try:
            answer = request_raw("GET", f"{url}/position/{position}")
        except AdminRequestError as exc:
            if shown and str(exc).startswith("404"):
                return  # the backlog has fewer messages than asked for
            raise
        shown += _print_message(answer, count - shown)
        position += 1


def _print_message(answer: tuple[dict[str, str], bytes], most: int = 1 << 31) -> int:
    """Print a peeked entry as pulsar-admin prints messages: the id, the X-Pulsar-* metadata
    and the payload (text when it decodes, base64 otherwise); of a batch, each message, at
    most ``most`` of them. Returns how many messages it printed."""
    headers, body = answer
    entry_id = headers.get("X-Pulsar-Message-ID", "?")
    metadata = {  # the broker percent-encodes what a header cannot hold as is
        unquote(k.removeprefix("X-Pulsar-")): unquote(v)
        for k, v in headers.items()
        if k.startswith("X-Pulsar-") and k != "X-Pulsar-Message-ID"
    }
    if "X-Pulsar-num-batch-message" not in headers:
        print(f"Message ID: {entry_id}")
        print(f"Metadata: {json.dumps(metadata, sort_keys=True)}")
        print(_payload(body))
        return 1
    from pulsar_grpc.broker import entry_format  # protobuf, only for a peeked batch

    stored = entry_format.parse(body)
    if stored.HasField("compressed"):
        print(f"Message ID: {entry_id}")
        print(f"Metadata: {json.dumps(metadata, sort_keys=True)}")
        count = stored.compressed.num_messages
        print(f"(a compressed batch of {count} messages, {len(stored.compressed.messages)} bytes)")
        return min(count, most)
    messages = stored.messages[:most]
    for index, message in enumerate(messages):
        print(f"Message ID: {entry_id}:{index}")
        single = {
            **metadata,
            **{f"PROPERTY-{k}": v for k, v in message.properties.items()},
            **({"partitionKey": message.key} if message.key else {}),
            **({"null-value": "true"} if message.null_value else {}),
        }
        print(f"Metadata: {json.dumps(single, sort_keys=True)}")
        print(_payload(message.payload))
    return len(messages)


def _payload(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()
