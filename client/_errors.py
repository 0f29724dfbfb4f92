"""Client exceptions, pulsar-client's ``Result`` codes, and the one function that maps a
failed gRPC call to them.

The tree is pulsar-client's (``pulsar.exceptions``), so ``except`` clauses port unchanged::

    PulsarException                  base of every client error (``result()``: its Result)
    ├── UnknownError                 the broker gave no more specific reason
    ├── ConnectError                 broker unreachable, or the stream broke
    ├── Timeout                      send timeout, receive timeout, deadline
    ├── LookupError                  a lookup gave no usable answer (alias LookupFailed)
    ├── ProducerQueueIsFull          max_pending_messages reached, block_if_queue_full=False
    ├── MessageTooBig, ProducerBusy, ConsumerBusy, TopicNotFound, InvalidTopicName,
    │   NotAllowedError, TopicTerminated, IncompatibleSchema, AuthenticationError, ...
    └── ...                          every other name of pulsar-client, one class each

The broker ends a failed call with a gRPC status and Pulsar's ServerError code in the trailing
metadata key ``pulsar-error-code``; the code is the more specific of the two, so it wins, and
each ServerError maps to the exception Pulsar's C++ client (under pulsar-client) raises for it.

Example::

    try:
        producer = await client.create_producer("my-topic", producer_name="p1")
    except ProducerBusy as e:
        print(e.code, e.status, e.result())  # 16 StatusCode.FAILED_PRECONDITION Result.ProducerBusy
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb

from ._headers import Trailer

if TYPE_CHECKING:
    from ._message_id import MessageId

# A call refused because another broker owns the topic names the owner's gRPC addresses
# (docs/protocol.md): the client looks the topic up again at once instead of backing off.
_OWNER_URL_KEYS = (Trailer.OWNER_URL, Trailer.OWNER_URL_TLS)


class Result(IntEnum):
    """pulsar-client's result codes (the C++ client's ``pulsar::Result``, same numbers): what a
    ``send_async`` callback gets first, ``Result.Ok`` or the failure's."""

    Ok = 0
    UnknownError = 1
    InvalidConfiguration = 2
    Timeout = 3
    LookupError = 4
    ConnectError = 5
    ReadError = 6
    AuthenticationError = 7
    AuthorizationError = 8
    ErrorGettingAuthenticationData = 9
    BrokerMetadataError = 10
    BrokerPersistenceError = 11
    ChecksumError = 12
    ConsumerBusy = 13
    NotConnected = 14
    AlreadyClosed = 15
    InvalidMessage = 16
    ConsumerNotInitialized = 17
    ProducerNotInitialized = 18
    ProducerBusy = 19
    TooManyLookupRequestException = 20
    InvalidTopicName = 21
    InvalidUrl = 22
    ServiceUnitNotReady = 23
    OperationNotSupported = 24
    ProducerBlockedQuotaExceededError = 25
    ProducerBlockedQuotaExceededException = 26
    ProducerQueueIsFull = 27
    MessageTooBig = 28
    TopicNotFound = 29
    SubscriptionNotFound = 30
    ConsumerNotFound = 31
    UnsupportedVersionError = 32
    TopicTerminated = 33
    CryptoError = 34
    IncompatibleSchema = 35
    ConsumerAssignError = 36
    CumulativeAcknowledgementNotAllowedError = 37
    TransactionCoordinatorNotFoundError = 38
    InvalidTxnStatusError = 39
    NotAllowedError = 40
    TransactionConflict = 41
    TransactionNotFound = 42
    ProducerFenced = 43
    MemoryBufferIsFull = 44
    Interrupted = 45


class PulsarException(Exception):
    """Base of every client error, as in pulsar-client.

    ``code`` is Pulsar's ServerError number (0 = UnknownError when the broker sent none),
    ``status`` the gRPC status code (None for errors raised by the client itself),
    ``owner_url`` the topic owner's address when a broker that does not own the topic refused
    the call, and :meth:`error` the pulsar-client :class:`Result` of the class.
    """

    owner_url: str | None = None

    result_code: ClassVar[Result] = Result.UnknownError

    def __init__(
        self,
        message: str,
        code: int = pb.UnknownError,
        status: grpc.StatusCode | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status

    def error(self) -> Result:
        """The :class:`Result` of this error: pulsar-client's ``PulsarException.error()``,
        and what a ``send_async`` callback gets for it.

        >>> ProducerQueueIsFull("full").error()
        <Result.ProducerQueueIsFull: 27>
        """
        return self.result_code

    def result(self) -> Result:
        """The name earlier versions of this SDK gave :meth:`error`."""
        return self.result_code


# One class per pulsar-client name, so that ported ``except`` clauses resolve; spelled out
# rather than made in a loop so that type checkers and IDEs see them.
class UnknownError(PulsarException):
    """The broker refused with UnknownError or no specific reason."""

    result_code = Result.UnknownError


class InvalidConfiguration(PulsarException):
    """The application asked for something its settings rule out (e.g. a cumulative ack on a
    Shared subscription); nothing was sent to the broker."""

    result_code = Result.InvalidConfiguration


class Timeout(PulsarException):
    """An operation did not complete in time (send timeout, receive timeout, deadline)."""

    result_code = Result.Timeout


class LookupError(PulsarException):  # pulsar-client's name, though it shadows the builtin
    """A topic lookup gave no usable answer: no gRPC address for the listener, or more
    redirects than the client follows."""

    result_code = Result.LookupError


class ConnectError(PulsarException):
    """The broker could not be reached or the stream broke."""

    result_code = Result.ConnectError


class ReadError(PulsarException):
    """pulsar-client's name for a failed socket read; this client reports ConnectError."""

    result_code = Result.ReadError


class AuthenticationError(PulsarException):
    """The broker did not accept the client's credentials."""

    result_code = Result.AuthenticationError


class AuthorizationError(PulsarException):
    """The client's role may not perform the operation."""

    result_code = Result.AuthorizationError


@contextlib.contextmanager
def refusal_names(action: str, topic: object) -> Iterator[None]:
    """Say which action authorization refused: a producer's or consumer's setup looks the
    topic up first, and a role allowed neither to produce nor to consume is refused there,
    with the broker's "not authorized to lookup". The application asked to ``action``."""
    try:
        yield
    except AuthorizationError as e:
        if f"to {action}" in str(e):
            raise
        raise AuthorizationError(
            f"not authorized to {action} on {topic}: the broker refused the topic's lookup ({e})"
        ) from e


class ErrorGettingAuthenticationData(PulsarException):
    """pulsar-client's name for an authentication plugin failure."""

    result_code = Result.ErrorGettingAuthenticationData


class BrokerMetadataError(PulsarException):
    """The broker failed to read or write metadata (ServerError MetadataError); retried."""

    result_code = Result.BrokerMetadataError


class BrokerPersistenceError(PulsarException):
    """The broker failed to store (ServerError PersistenceError); retried."""

    result_code = Result.BrokerPersistenceError


class ChecksumError(PulsarException):
    """The broker found a corrupt message (ServerError ChecksumError)."""

    result_code = Result.ChecksumError


class ConsumerBusy(PulsarException):
    """The subscription is Exclusive and already has a consumer."""

    result_code = Result.ConsumerBusy


class NotConnected(PulsarException):
    """pulsar-client's name for an operation on a handle without a connection; this client
    makes such operations wait for the reconnect instead (until their timeout)."""

    result_code = Result.NotConnected


class AlreadyClosed(PulsarException):
    """The client, producer, consumer or reader is closed."""

    result_code = Result.AlreadyClosed


class InvalidMessage(PulsarException):
    """pulsar-client's name for a message the client cannot build or send."""

    result_code = Result.InvalidMessage


class ConsumerNotInitialized(PulsarException):
    """pulsar-client's name for a consumer used before it was created."""

    result_code = Result.ConsumerNotInitialized


class ProducerNotInitialized(PulsarException):
    """pulsar-client's name for a producer used before it was created."""

    result_code = Result.ProducerNotInitialized


class ProducerBusy(PulsarException):
    """Another producer with the same name is connected to the topic."""

    result_code = Result.ProducerBusy


class TooManyLookupRequestException(PulsarException):
    """The broker is throttling (ServerError TooManyRequests); retried."""

    result_code = Result.TooManyLookupRequestException


class InvalidTopicName(PulsarException):
    """The topic name is malformed."""

    result_code = Result.InvalidTopicName


class InvalidUrl(PulsarException):
    """pulsar-client's name for a malformed service URL (this client raises ValueError)."""

    result_code = Result.InvalidUrl


class ServiceUnitNotReady(PulsarException):
    """The topic is not served right now (ServerError ServiceNotReady: loading, unloading,
    the broker starting); retried."""

    result_code = Result.ServiceUnitNotReady


class OperationNotSupported(PulsarException):
    """The operation is not supported here."""

    result_code = Result.OperationNotSupported


class ProducerBlockedQuotaExceededError(PulsarException):
    """The namespace's backlog quota is exceeded and the policy refuses producers."""

    result_code = Result.ProducerBlockedQuotaExceededError


class ProducerBlockedQuotaExceededException(PulsarException):
    """The namespace's backlog quota is exceeded and the policy fails sends."""

    result_code = Result.ProducerBlockedQuotaExceededException


class ProducerQueueIsFull(PulsarException):
    """``max_pending_messages`` sends are pending and the producer has
    ``block_if_queue_full=False`` (pulsar-client's default): the send failed at once."""

    result_code = Result.ProducerQueueIsFull


class MessageTooBig(PulsarException):
    """A message or batch exceeds the broker's maximum message size."""

    result_code = Result.MessageTooBig


class TopicNotFound(PulsarException):
    """The topic does not exist and auto-creation is off."""

    result_code = Result.TopicNotFound


class SubscriptionNotFound(PulsarException):
    """The subscription does not exist."""

    result_code = Result.SubscriptionNotFound


class ConsumerNotFound(PulsarException):
    """The consumer does not exist (any more) on the broker."""

    result_code = Result.ConsumerNotFound


class UnsupportedVersionError(PulsarException):
    """The broker does not support what the client asked for."""

    result_code = Result.UnsupportedVersionError


class TopicTerminated(PulsarException):
    """The topic was terminated: it takes no more messages."""

    result_code = Result.TopicTerminated


class CryptoError(PulsarException):
    """pulsar-client's name for an encryption failure: no key to decrypt a batch, a key that
    cannot be read, or a namespace that requires encryption refusing a plain batch."""

    result_code = Result.CryptoError
    # The batch's last message id when a consumer or reader failed to decrypt a batch.
    position: MessageId | None = None


class IncompatibleSchema(PulsarException):
    """The producer's or consumer's schema is incompatible with the topic's."""

    result_code = Result.IncompatibleSchema


class ConsumerAssignError(PulsarException):
    """The broker could not assign the consumer (e.g. Key_Shared key ranges)."""

    result_code = Result.ConsumerAssignError


class CumulativeAcknowledgementNotAllowedError(PulsarException):
    """A cumulative ack on a Shared or Key_Shared subscription, refused by the client before
    anything is sent (as pulsar-client does)."""

    result_code = Result.CumulativeAcknowledgementNotAllowedError


class TransactionCoordinatorNotFoundError(PulsarException):
    """No transaction coordinator (ServerError TransactionCoordinatorNotFound)."""

    result_code = Result.TransactionCoordinatorNotFoundError


class InvalidTxnStatusError(PulsarException):
    """A transaction in the wrong state (ServerError InvalidTxnStatus)."""

    result_code = Result.InvalidTxnStatusError


class NotAllowedError(PulsarException):
    """The broker refused the operation (ServerError NotAllowedError)."""

    result_code = Result.NotAllowedError


class TransactionConflict(PulsarException):
    """Conflicting transactions (ServerError TransactionConflict)."""

    result_code = Result.TransactionConflict


class TransactionNotFound(PulsarException):
    """Unknown transaction (ServerError TransactionNotFound)."""

    result_code = Result.TransactionNotFound


class ProducerFenced(PulsarException):
    """Another producer took exclusive access to the topic."""

    result_code = Result.ProducerFenced


class MemoryBufferIsFull(PulsarException):
    """pulsar-client's name for its memory limit; this client bounds pending messages."""

    result_code = Result.MemoryBufferIsFull


class Interrupted(PulsarException):
    """pulsar-client's name for an interrupted blocking call."""

    result_code = Result.Interrupted


# Names this client used before it took pulsar-client's: kept so existing code still runs.
PulsarError = PulsarException
LookupFailed = LookupError
NotAllowed = NotAllowedError

# ServerError -> exception, as Pulsar's C++ client maps them (ClientConnection::getResult).
_BY_CODE: dict[int, type[PulsarException]] = {
    pb.MetadataError: BrokerMetadataError,
    pb.PersistenceError: BrokerPersistenceError,
    pb.AuthenticationError: AuthenticationError,
    pb.AuthorizationError: AuthorizationError,
    pb.ConsumerBusy: ConsumerBusy,
    pb.ServiceNotReady: ServiceUnitNotReady,
    pb.ProducerBlockedQuotaExceededError: ProducerBlockedQuotaExceededError,
    pb.ProducerBlockedQuotaExceededException: ProducerBlockedQuotaExceededException,
    pb.ChecksumError: ChecksumError,
    pb.UnsupportedVersionError: UnsupportedVersionError,
    pb.TopicNotFound: TopicNotFound,
    pb.SubscriptionNotFound: SubscriptionNotFound,
    pb.ConsumerNotFound: ConsumerNotFound,
    pb.TooManyRequests: TooManyLookupRequestException,
    pb.TopicTerminatedError: TopicTerminated,
    pb.ProducerBusy: ProducerBusy,
    pb.InvalidTopicName: InvalidTopicName,
    pb.IncompatibleSchema: IncompatibleSchema,
    pb.ConsumerAssignError: ConsumerAssignError,
    pb.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    pb.InvalidTxnStatus: InvalidTxnStatusError,
    pb.NotAllowedError: NotAllowedError,
    pb.TransactionConflict: TransactionConflict,
    pb.TransactionNotFound: TransactionNotFound,
    pb.ProducerFenced: ProducerFenced,
}

# Without a specific ServerError the status decides; the rest is UnknownError.
_BY_STATUS: dict[grpc.StatusCode, type[PulsarException]] = {
    grpc.StatusCode.UNAVAILABLE: ConnectError,
    grpc.StatusCode.DEADLINE_EXCEEDED: Timeout,
    grpc.StatusCode.RESOURCE_EXHAUSTED: MessageTooBig,
    grpc.StatusCode.UNAUTHENTICATED: AuthenticationError,
    grpc.StatusCode.PERMISSION_DENIED: AuthorizationError,
}


def error_from_code(code: int, message: str) -> PulsarException:
    """The error for a request the broker refused while the stream stays open."""
    return _BY_CODE.get(code, UnknownError)(message, code)


class RpcErrorLike(Protocol):
    """What :func:`error_from_rpc` needs of a ``grpc.aio.AioRpcError``."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> str | None: ...

    def trailing_metadata(self) -> Any: ...


def _owner_url(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    for key, value in metadata or ():
        if key.lower() in _OWNER_URL_KEYS:
            return value.decode() if isinstance(value, bytes) else value
    return None


def _server_error_code(metadata: Iterable[tuple[str, str | bytes]] | None) -> int | None:
    for key, value in metadata or ():
        if key.lower() == Trailer.ERROR_CODE:
            text = value.decode() if isinstance(value, bytes) else value
            try:
                return int(text)
            except ValueError:
                return None
    return None


def error_from_rpc(err: RpcErrorLike) -> PulsarException:
    """Map a failed call to the most specific :class:`PulsarException`.

    A ServerError code that names a specific error decides, except that RESOURCE_EXHAUSTED
    always means too big (the broker reports an oversized batch as NotAllowedError with that
    status). Otherwise the gRPC status decides, and what is left is :class:`UnknownError`.

    >>> error_from_rpc(grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, None, None, "down"))
    ConnectError('down')
    """
    status = err.code()
    message = err.details() or status.name
    code = _server_error_code(err.trailing_metadata())
    cls: type[PulsarException]
    if status == grpc.StatusCode.RESOURCE_EXHAUSTED:
        cls = MessageTooBig
    elif code == pb.MetadataError and status == grpc.StatusCode.FAILED_PRECONDITION:
        # Pulsar's answer to an unencrypted batch on an encryption_required namespace: the
        # producer must encrypt, so it is not the retried broker fault MetadataError means.
        cls = CryptoError
    elif code is not None and code in _BY_CODE:
        cls = _BY_CODE[code]
    else:
        cls = _BY_STATUS.get(status, UnknownError)
    error = cls(message, code if code is not None else pb.UnknownError, status)
    error.owner_url = _owner_url(err.trailing_metadata())
    return error


# Broker faults that pass: the broker restarts, loads the topic elsewhere, or catches up.
_RETRYABLE = (
    ConnectError,
    Timeout,
    ServiceUnitNotReady,
    TooManyLookupRequestException,
    BrokerMetadataError,
    BrokerPersistenceError,
)
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


def is_retryable_at_creation(error: PulsarException) -> bool:
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
    if isinstance(error, _RETRYABLE) and not isinstance(error, (ConnectError, Timeout)):
        return True
    return isinstance(error, ConnectError) and _CONNECTION_REFUSED in error.message.lower()


def is_retryable(error: PulsarException, reconnecting: bool = False) -> bool:
    """Whether a stream that ended with ``error`` (or an attempt to reopen it that failed with
    it) is worth another attempt, as Pulsar's ``isRetriableError``.

    Retryable: the broker unreachable or gone (ConnectError: UNAVAILABLE, a dropped
    connection), ServiceUnitNotReady, timeouts, and broker-side faults (metadata, persistence,
    throttling). Not retryable: what the same request would get again (topic not found, bad
    name, not allowed, too big, auth). While *reconnecting*, ProducerBusy, ConsumerBusy and a
    lookup without a usable answer are retried as well: the broker may not have noticed yet
    that the old stream is gone, or the topic is moving (Pulsar's producer and consumer retry
    them once created). An UnknownError is retried when its gRPC status says nothing about
    the request (INTERNAL, UNKNOWN, ABORTED, ...).

    >>> is_retryable(ConnectError("gone")), is_retryable(TopicNotFound("no", 11))
    (True, False)
    """
    if isinstance(error, _RETRYABLE):
        return True
    if isinstance(error, (ProducerBusy, ConsumerBusy, LookupError)):
        return reconnecting
    return type(error) is UnknownError and error.status in _RETRYABLE_STATUSES
