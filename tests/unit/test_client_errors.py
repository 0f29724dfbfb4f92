"""Mapping of failed calls (status + pulsar-error-code trailer) to client errors."""

import grpc
import pytest

from pulsar_grpc import client
from pulsar_grpc.client import error_from_rpc, exceptions


class FakeRpcError:
    def __init__(self, status, details="boom", trailers=()):
        self._status, self._details, self._trailers = status, details, trailers

    def code(self):
        return self._status

    def details(self):
        return self._details

    def trailing_metadata(self):
        return self._trailers


S = grpc.StatusCode


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (S.FAILED_PRECONDITION, "16", client.ProducerBusy),
        (S.FAILED_PRECONDITION, "5", client.ConsumerBusy),
        (S.FAILED_PRECONDITION, "22", client.NotAllowedError),
        (S.NOT_FOUND, "11", client.TopicNotFound),
        (S.INVALID_ARGUMENT, "17", client.InvalidTopicName),
        (S.RESOURCE_EXHAUSTED, "22", client.MessageTooBig),
        (S.UNAUTHENTICATED, "3", client.AuthenticationError),
        (S.PERMISSION_DENIED, "4", client.AuthorizationError),
        (S.UNAVAILABLE, "6", client.ServiceUnitNotReady),
        (S.UNAVAILABLE, None, client.ConnectError),
        (S.DEADLINE_EXCEEDED, None, client.Timeout),
        (S.UNAUTHENTICATED, None, client.AuthenticationError),
        (S.NOT_FOUND, "12", client.SubscriptionNotFound),
        (S.INTERNAL, "2", client.BrokerPersistenceError),
        (S.INTERNAL, "1", client.BrokerMetadataError),
        (S.UNAVAILABLE, "14", client.TooManyLookupRequestException),
        (S.FAILED_PRECONDITION, "15", client.TopicTerminated),
        (S.FAILED_PRECONDITION, "18", client.IncompatibleSchema),
        # The broker's generic InvalidArgument carries UnknownError: pulsar-client's UnknownError.
        (S.INVALID_ARGUMENT, "0", client.UnknownError),
        (S.INTERNAL, None, client.UnknownError),
    ],
)
def test_most_specific_error(status, code, expected):
    trailers = (("pulsar-error-code", code),) if code is not None else ()
    err = error_from_rpc(FakeRpcError(status, "why", trailers))
    assert type(err) is expected
    assert err.result() is client.Result[expected.__name__]
    assert err.status == status
    assert err.code == (int(code) if code is not None else 0)
    assert str(err) == "why"


def test_bytes_trailer_values_and_other_keys():
    trailers = (("other", "x"), ("Pulsar-Error-Code", b"16"))
    err = error_from_rpc(FakeRpcError(S.FAILED_PRECONDITION, trailers=trailers))
    assert isinstance(err, client.ProducerBusy) and err.code == 16


def test_garbage_code_is_ignored_and_details_default_to_status_name():
    err = error_from_rpc(FakeRpcError(S.INTERNAL, None, (("pulsar-error-code", "x"),)))
    assert type(err) is client.UnknownError and err.code == 0 and str(err) == "INTERNAL"


def test_real_aio_rpc_error():
    metadata = grpc.aio.Metadata(("pulsar-error-code", "11"))
    err = error_from_rpc(grpc.aio.AioRpcError(S.NOT_FOUND, grpc.aio.Metadata(), metadata, "gone"))
    assert isinstance(err, client.TopicNotFound) and err.code == 11


def test_every_error_is_a_pulsar_exception():
    for name in client.__all__:
        obj = getattr(client, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, client.PulsarException)


def test_pulsar_client_exception_names_and_results():
    """Every exception pulsar-client's ``pulsar.exceptions`` defines is here by its name, a
    direct subclass of PulsarException whose result() is the Result of the same name (so
    ported ``except`` clauses and send_async callbacks compare alike)."""
    names = [r.name for r in client.Result if r is not client.Result.Ok]
    assert len(names) == 45
    for name in names:
        cls = getattr(exceptions, name)
        assert cls.__bases__ == (client.PulsarException,), name
        assert cls("x").result() is client.Result[name]
        assert getattr(client, name) is cls
    # Former names of this client stay as aliases.
    assert client.PulsarError is client.PulsarException
    assert client.LookupFailed is client.LookupError
    assert client.NotAllowed is client.NotAllowedError


def test_error_is_pulsar_clients_name_for_the_result() -> None:
    """pulsar-client's ``except PulsarException as e: e.error()`` runs unchanged."""
    from pulsar_grpc.client import ProducerQueueIsFull, Result

    error = ProducerQueueIsFull("full")
    assert error.error() is Result.ProducerQueueIsFull
    assert error.result() is error.error()
