"""The one place where spark/ depends on the SDK's call signatures.

The SDK follows Pulsar's Python API, whose names moved (``key`` -> ``partition_key``,
``event_time`` -> ``event_timestamp``, ``PulsarError`` -> ``PulsarException``); the source
looks the names up here once, so it runs against either spelling, and the pass-through
options (``pulsar.client.*``, ``pulsar.reader.*``, ``pulsar.producer.*``) are checked against
the SDK's real keyword parameters instead of a copied list.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from pulsar_grpc import client as sdk
from pulsar_grpc.client import Client, Producer

#: Base class of every SDK error, whichever name the SDK gives it.
SdkError: type[Exception] = getattr(sdk, "PulsarException", None) or sdk.PulsarError


def _first(parameters: Mapping[str, inspect.Parameter], *names: str) -> str:
    for name in names:
        if name in parameters:
            return name
    raise RuntimeError(f"the SDK's Producer.send_async takes none of {names}")


_SEND = inspect.signature(Producer.send_async).parameters
_KEY = _first(_SEND, "partition_key", "key")
_EVENT_TIME = _first(_SEND, "event_timestamp", "event_time")


def send_kwargs(
    key: str | None, properties: dict[str, str] | None, event_time_ms: int | None
) -> dict[str, Any]:
    """Keyword arguments of ``Producer.send_async`` for one row."""
    return {_KEY: key, "properties": properties, _EVENT_TIME: event_time_ms}


def keyword_parameters(function: Callable[..., Any], skip: set[str]) -> dict[str, Any]:
    """``{normalized name: (parameter name, default)}`` of ``function``'s keyword parameters;
    the normalized name is lower case without underscores, so ``operationTimeoutMs`` (Pulsar's
    Java spelling, lowered by Spark) and ``operation_timeout_ms`` both find it."""
    out: dict[str, Any] = {}
    for name, parameter in inspect.signature(function).parameters.items():
        if name in skip or parameter.kind not in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            continue
        out[name.replace("_", "").lower()] = (name, parameter.default)
    return out


CLIENT_PARAMETERS = keyword_parameters(Client.__init__, {"self", "service_url"})
READER_PARAMETERS = keyword_parameters(
    Client.create_reader, {"self", "topic", "start_message_id", "start_message_id_inclusive"}
)
PRODUCER_PARAMETERS = keyword_parameters(Client.create_producer, {"self", "topic"})

#: The SDK's errors the source turns into its own messages (same names in Pulsar's API).
TopicNotFound: type[Exception] = sdk.TopicNotFound
ConnectError: type[Exception] = sdk.ConnectError
