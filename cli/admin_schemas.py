"""`pulsar-grpc admin` verbs for schemas, with pulsar-admin's names and flags:

    admin schemas get TOPIC [--version V]
    admin schemas upload TOPIC -f|--filename FILE
    admin schemas delete TOPIC [-f|--force]
    admin schemas compatibility TOPIC -f|--filename FILE
    admin namespaces get-schema-compatibility-strategy NS
    admin namespaces set-schema-compatibility-strategy NS -c|--compatibility STRATEGY
    admin namespaces get-is-allow-auto-update-schema NS
    admin namespaces set-is-allow-auto-update-schema NS -e|--enable | -d|--disable
    admin namespaces get-schema-validation-enforce NS
    admin namespaces set-schema-validation-enforce NS -e|--enable | -d|--disable

FILE is what pulsar-admin takes: a PostSchemaPayload, ``{"type": "AVRO", "schema": "<the Avro
schema as a JSON string>", "properties": {}}``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.cli.admin_namespaces import switched
from pulsar_grpc.cli.admin_topics import NAMESPACE_HELP, TOPIC_HELP
from pulsar_grpc.cli.rest import AdminRequestError, request

SCHEMA_VERBS = ("get", "upload", "delete", "compatibility")
NAMESPACE_VERBS = (
    "get-schema-compatibility-strategy",
    "set-schema-compatibility-strategy",
    "get-is-allow-auto-update-schema",
    "set-is-allow-auto-update-schema",
    "get-schema-validation-enforce",
    "set-schema-validation-enforce",
)
# The namespace policy each verb pair reads and writes, and how a set is sent.
_POLICY = {
    "schema-compatibility-strategy": ("schemaCompatibilityStrategy", "PUT"),
    "is-allow-auto-update-schema": ("isAllowAutoUpdateSchema", "POST"),
    "schema-validation-enforce": ("schemaValidationEnforced", "POST"),
}


def add_schema_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    get = verbs.add_parser("get", help="the topic's latest schema, or one version")
    get.add_argument("topic", help=TOPIC_HELP)
    get.add_argument("--version", type=int, help="the version to get")
    for verb, help in (
        ("upload", "register a schema for the topic"),
        ("compatibility", "test whether a schema is compatible with the topic's"),
    ):
        p = verbs.add_parser(verb, help=help)
        p.add_argument("topic", help=TOPIC_HELP)
        p.add_argument(
            "-f", "--filename", required=True, type=Path, help="a PostSchemaPayload JSON file"
        )
    delete = verbs.add_parser("delete", help="delete the topic's schema")
    delete.add_argument("topic", help=TOPIC_HELP)
    delete.add_argument("-f", "--force", action="store_true", help="forget every version")


class _Strategies:
    """Pulsar's SchemaCompatibilityStrategy names as argparse's choices. The broker's schema
    package (which brings the broker's configuration) is imported only when a strategy is
    checked or listed, not by every admin verb."""

    def __iter__(self) -> Iterator[str]:
        from pulsar_grpc.broker.schema import CompatibilityStrategy

        return iter([strategy.value for strategy in CompatibilityStrategy])

    def __contains__(self, name: object) -> bool:
        return name in list(self)


def add_namespace_verbs(verbs: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    for name in _POLICY:
        verbs.add_parser(f"get-{name}", help=f"the namespace's {name}").add_argument(
            "namespace", help=NAMESPACE_HELP
        )
    strategy = verbs.add_parser(
        "set-schema-compatibility-strategy", help="the namespace's compatibility strategy"
    )
    strategy.add_argument("namespace", help=NAMESPACE_HELP)
    strategy.add_argument(
        "-c",
        "--compatibility",
        required=True,
        choices=_Strategies(),
        metavar="STRATEGY",  # argparse lists the choices in the usage line: only in -h's
        help="%(choices)s; UNDEFINED applies the broker's schemaCompatibilityStrategy",
    )
    for name in ("is-allow-auto-update-schema", "schema-validation-enforce"):
        p = verbs.add_parser(f"set-{name}", help=f"turn the namespace's {name} on or off")
        p.add_argument("namespace", help=NAMESPACE_HELP)
        switch = p.add_mutually_exclusive_group(required=True)
        switch.add_argument("-e", "--enable", action="store_true", help="turn it on")
        switch.add_argument("-d", "--disable", action="store_true", help="turn it off")


def handles(args: argparse.Namespace) -> bool:
    if args.group == "schemas":
        return True
    return args.group == "namespaces" and args.verb in NAMESPACE_VERBS


def run(args: argparse.Namespace, base: str) -> int:
    if args.group == "schemas":
        topic = TopicName.get(args.topic)
        url = f"{base}/admin/v2/schemas/{topic.namespace}/{topic.encoded_local_name}"
        _schemas(args, str(topic), url)
    else:
        ns = NamespaceName.get(args.namespace)
        _namespace(args, str(ns), f"{base}/admin/v2/namespaces/{ns}")
    return 0


def _payload(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
        json.loads(raw)
    except OSError as exc:
        raise AdminRequestError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError:
        raise AdminRequestError(f"{path} is not JSON (a PostSchemaPayload)") from None
    return raw


def _schemas(args: argparse.Namespace, topic: str, url: str) -> None:
    if args.verb == "get":
        suffix = "" if args.version is None else f"/{args.version}"
        print(json.dumps(request("GET", f"{url}/schema{suffix}"), indent=2))
    elif args.verb == "upload":
        answer = request("POST", f"{url}/schema", _payload(args.filename))
        print(f"uploaded the schema of {topic}{_version_of(answer)}")
    elif args.verb == "delete":
        request("DELETE", f"{url}/schema?force={str(args.force).lower()}")
        print(f"deleted the schema of {topic}")
    else:
        print(json.dumps(request("POST", f"{url}/compatibility", _payload(args.filename))))


def _version_of(answer: object) -> str:
    """``: version N`` from a PostSchemaResponse (``{"version": {"version": N}}``), so the
    confirmation says which version the upload made (or found: an equal schema is not added)."""
    version = answer.get("version") if isinstance(answer, dict) else None
    number = version.get("version") if isinstance(version, dict) else None
    return f": version {number}" if number is not None else ""


def _namespace(args: argparse.Namespace, ns: str, url: str) -> None:
    action, _, name = args.verb.partition("-")
    path, method = _POLICY[name]
    if action == "get":
        print(json.dumps(request("GET", f"{url}/{path}")))
    elif name == "schema-compatibility-strategy":
        request(method, f"{url}/{path}", json.dumps(args.compatibility).encode())
        print(f"set the {name} of {ns} to {args.compatibility}")
    else:
        request(method, f"{url}/{path}", json.dumps(bool(args.enable)).encode())
        print(f"{switched(args)} {name} on {ns}")
