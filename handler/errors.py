"""One table from broker errors to gRPC status codes, and the way a call ends with one.

Every error carries Pulsar's ServerError number in the trailing metadata key
``pulsar-error-code`` so clients can tell a ProducerBusy from a ConsumerBusy even though both
are FAILED_PRECONDITION.
"""

from __future__ import annotations

import logging
from typing import NoReturn

import grpc
from grpc import aio

from pulsar_grpc.broker import errors as e

log = logging.getLogger(__name__)

ERROR_CODE_KEY = "pulsar-error-code"

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


async def abort(context: aio.ServicerContext, exc: BaseException) -> NoReturn:
    error = as_broker_error(exc)
    await context.abort(
        status_for(error),
        error.message,
        trailing_metadata=((ERROR_CODE_KEY, str(int(error.code))),),
    )
    raise AssertionError("unreachable: abort raises")
