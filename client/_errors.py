"""Client exceptions and the one function that maps a failed gRPC call to them.

The broker ends a failed call with a gRPC status and Pulsar's ServerError code in the trailing
metadata key ``pulsar-error-code``; the code is the more specific of the two, so it wins.

Example::

    try:
        producer = await client.create_producer("my-topic", producer_name="p1")
    except ProducerBusy as e:
        print(e.code, e.status)  # 16 StatusCode.FAILED_PRECONDITION
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

import grpc

ERROR_CODE_KEY = "pulsar-error-code"

# Pulsar's ServerError numbers (pulsar.proto, enum ServerError) used below.
_UNKNOWN_ERROR = 0
_AUTHENTICATION_ERROR = 3
_AUTHORIZATION_ERROR = 4
_CONSUMER_BUSY = 5
_METADATA_ERROR = 1
_PERSISTENCE_ERROR = 2
_SERVICE_NOT_READY = 6
_TOO_MANY_REQUESTS = 14
_TOPIC_NOT_FOUND = 11
_PRODUCER_BUSY = 16
_INVALID_TOPIC_NAME = 17
_NOT_ALLOWED = 22


class PulsarError(Exception):
    """Base of every client error.

    ``code`` is Pulsar's ServerError number (0 = UnknownError when the broker sent none) and
    ``status`` the gRPC status code (None for errors raised by the client itself).
    """

    def __init__(
        self,
        message: str,
        code: int = _UNKNOWN_ERROR,
        status: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


class ProducerBusy(PulsarError):
    """Another producer with the same name is connected to the topic."""


class ConsumerBusy(PulsarError):
    """The subscription is Exclusive and already has a consumer."""


class TopicNotFound(PulsarError):
    """The topic does not exist and auto-creation is off."""


class InvalidTopicName(PulsarError):
    """The topic name is malformed."""


class NotAllowed(PulsarError):
    """The broker refused the operation."""


class MessageTooBig(PulsarError):
    """A message or batch exceeds the broker's maximum message size."""


class Timeout(PulsarError):
    """An operation did not complete in time (send timeout, receive timeout, deadline)."""


class AlreadyClosed(PulsarError):
    """The client, producer, consumer or reader is closed."""


class ConnectError(PulsarError):
    """The broker could not be reached or the stream broke."""


class LookupFailed(PulsarError):
    """A topic lookup gave no usable answer: no gRPC address for the listener, or more
    redirects than the client follows."""


class InvalidConfiguration(PulsarError):
    """The application asked for something its settings rule out (e.g. a cumulative ack on a
    Shared subscription); nothing was sent to the broker."""


class AuthenticationError(PulsarError):
    """The broker did not accept the client's credentials."""


class AuthorizationError(PulsarError):
    """The client's role may not perform the operation."""


_BY_CODE: dict[int, type[PulsarError]] = {
    _PRODUCER_BUSY: ProducerBusy,
    _CONSUMER_BUSY: ConsumerBusy,
    _TOPIC_NOT_FOUND: TopicNotFound,
    _INVALID_TOPIC_NAME: InvalidTopicName,
    _NOT_ALLOWED: NotAllowed,
    _AUTHENTICATION_ERROR: AuthenticationError,
    _AUTHORIZATION_ERROR: AuthorizationError,
}

_BY_STATUS: dict[grpc.StatusCode, type[PulsarError]] = {
    grpc.StatusCode.UNAVAILABLE: ConnectError,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.RESOURCE_EXHAUSTED: MessageTooBig,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthorizationError,
}


def error_from_code(code: int, message: str) -> PulsarError:
    """The error for a request the broker refused while the stream stays open."""
    return _BY_CODE.get(code, PulsarError)(message, code)


class RpcErrorLike(Protocol):
    """What :func:`error_from_rpc` needs of a ``grpc.aio.AioRpcError``."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> str | None: ...

    def trailing_metadata(self) -> Any: ...


def _server_error_code(metadata: Iterable[tuple[str, str | bytes]] | None) -> int | None:
    for key, value in metadata or ():
        if key.lower() == ERROR_CODE_KEY:
            text = value.decode() if isinstance(value, bytes) else value
            try:
                return int(text)
            except ValueError:
                return None
    return None


def error_from_rpc(err: RpcErrorLike) -> PulsarError:
    """Map a failed call to the most specific :class:`PulsarError`.

    A ServerError code that names a specific error decides, except that RESOURCE_EXHAUSTED
    always means too big (the broker reports an oversized batch as NotAllowed with that status).
    Otherwise the gRPC status decides; INVALID_ARGUMENT and NOT_FOUND stay generic because the
    broker also uses them for errors other than a bad topic name or a missing topic.

    >>> error_from_rpc(grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, "down"))
    ConnectError('down')
    """
    status = err.code()
    message = err.details() or status.name
    code = _server_error_code(err.trailing_metadata())
    cls: type[PulsarError]
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        cls = MessageTooBig
    elif code is not None and code in _BY_CODE:
        cls = _BY_CODE[code]
    else:
        cls = _BY_STATUS.get(status, PulsarError)
    return cls(message, code if code is not None else _UNKNOWN_ERROR, status)


# Broker faults that pass: the broker restarts, loads the topic elsewhere, or catches up.
_RETRYABLE_CODES = {_SERVICE_NOT_READY, _TOO_MANY_REQUESTS, _METADATA_ERROR, _PERSISTENCE_ERROR}
# Statuses that say nothing about the request itself when no Pulsar code comes with them.
_RETRYABLE_STATUSES = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}


# gRPC's words for a TCP connect refused: nothing listens on the port (yet), as while a broker
# restarts. A refused TLS handshake or credentials read otherwise ("Tls handshake failed",
# "Socket closed", UNAUTHENTICATED), and fail at once.
_CONNECTION_REFUSED = "connection refused"


def is_retryable_at_creation(error: PulsarError) -> bool:
    """Whether creating a producer, consumer or reader retries after ``error`` (within the
    operation timeout), as Pulsar's client retries creation on retriable errors.

    Retried: the broker said so (ServiceNotReady while a topic is unloaded or the broker
    starts, TooManyRequests, a metadata or persistence fault) or nothing listened at the
    address (the broker is restarting). Anything else fails at once, in particular TLS and
    credential problems: unlike Pulsar's Java client, which retries them until the operation
    timeout, a misconfiguration should say so promptly.

    >>> is_retryable_at_creation(ConnectError("...: Connection refused", 0))
    True
    >>> is_retryable_at_creation(ConnectError("...: Tls handshake failed (TSI_PROTOCOL_FAILURE)"))
    False
    """
    if error.code in _RETRYABLE_CODES and type(error) in (PulsarError, ConnectError):
        return True
    return isinstance(error, ConnectError) and _CONNECTION_REFUSED in error.message.lower()


def is_retryable(error: PulsarError, reconnecting: bool = False) -> bool:
    """Whether a stream that ended with ``error`` (or an attempt to reopen it that failed with
    it) is worth another attempt, as Pulsar's ``isRetriableError``.

    Retryable: the broker unreachable or gone (ConnectError: UNAVAILABLE, ServiceNotReady, a
    dropped connection), timeouts, and broker-side faults (metadata, persistence). Not
    retryable: what the same request would get again (topic not found, bad name, not allowed,
    too big, auth). While *reconnecting*, ProducerBusy, ConsumerBusy and a lookup without a
    usable answer are retried as well: the broker may not have noticed yet that the old stream
    is gone, or the topic is moving (Pulsar's producer and consumer retry them once created).

    >>> is_retryable(ConnectError("gone")), is_retryable(TopicNotFound("no", 11))
    (True, False)
    """
    if isinstance(error, (ConnectError, Timeout)):
        return True
    if isinstance(error, (ProducerBusy, ConsumerBusy, LookupFailed)):
        return reconnecting
    if type(error) is not PulsarError:
        return False  # a specific error: the same request gets it again
    if error.code in _RETRYABLE_CODES:
        return True
    return error.code == _UNKNOWN_ERROR and error.status in _RETRYABLE_STATUSES
