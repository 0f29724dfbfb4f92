"""Broker exceptions, each carrying Pulsar's ServerError code.

The tree::

    BrokerError                       (UnknownError)
    ├── InvalidArgumentError          bad parameters                 -> INVALID_ARGUMENT
    │   ├── InvalidTopicNameError     (InvalidTopicName)             -> INVALID_ARGUMENT
    │   ├── InvalidSchemaDataError    (IncompatibleSchema)           -> INVALID_ARGUMENT
    │   └── NotAcceptableError                                       (HTTP 406)
    ├── NotFoundError                                                -> NOT_FOUND
    │   ├── TopicNotFoundError        (TopicNotFound)
    │   └── SubscriptionNotFoundError (SubscriptionNotFound)
    ├── PreconditionError                                            -> FAILED_PRECONDITION
    │   ├── ProducerBusyError         (ProducerBusy)
    │   ├── ProducerFencedError       (ProducerFenced)
    │   ├── ConsumerBusyError         (ConsumerBusy)
    │   ├── ConsumerAssignError       (ConsumerAssignError)
    │   ├── NotAllowedError           (NotAllowedError)
    │   ├── IncompatibleSchemaError   (IncompatibleSchema)
    │   ├── NotEncryptedError         (MetadataError)
    │   ├── BacklogQuotaExceededError (ProducerBlockedQuotaExceeded{Error,Exception})
    │   └── PreconditionFailedError   (NotAllowedError)              (HTTP 412)
    ├── TooLargeError                 (NotAllowedError)              -> RESOURCE_EXHAUSTED
    ├── AuthenticationError           (AuthenticationError)          -> UNAUTHENTICATED
    │   └── AuthenticationChallenge   (AuthenticationError)          (+ its metadata)
    ├── AuthorizationError            (AuthorizationError)           -> PERMISSION_DENIED
    ├── ServiceNotReadyError          (ServiceNotReady)              -> UNAVAILABLE
    │   └── ManagedLedgerFencedError  (ServiceNotReady)
    ├── PersistenceError              (PersistenceError)             -> INTERNAL
    └── MetadataError                 (MetadataError)                -> INTERNAL

The broker knows nothing about gRPC: a protocol handler maps these classes to its own status
codes in one table (for gRPC: handler/errors.py).
"""

from __future__ import annotations

from enum import IntEnum


class ServerError(IntEnum):
    """Pulsar's ServerError codes (PulsarApi.proto); the numbers are part of the wire contract."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    NotAllowedError = 22
    ProducerFenced = 25


class BrokerError(Exception):
    """Base of every error the broker reports to a client."""

    code: ServerError = ServerError.UnknownError

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgumentError(BrokerError):
    code = ServerError.UnknownError


class InvalidTopicNameError(InvalidArgumentError):
    code = ServerError.InvalidTopicName


class NotAcceptableError(InvalidArgumentError):
    """A value Pulsar's admin API refuses with 406 NOT_ACCEPTABLE rather than 400 (a number
    of partitions out of range): its clients tell the two apart."""


class InvalidSchemaDataError(InvalidArgumentError):
    """A schema definition that is not one (Pulsar's InvalidSchemaDataException): not valid
    Avro for an Avro-described type, too large, an unknown type."""

    code = ServerError.IncompatibleSchema


class NotFoundError(BrokerError):
    code = ServerError.UnknownError


class TopicNotFoundError(NotFoundError):
    code = ServerError.TopicNotFound


class SubscriptionNotFoundError(NotFoundError):
    code = ServerError.SubscriptionNotFound


class PreconditionError(BrokerError):
    code = ServerError.NotAllowedError


class ProducerBusyError(PreconditionError):
    code = ServerError.ProducerBusy


class ProducerFencedError(PreconditionError):
    """An exclusive producer lost the topic, or cannot have it (Pulsar's
    ProducerFencedException, PIP-68): another producer holds it exclusively, a newer exclusive
    producer fenced this one (ExclusiveWithFencing), or the topic epoch it reconnects with is
    older than the topic's. Not retryable: the same request would be fenced again."""

    code = ServerError.ProducerFenced


class ConsumerBusyError(PreconditionError):
    code = ServerError.ConsumerBusy


class ConsumerAssignError(PreconditionError):
    """No Key_Shared hash range is left for another consumer (every consumer of the
    subscription already owns a single hash). As in Pulsar, not retryable as such: the
    subscription must lose a consumer first."""

    code = ServerError.ConsumerAssignError


class NotAllowedError(PreconditionError):
    code = ServerError.NotAllowedError


class IncompatibleSchemaError(PreconditionError):
    """A schema the topic's compatibility strategy refuses, a producer without a schema on a
    topic with one under schemaValidationEnforced, or a new schema while auto-update is off
    (Pulsar's IncompatibleSchemaException). The message says which field broke which rule."""

    code = ServerError.IncompatibleSchema


class NotEncryptedError(PreconditionError):
    """A batch that is not end-to-end encrypted, on a namespace whose encryption_required
    policy is set. Pulsar answers it with MetadataError "Messages must be encrypted"; the code
    is kept so Pulsar-minded clients recognise it, but the status says the client must change
    (encrypt), not retry."""

    code = ServerError.MetadataError


class PreconditionFailedError(PreconditionError):
    """A request the resource's present state refuses where Pulsar's admin API answers 412
    Precondition Failed (a bundle that cannot be split, an unknown bundle range or split
    algorithm); other PreconditionErrors are its 409 Conflict."""

    code = ServerError.NotAllowedError


class TooLargeError(BrokerError):
    code = ServerError.NotAllowedError


class BacklogQuotaExceededError(PreconditionError):
    """A producer refused or ended because its topic is over a backlog quota whose policy
    stops producers (Pulsar's TopicBacklogQuotaExceededException): producer_exception gives
    ProducerBlockedQuotaExceededException, producer_request_hold ProducerBlockedQuotaExceededError
    (Pulsar's ServerCnx sends one or the other by the policy). FAILED_PRECONDITION, not
    RESOURCE_EXHAUSTED (which this protocol keeps for a batch too large): not retryable as
    such, the backlog must be consumed first."""

    MESSAGE = "Cannot create producer on topic with backlog quota exceeded"

    def __init__(self, code: ServerError, detail: str = "") -> None:
        super().__init__(f"{self.MESSAGE}{detail}")
        self.code = code


class AuthenticationError(BrokerError):
    code = ServerError.AuthenticationError


class AuthenticationChallenge(AuthenticationError):
    """A step of a two-way authentication (PIP-59): the call ends unauthenticated, and
    ``metadata`` (name, value pairs) tells the client how to go on: the server's challenge, or
    the role token a completed exchange earned. A protocol sends them with the refusal (gRPC:
    trailing metadata)."""

    def __init__(self, message: str, metadata: tuple[tuple[str, str], ...]) -> None:
        super().__init__(message)
        self.metadata = metadata


class AuthorizationError(BrokerError):
    code = ServerError.AuthorizationError


class ServiceNotReadyError(BrokerError):
    code = ServerError.ServiceNotReady


class ManagedLedgerFencedError(ServiceNotReadyError):
    """Another broker opened the managed ledger since this one did (it owns the topic now):
    this broker's writes to it are refused. Retryable, as an unload is: the client looks the
    topic up again and reaches the new owner."""


class PersistenceError(BrokerError):
    code = ServerError.PersistenceError


class MetadataError(BrokerError):
    code = ServerError.MetadataError
