"""The SDK options a query may pass through (``pulsar.client.*``, ``pulsar.reader.*``,
``pulsar.producer.*``), read from the SDK's real keyword parameters instead of a copied list, so
a new SDK option is usable from Spark at once and a misspelt one is refused by name."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

from pulsar_grpc.client import Client


def keyword_parameters(function: Callable[..., Any], skip: set[str]) -> dict[str, Any]:
    """``{normalized name: (parameter name, default)}`` of ``function``'s keyword parameters;
    the normalized name is lower case without underscores, so ``operationTimeoutMs`` (Pulsar's
    Java spelling, lowered by Spark) and ``operation_timeout_ms`` both find it."""
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(function)
    for name, parameter in inspect.signature(function).parameters.items():
        if name in skip or parameter.kind not in (
            inspect.Parameter.KEYWORD_ONLY,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
        ):
            continue
        default = parameter.default
        if default is None:  # e.g. `int | None = None`: converted as its declared type
            default = _prototype(hints.get(name))
        out[name.replace("_", "").lower()] = (name, default)
    return out


def _prototype(annotation: object) -> object:
    """A value of the scalar type an optional parameter declares (``int | None`` -> 0), which
    the pass-through converts its text to; None when it declares none."""
    for kind in (bool, int, float):  # bool first: it is an int too
        if annotation is kind or kind in typing.get_args(annotation):
            return kind()
    return None


CLIENT_PARAMETERS = keyword_parameters(Client.__init__, {"self", "service_url"})
READER_PARAMETERS = keyword_parameters(
    Client.create_reader, {"self", "topic", "start_message_id", "start_message_id_inclusive"}
)
PRODUCER_PARAMETERS = keyword_parameters(Client.create_producer, {"self", "topic"})
