"""`pulsar-grpc tokens`: Pulsar's ``pulsar tokens`` tool, with its verbs and flag names.

Keys and tokens are interchangeable with Pulsar's: secret keys are raw bytes (``--base64`` for
text), key pairs are DER (PKCS#8 private, X.509 public), and a token made here for a key is the
same string Pulsar makes for it. Key arguments take Pulsar's key values (``file:///path``,
``data:;base64,...``, a path, or base64). Bad usage exits 2, a refused token or key 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import time
from enum import Enum
from pathlib import Path

from pulsar_grpc.broker.errors import AuthenticationError
from pulsar_grpc.broker.security.tokens import (
    ALGORITHMS,
    ASYMMETRIC_ALGORITHMS,
    HMAC_ALGORITHMS,
    KEY_VALUE_HELP,
    KeyValueError,
    SigningKey,
    TokenAuthenticator,
    create_key_pair,
    create_secret_key,
    create_token,
    decode_private_key,
    decode_public_key,
    decode_secret_key,
    hmac_algorithms,
    parse_relative_time,
    read_key,
    same_family,
    split_unverified,
)


class KeyKind(Enum):
    """Which of the two key options a command was given."""

    SECRET = "secret"
    ASYMMETRIC = "asymmetric"


class UsageError(Exception):
    """The command line asks for something impossible: exit 2."""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("tokens")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    secret = verbs.add_parser("create-secret-key", help="create a new secret key")
    secret.add_argument(
        "-a", "--signature-algorithm", choices=HMAC_ALGORITHMS, default="HS256",
        help="the HMAC algorithm the key is for (default HS256)",
    )  # fmt: skip
    secret.add_argument("-o", "--output", help="write the key to this file instead of stdout")
    secret.add_argument("-b", "--base64", action="store_true", help="encode the key in base64")

    pair = verbs.add_parser("create-key-pair", help="create a new private/public key pair (DER)")
    pair.add_argument(
        "-a", "--signature-algorithm", choices=ASYMMETRIC_ALGORITHMS, default="RS256",
        help="the key pair's algorithm (default RS256)",
    )  # fmt: skip
    pair.add_argument(
        "--output-private-key", required=True, metavar="FILE",
        help="where to write the private key (it signs tokens: keep it secret)",
    )  # fmt: skip
    pair.add_argument(
        "--output-public-key", required=True, metavar="FILE",
        help="where to write the public key (the brokers' tokenPublicKey)",
    )  # fmt: skip

    create = verbs.add_parser("create", help="create a new token")
    create.add_argument(
        "-a",
        "--signature-algorithm",
        choices=tuple(ALGORITHMS),
        default="RS256",
        help="the private key's algorithm (as in Pulsar, the key decides the token's; "
        "ignored with --secret-key)",
    )
    create.add_argument("-s", "--subject", required=True, help="the role the token carries")
    create.add_argument(
        "-e", "--expiry-time", help="relative expiry (e.g. 30m, 1h, 3d, 10y); default: none"
    )
    _add_key_options(create, "-pk", "--private-key", "private")
    create.add_argument(
        "-hs",
        "--headers",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an additional header (repeatable)",
    )

    show = verbs.add_parser("show", help="print a token's header and payload (unverified)")
    _add_token_options(show)

    validate = verbs.add_parser("validate", help="check a token's signature and expiry")
    validate.add_argument(
        "-a",
        "--signature-algorithm",
        choices=tuple(ALGORITHMS),
        default="RS256",
        help="the public key's algorithm (ignored with --secret-key)",
    )
    _add_key_options(validate, "-pk", "--public-key", "public")
    _add_token_options(validate)
    p.set_defaults(run=run)


def _add_key_options(parser: argparse.ArgumentParser, short: str, long: str, kind: str) -> None:
    parser.add_argument("-sk", "--secret-key", help=f"the secret key: {KEY_VALUE_HELP}")
    parser.add_argument(
        short, long, dest="asymmetric_key", help=f"the {kind} key: {KEY_VALUE_HELP}"
    )


def _add_token_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", nargs="?", help="the token (else -i, -f or $TOKEN)")
    parser.add_argument("-i", "--stdin", action="store_true", help="read the token from stdin")
    parser.add_argument("-f", "--token-file", help="read the token from a file")


def run(args: argparse.Namespace) -> int:
    command = f"pulsar-grpc tokens {args.verb}"
    try:
        return _VERBS[args.verb](args)
    except UsageError as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 2
    except (KeyValueError, AuthenticationError, ValueError, OSError) as e:
        print(f"{command}: {e}", file=sys.stderr)
        return 1


def _create_secret_key(args: argparse.Namespace) -> int:
    key = create_secret_key(args.signature_algorithm)
    encoded = base64.b64encode(key) if args.base64 else key
    if args.output:
        Path(args.output).write_bytes(encoded)
    else:
        sys.stdout.buffer.write(encoded)
        sys.stdout.flush()
    return 0


def _create_key_pair(args: argparse.Namespace) -> int:
    private, public = create_key_pair(args.signature_algorithm)
    Path(args.output_public_key).write_bytes(public)
    Path(args.output_private_key).write_bytes(private)
    return 0


def _create(args: argparse.Namespace) -> int:
    key: SigningKey
    if _given_key(args, "--private-key") is KeyKind.SECRET:
        key = decode_secret_key(read_key(args.secret_key))
    else:
        key = decode_private_key(read_key(args.asymmetric_key), args.signature_algorithm)
    expires_at = None
    if args.expiry_time is not None:
        try:
            expires_at = int(time.time()) + parse_relative_time(args.expiry_time)
        except ValueError as e:
            raise UsageError(f"--expiry-time: {e}") from None
    print(create_token(key, args.subject, expires_at, _headers(args.headers)))
    return 0


def _headers(pairs: list[str]) -> dict[str, str]:
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise UsageError(f"--headers {pair!r}: expected KEY=VALUE")
        if name == "alg":
            raise UsageError("--headers cannot set 'alg': the key decides the algorithm")
        headers[name] = value
    return headers


def _show(args: argparse.Namespace) -> int:
    header, payload = split_unverified(_token(args))
    print(json.dumps(header, separators=(",", ":"), ensure_ascii=False))
    print("---")
    print(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))
    return 0


def _validate(args: argparse.Namespace) -> int:
    if _given_key(args, "--public-key") is KeyKind.SECRET:
        secret = decode_secret_key(read_key(args.secret_key))
        authenticator = TokenAuthenticator(secret, hmac_algorithms(secret))
    else:
        authenticator = TokenAuthenticator(
            decode_public_key(read_key(args.asymmetric_key), args.signature_algorithm),
            same_family(args.signature_algorithm),
        )
    token = _token(args)
    authenticator.role_of(token)
    print(json.dumps(split_unverified(token)[1], separators=(",", ":"), ensure_ascii=False))
    return 0


def _given_key(args: argparse.Namespace, other: str) -> KeyKind:
    """Which key was given: exactly one of --secret-key and ``other`` must be."""
    if (args.secret_key is None) == (args.asymmetric_key is None):
        raise UsageError(f"give exactly one of --secret-key and {other}")
    return KeyKind.SECRET if args.secret_key is not None else KeyKind.ASYMMETRIC


def _token(args: argparse.Namespace) -> str:
    """The token from the argument, stdin (-i), a file (-f) or $TOKEN, as Pulsar looks."""
    if args.token is not None:
        token = args.token
    elif args.stdin:
        token = sys.stdin.readline()
    elif args.token_file is not None:
        token = Path(args.token_file).read_text(encoding="utf-8")
    elif os.environ.get("TOKEN"):
        token = os.environ["TOKEN"]
    else:
        raise UsageError("give the token as an argument, with --stdin, --token-file or $TOKEN")
    return str(token).strip()


_VERBS = {
    "create-secret-key": _create_secret_key,
    "create-key-pair": _create_key_pair,
    "create": _create,
    "show": _show,
    "validate": _validate,
}
