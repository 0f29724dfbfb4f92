"""One table from broker errors to gRPC status codes, and the way a call ends with one.

A call that fails ends with a gRPC status and the error's message, and two trailers:

- ``pulsar-error-code``: Pulsar's ServerError number, so clients can tell a ProducerBusy from a
  ConsumerBusy even though both are FAILED_PRECONDITION;
- ``grpc-status-details-bin``: the same error as a standard ``google.rpc.Status`` holding one
  ``google.rpc.ErrorInfo`` (reason: the ServerError name, domain: :data:`ERROR_DOMAIN`,
  metadata: the call's topic when it has one), which generic gRPC tooling (grpcurl,
  ``grpc_status.rpc_status.from_call``, Go's ``status.FromError``) decodes without our .proto.

A call refused because another broker owns the topic (a cluster's bundle ownership) ends with
UNAVAILABLE + ServiceNotReady, like an unload, plus ``pulsar-owner-url`` and
``pulsar-owner-url-tls``: the owner's gRPC addresses for the call's listener (only those it
advertises), so a client can go there after a fresh lookup (docs/protocol.md).

A request refused inside a Consume stream (an Ack, Seek or Unsubscribe) is answered with a
``RequestError`` message instead and the call goes on: that error exists only in the message.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NoReturn

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc import aio

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.cluster.ownership import NotOwnerError
from pulsar_grpc.handler.advertised import grpc_urls
from pulsar_grpc.interceptors.context import current_or_none

if TYPE_CHECKING:
    from pulsar_grpc.broker.protocol import BrokerContext

log = logging.getLogger(__name__)

ERROR_CODE_KEY = "pulsar-error-code"
STATUS_DETAILS_KEY = "grpc-status-details-bin"
OWNER_URL_KEY = "pulsar-owner-url"
OWNER_URL_TLS_KEY = "pulsar-owner-url-tls"
# The ErrorInfo reasons are the names of Pulsar's ServerError enum, so they belong to Pulsar's
# domain: a client that knows Pulsar's error names knows ours.
ERROR_DOMAIN = "pulsar.apache.org"
# The message travels twice (grpc-message and the Status) and the topic once, all in trailers,
# which clients refuse past 8 KiB by default: an error echoing a huge name is cut short.
MAX_MESSAGE_CHARS = 1024
MAX_TOPIC_CHARS = 256

_STATUS: list[tuple[type[e.BrokerError], grpc.StatusCode]] = [
    (e.InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (e.NotFoundError, grpc.StatusCode.NOT_FOUND),
    (e.PreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (e.TooLargeError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (e.AuthenticationError, grpc.StatusCode.UNAUTHENTICATED),
    (e.AuthorizationError, grpc.StatusCode.PERMISSION_DENIED),
    (e.ServiceNotReadyError, grpc.StatusCode.UNAVAILABLE),
]


def status_for(error: e.BrokerError) -> grpc.StatusCode:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return grpc.StatusCode.INTERNAL


def as_broker_error(exc: BaseException) -> e.BrokerError:
    if isinstance(exc, e.BrokerError):
        return exc
    log.exception("unexpected error serving a call", exc_info=exc)
    return e.BrokerError(f"internal error: {type(exc).__name__}: {exc}")


def rich_status(
    error: e.BrokerError, status: grpc.StatusCode, message: str, topic: str | None
) -> status_pb2.Status:
    """The error as ``google.rpc.Status``: code and message equal the call's own status (as
    ``rpc_status.from_call`` checks), with one ErrorInfo naming Pulsar's error."""
    info = error_details_pb2.ErrorInfo(
        reason=error.code.name,
        domain=ERROR_DOMAIN,
        metadata={"topic": topic[:MAX_TOPIC_CHARS]} if topic else {},
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=status.value[0], message=message, details=[detail])


def owner_trailers(broker: BrokerContext, exc: BaseException) -> list[tuple[str, str]]:
    """The owner's gRPC addresses for the call's listener when ``exc`` says another broker
    owns the topic; nothing otherwise."""
    if not isinstance(exc, NotOwnerError):
        return []
    ctx = current_or_none()
    try:
        owner = broker.owner_lookup(
            exc.owner,
            ctx.listener_name if ctx else None,
            ctx.bind_listener if ctx else None,
        )
    except e.BrokerError:  # the owner advertises no such listener: a lookup will say so
        return []
    grpc_url, grpc_url_tls = grpc_urls(owner)
    return [
        (k, url) for k, url in ((OWNER_URL_KEY, grpc_url), (OWNER_URL_TLS_KEY, grpc_url_tls)) if url
    ]


async def abort(
    context: aio.ServicerContext,
    exc: BaseException,
    topic: str | None = None,
    trailers: list[tuple[str, str]] | None = None,
) -> NoReturn:
    """End the call with ``exc`` as its status and trailers (any exception: one the broker did
    not expect becomes INTERNAL and is logged). ``topic``: the one a unary request named; a
    stream's comes from its call context. ``trailers``: more to send (see owner_trailers)."""
    error = as_broker_error(exc)
    if isinstance(error, e.AuthenticationChallenge):  # a two-way exchange goes on: PIP-59
        trailers = [*(trailers or ()), *error.metadata]
    status = status_for(error)
    message = _clip(error.message, MAX_MESSAGE_CHARS)
    if not topic and (ctx := current_or_none()) is not None and ctx.topic is not None:
        topic = str(ctx.topic)
    await context.abort(
        status,
        message,
        trailing_metadata=(
            (ERROR_CODE_KEY, str(int(error.code))),
            (STATUS_DETAILS_KEY, rich_status(error, status, message, topic).SerializeToString()),
            *(trailers or ()),
        ),
    )
    raise AssertionError("unreachable: abort raises")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
