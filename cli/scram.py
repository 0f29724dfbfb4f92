"""`pulsar-grpc scram`: the users of the scram authentication provider and the cluster's
role-token signing keys.

    scram add-user --credentials-file FILE USER [--password P]   (else read from stdin)
    scram role-token-keys [--admin-url URL]                      (ids and times, current last)
    scram rotate-key [--revoke-previous] [--admin-url URL]

add-user writes (or replaces) ``USER:SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>``
in FILE, the broker's scramAuthConf; the password itself is never stored. A broker reads the file
when it starts. The key verbs use the admin REST API (with --auth-plugin / --auth-params).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
from pathlib import Path

from pulsar_grpc.broker.security.scram import DEFAULT_ITERATIONS, verifier
from pulsar_grpc.cli.client_conf import UrlFlag, add_connection_args
from pulsar_grpc.cli.rest import reporting_errors, request

KEYS_PATH = "/admin/v2/role-token-keys"


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("scram")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    add = verbs.add_parser("add-user", help="add or replace a user in a SCRAM credentials file")
    add.add_argument("user", help="the user name (the userId of --auth-params)")
    add.add_argument(
        "--credentials-file", required=True, metavar="FILE", help="the broker's scramAuthConf"
    )
    add.add_argument("--password", help="the password (default: read from stdin)")
    add.add_argument(
        "--iterations", type=int, default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations of the stored key (default and least {DEFAULT_ITERATIONS})",
    )  # fmt: skip

    for verb, help in (
        ("role-token-keys", "list the cluster's role-token signing keys"),
        ("rotate-key", "make a new current role-token signing key for the cluster"),
    ):
        keys = verbs.add_parser(verb, help=help)
        add_connection_args(keys, [UrlFlag.ADMIN])
    verbs.choices["rotate-key"].add_argument(
        "--revoke-previous",
        action="store_true",
        help="stop accepting the tokens of every previous key at once (a leaked key)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.verb == "add-user":
        return _add_user(args)
    base = args.admin_url.rstrip("/")

    def keys() -> int:
        if args.verb == "rotate-key":
            revoke = str(args.revoke_previous).lower()
            answer = request("POST", f"{base}{KEYS_PATH}/rotate?revokePrevious={revoke}")
        else:
            answer = request("GET", base + KEYS_PATH)
        print(json.dumps(answer, indent=2))
        return 0

    return reporting_errors(f"scram {args.verb}", keys, args)


def _add_user(args: argparse.Namespace) -> int:
    command = "pulsar-grpc scram add-user"
    if not args.user or ":" in args.user or args.user != args.user.strip():
        print(f"{command}: a user name is not empty and has no ':' or edge spaces", file=sys.stderr)
        return 2
    if args.iterations < DEFAULT_ITERATIONS:
        print(f"{command}: --iterations: at least {DEFAULT_ITERATIONS}", file=sys.stderr)
        return 2
    password = args.password if args.password is not None else _read_password()
    if not password:
        print(f"{command}: an empty password", file=sys.stderr)
        return 2
    path = Path(args.credentials_file)
    try:
        lines = path.read_text().splitlines() if path.exists() else []
        kept = [line for line in lines if line.partition(":")[0].strip() != args.user]
        kept.append(f"{args.user}:{verifier(password, args.iterations)}")
        # Created readable by its owner only: the keys let a thief impersonate the broker.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write("\n".join(kept) + "\n")
    except OSError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return 1
    print(f"{'replaced' if len(kept) == len(lines) else 'added'} {args.user} in {path}")
    return 0


def _read_password() -> str:
    if sys.stdin.isatty():
        return getpass.getpass("password: ")
    return sys.stdin.readline().rstrip("\r\n")
