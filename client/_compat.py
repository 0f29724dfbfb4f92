"""pulsar-client's parameters that name a feature this SDK or its broker lacks.

Code written for pulsar-client passes every parameter of ``Client``, ``create_producer``,
``subscribe``, ``create_reader`` and ``send`` by name or position, often at its default. So
each is accepted with pulsar-client's name, position and default; at its default it is
harmless. A value that would change what the application sees (delayed delivery, chunking,
a compacted view) cannot be honoured here, and silently
ignoring it would lose messages' meaning, so :func:`refuse_unsupported` raises
NotImplementedError naming the parameter and why. Parameters that only tune pulsar-client's
C++ runtime (``io_threads``, ``message_listener_threads``, ...) mean nothing here and are
accepted whatever their value. docs/pulsar-client.md lists both kinds.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ProducerAccessMode", "RegexSubscriptionMode", "one_of", "refuse_unsupported"]


class ProducerAccessMode(IntEnum):
    """pulsar-client's ``ProducerAccessMode`` (PIP-68), sent as
    ``x-pulsar-producer-access-mode`` (its name) and enforced by the broker."""

    Shared = 0
    Exclusive = 1
    WaitForExclusive = 2
    ExclusiveWithFencing = 3


class RegexSubscriptionMode(IntEnum):
    """pulsar-client's ``RegexSubscriptionMode``. Only ``PersistentOnly`` is served here:
    the broker has no non-persistent topics."""

    PersistentOnly = 0
    NonPersistentOnly = 1
    AllTopics = 2


# Why each parameter can only take its default here (shown in the error and the docs table).
UNSUPPORTED_REASONS = {
    "chunking_enabled": "the broker does not chunk messages; keep messages under maxMessageSize",
    "is_read_compacted": "the broker does not compact topics",
    "replicate_subscription_state_enabled": "the broker does not replicate between clusters",
    "regex_subscription_mode": "the broker has persistent topics only",
    "replication_clusters": "the broker does not replicate between clusters",
    "deliver_at": "the broker has no delayed delivery",
    "deliver_after": "the broker has no delayed delivery",
    "tls_allow_insecure_connection": "gRPC always verifies the broker's certificate; give its "
    "CA with tls_trust_certs_file_path",
    "use_tls": "TLS is chosen by the service URL's scheme: grpc+ssl://",
}


def refuse_unsupported(operation: str, **given: tuple[object, object]) -> None:
    """Raise NotImplementedError for the first parameter whose value is not its default.

    ``given`` maps a parameter's name to ``(value, default)``.

    >>> refuse_unsupported("send", deliver_at=(None, None))
    >>> refuse_unsupported("send", deliver_at=(5, None))
    Traceback (most recent call last):
    NotImplementedError: send(deliver_at=5): the broker has no delayed delivery
    """
    for name, (value, default) in given.items():
        if value != default:
            raise NotImplementedError(f"{operation}({name}={value!r}): {UNSUPPORTED_REASONS[name]}")


def one_of(name: str, value: str | None, old_name: str, old_value: str | None) -> str | None:
    """pulsar-client's name of an option, or the name earlier versions of this SDK used."""
    if value and old_value and value != old_value:
        raise ValueError(f"{name} and {old_name} name the same option: give one")
    return value or old_value
