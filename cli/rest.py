"""The admin commands' HTTP client: one request to the broker's admin REST API, following a
broker's 307 to the owner (urllib follows redirects for GET only), and the errors a command
reports (exit 1 with the broker's reason, or that the broker cannot be reached; exit 2 for a
bad namespace, topic or bundle name given on the command line)."""

from __future__ import annotations

import argparse
import http.client
import json
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.cli.auth import authentication_of

if TYPE_CHECKING:  # the SDK and grpc are imported only by a command given credentials
    from pulsar_grpc.client import Authentication
    from pulsar_grpc.client._auth import Exchange, ExchangeAnswer

__all__ = [
    "AdminRequestError",
    "no_http_answer",
    "print_lines",
    "reporting_errors",
    "request",
    "request_raw",
]

# Pulsar's brokers redirect a bundle or broker request to its owner: one hop, maybe two.
_MAX_REDIRECTS = 5


class AdminRequestError(Exception):
    """The broker refused the request, or could not be reached: the message says which."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None  # every redirect comes back as an HTTPError, followed by request()


@dataclass
class _Connection:
    """The command's credentials and https trust (its flags and client.conf): one command per
    process, set before any request."""

    authentication: Authentication | None = None
    opener: urllib.request.OpenerDirector = field(
        default_factory=lambda: urllib.request.build_opener(_NoRedirect)
    )


_connection = _Connection()


def request(method: str, url: str, body: bytes | None = None) -> object:
    """The response's JSON (a text body as a string; None when empty); AdminRequestError
    with the status and the broker's reason otherwise."""
    _, data = request_raw(method, url, body)
    raw = data.decode(errors="replace")
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def request_raw(method: str, url: str, body: bytes | None = None) -> tuple[dict[str, str], bytes]:
    """The response's headers and body as sent (a peeked message's payload and its
    X-Pulsar-* headers); AdminRequestError as :func:`request`."""
    for _ in range(_MAX_REDIRECTS):
        req = urllib.request.Request(url, data=body, method=method)
        if body is not None:
            req.add_header("Content-Type", "application/json")
        authentication = _connection.authentication
        if authentication is not None:  # a two-way method (SCRAM) runs its exchange first
            import asyncio  # the SDK's authentication is async; a command without it skips both

            asyncio.run(authentication.prepare(_http_exchange(url)))
        authorization = authentication.authorization() if authentication is not None else None
        if authorization:
            req.add_header("Authorization", authorization)
        try:
            with _connection.opener.open(req, timeout=30) as resp:
                return dict(resp.headers.items()), resp.read()
        except urllib.error.HTTPError as exc:
            location = exc.headers.get("Location")
            if exc.code in (307, 308) and location:
                url = location
                continue
            raise AdminRequestError(f"{exc.code} {_reason(exc)}") from None
        except urllib.error.URLError as exc:
            raise AdminRequestError(f"cannot reach {url}: {exc.reason}") from None
        except (OSError, http.client.HTTPException) as exc:  # a read timeout, a cut answer
            raise AdminRequestError(no_http_answer(url, exc)) from None
    raise AdminRequestError(f"too many redirects, the last to {url}")


def _http_exchange(url: str) -> Exchange:
    """A step of a two-way authentication as a GET of ``url``: the broker refuses it (401)
    with the next message in its headers, before doing anything for it."""
    import asyncio

    import grpc

    from pulsar_grpc.client._auth import ExchangeAnswer

    def get(authorization: str) -> ExchangeAnswer:
        req = urllib.request.Request(url, headers={"Authorization": authorization})
        try:
            with _connection.opener.open(req, timeout=30):
                return ExchangeAnswer(grpc.StatusCode.OK, "", {})
        except urllib.error.HTTPError as exc:
            if exc.code != 401:
                raise AdminRequestError(f"{exc.code} {_reason(exc)}") from None
            headers = {k.lower(): v for k, v in exc.headers.items()}
            return ExchangeAnswer(grpc.StatusCode.UNAUTHENTICATED, _reason(exc), headers)
        except (OSError, http.client.HTTPException) as exc:
            raise AdminRequestError(no_http_answer(url, exc)) from None

    async def exchange(authorization: str) -> ExchangeAnswer:
        return await asyncio.to_thread(get, authorization)

    return exchange


def no_http_answer(url: str, exc: Exception) -> str:
    """Why ``url`` gave no HTTP answer, naming the likely mistake: a gRPC port (its HTTP/2
    frames start with a zero length prefix, which http.client reads as a bad status line) or
    another server that does not speak HTTP."""
    where = url.split("/admin/", 1)[0].split("/lookup/", 1)[0]
    if isinstance(exc, http.client.RemoteDisconnected):
        return f"{where} closed the connection without an answer: is it the broker's web service?"
    if isinstance(exc, http.client.BadStatusLine):
        line = str(exc.args[0] if exc.args else "")
        if line.startswith("\x00") or "PRI * HTTP/2" in line:
            return (
                f"{where} answered in HTTP/2 (gRPC?), not HTTP/1.1: --admin-url takes the "
                "broker's web service URL (webServicePort, default 8080), not its gRPC port"
            )
        return f"{where} does not answer in HTTP: is --admin-url the broker's web service URL?"
    if isinstance(exc, TimeoutError):
        return f"no answer from {where} within 30 s"
    return f"no HTTP answer from {where}: {exc}"


def print_lines(answer: object) -> None:
    """Print a JSON list answer one item a line (a topic or broker listing); anything else is
    not what the broker should have answered: AdminRequestError, not a traceback."""
    if not isinstance(answer, list):
        raise AdminRequestError(f"expected a JSON list, the broker answered {answer!r:.200}")
    for item in answer:
        print(item)


def _reason(exc: urllib.error.HTTPError) -> str:
    text = exc.read().decode(errors="replace")
    try:
        return str(json.loads(text)["reason"])
    except (ValueError, KeyError, TypeError):
        return text


def reporting_errors(command: str, run: Callable[[], int], args: argparse.Namespace) -> int:
    """Run a command's requests with the credentials its flags name: a refusal or an
    unreachable broker is one line on stderr (``pulsar-grpc <command>: ...``) and exit code 1;
    a bad name on the command line (a namespace, topic or bundle the naming rules refuse) or
    bad --auth-params or trust file one line and exit code 2, as argparse's usage errors."""
    try:
        _connection.authentication = authentication_of(args)
        https = _https_handlers(args)
    except (ValueError, OSError) as exc:
        print(f"pulsar-grpc {command}: {exc}", file=sys.stderr)
        return 2
    _connection.opener = urllib.request.build_opener(_NoRedirect, *https)
    try:
        return run()
    except AdminRequestError as exc:
        print(f"pulsar-grpc {command}: {exc}", file=sys.stderr)
        return 1
    except InvalidArgumentError as exc:
        print(f"pulsar-grpc {command}: {exc.message}", file=sys.stderr)
        return 2


def _https_handlers(args: argparse.Namespace) -> list[urllib.request.BaseHandler]:
    """The https handler with the command's own trust, where it has some to apply: an https
    admin URL, a trust flag or credentials. Otherwise urllib's default one, whose context (the
    system's certificates: a tenth of a second) is built only if an https URL is opened."""
    admin_url = getattr(args, "admin_url", None) or ""
    trust = getattr(args, "tls_trust_cert_path", None) or getattr(args, "tls_allow_insecure", None)
    if not (admin_url.startswith("https://") or trust or _connection.authentication):
        return []
    return [urllib.request.HTTPSHandler(context=_https_context(args))]


def _https_context(args: argparse.Namespace) -> ssl.SSLContext:
    """Trust for https admin URLs: --tls-trust-cert-path (else the system's), none at all with
    --tls-allow-insecure; a tls plugin's client certificate is presented."""
    trust = getattr(args, "tls_trust_cert_path", None)
    context = ssl.create_default_context(cafile=trust)
    if getattr(args, "tls_allow_insecure", False):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if _connection.authentication is None:
        return context
    from pulsar_grpc.client import AuthenticationTLS

    if isinstance(_connection.authentication, AuthenticationTLS):
        tls = _connection.authentication
        context.load_cert_chain(tls.certificate_path, tls.private_key_path)
    return context
