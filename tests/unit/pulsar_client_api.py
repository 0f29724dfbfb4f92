"""Introspection of pulsar-client's public API and this SDK's counterpart of each name.

Shared by tests/unit/test_pulsar_client_table.py (which keeps docs/pulsar-client.md true) and
by whoever regenerates the table's rows. pulsar-client's names come from its installed
package (``pulsar-client`` in the dev dependencies), never from a copied list.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator
from typing import Any

import pulsar
import pulsar.asyncio

import pulsar_grpc
from pulsar_grpc.client import exceptions as our_exceptions

# pulsar-client's class -> ours. Its blocking classes are our Sync* ones; pulsar.asyncio's are
# our asyncio ones.
CLASSES: dict[str, tuple[Any, Any]] = {
    "Client": (pulsar.Client, pulsar_grpc.SyncClient),
    "Producer": (pulsar.Producer, pulsar_grpc.SyncProducer),
    "Consumer": (pulsar.Consumer, pulsar_grpc.SyncConsumer),
    "Reader": (pulsar.Reader, pulsar_grpc.SyncReader),
    "Message": (pulsar.Message, pulsar_grpc.Message),
    "MessageId": (pulsar.MessageId, pulsar_grpc.MessageId),
    "asyncio.Client": (pulsar.asyncio.Client, pulsar_grpc.Client),
    "asyncio.Producer": (pulsar.asyncio.Producer, pulsar_grpc.Producer),
    "asyncio.Consumer": (pulsar.asyncio.Consumer, pulsar_grpc.Consumer),
}
_PRIVATE_INIT = {"asyncio.Producer", "asyncio.Consumer", "Message"}


def public_names() -> Iterator[str]:
    """Every public name of pulsar-client: its module-level names (less the typing and
    module imports), and the public methods of its client classes."""
    for name in sorted(dir(pulsar)):
        value = getattr(pulsar, name)
        if name.startswith("_") or inspect.ismodule(value):
            continue
        if getattr(value, "__module__", "").startswith(("typing", "collections", "datetime")):
            continue
        if name in CLASSES:
            continue
        yield name
    for label, (theirs, _) in CLASSES.items():
        yield label
        for method in sorted(vars(theirs)):
            if method.startswith("_") and not (method == "__init__" and label not in _PRIVATE_INIT):
                continue
            yield f"{label}.{method}"


def ours(name: str) -> Any:
    """This SDK's object for pulsar-client's ``name`` (None: absent)."""
    label, _, member = name.rpartition(".") if name.count(".") else ("", "", name)
    if name in CLASSES:
        return CLASSES[name][1]
    if label in CLASSES:
        return getattr(CLASSES[label][1], member, None)
    if "." in name:  # "asyncio.Client.send" style handled above; nothing else is dotted
        return None
    return getattr(pulsar_grpc, name, None) or getattr(our_exceptions, name, None)


def theirs(name: str) -> Any:
    label, _, member = name.rpartition(".")
    if name in CLASSES:
        return CLASSES[name][0]
    if label in CLASSES:
        return vars(CLASSES[label][0])[member]
    return getattr(pulsar, name)


def _default(value: Any) -> Any:
    """A default as compared across the two packages: an enum by its member's name, a schema
    by its class (None and BytesSchema() both mean bytes)."""
    if value is inspect.Parameter.empty or value is None:
        return value
    if isinstance(value, enum.Enum) or type(value).__module__ == "_pulsar":
        return getattr(value, "name", repr(value))
    if type(value).__name__ == "BytesSchema":
        return None
    return value


def same_signature(name: str) -> str | None:
    """None when ours takes pulsar-client's parameters of ``name`` with the same names,
    order and defaults (extra parameters of ours after them, with defaults, are allowed);
    otherwise what differs."""
    mine, reference = ours(name), theirs(name)
    if mine is None:
        return "absent"
    if isinstance(reference, type) and issubclass(reference, BaseException):
        return None if issubclass(mine, BaseException) else "not an exception"
    if isinstance(reference, type) and hasattr(reference, "__members__"):
        missing = set(reference.__members__) - set(getattr(mine, "__members__", {}))
        return f"members missing: {sorted(missing)}" if missing else None
    if isinstance(reference, staticmethod | classmethod):
        reference = reference.__func__
    if not callable(reference) or isinstance(reference, type):
        return None  # a class, or a constant such as MessageId.earliest: present is enough
    try:
        expected = list(inspect.signature(reference).parameters.values())
    except (TypeError, ValueError):
        return None  # a C++ method without a Python signature: present is enough
    if not callable(mine):
        return "an attribute here, a method in pulsar-client"
    actual = list(inspect.signature(mine).parameters.values())
    if (
        expected
        and expected[0].name in ("self", "cls")
        and (not actual or actual[0].name != expected[0].name)
    ):
        expected = expected[1:]
    for i, param in enumerate(expected):
        if param.kind is param.VAR_KEYWORD:
            return None
        if i >= len(actual) or actual[i].name != param.name:
            got = actual[i].name if i < len(actual) else "nothing"
            return f"parameter {i} is {got}, pulsar-client's is {param.name}"
        if _default(actual[i].default) != _default(param.default):
            return f"{param.name} defaults to {actual[i].default!r}, not {param.default!r}"
    extra = [p for p in actual[len(expected) :] if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if any(p.default is inspect.Parameter.empty for p in extra):
        return "takes more required parameters"
    return None
