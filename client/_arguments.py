"""pulsar-client's argument checks: a wrong type is a ValueError naming the argument.

pulsar-client checks every argument of its client calls with ``_check_type`` (ValueError,
"Argument topic is expected to be of type 'str' and not 'int'"); an application that relies on
that gets the same error here. Only the types pulsar-client insists on are checked, where this
SDK does not take more (enums also by name, ``start_message_id`` also as text, floats for
times): those keep their wider types.
"""

from __future__ import annotations

from typing import Any

# One argument: (its value, the type or types it must have, whether None is allowed).
Spec = tuple[Any, type | tuple[type, ...], bool]


def check_type(kind: type | tuple[type, ...], value: object, name: str) -> None:
    """ValueError unless ``value`` is a ``kind``, worded as pulsar-client's."""
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ValueError(
            f"Argument {name} is expected to be of type '{names}' and not '{type(value).__name__}'"
        )


def check_types(**specs: Spec) -> None:
    """:func:`check_type` for each argument named."""
    for name, (value, kind, or_none) in specs.items():
        if value is None and or_none:
            continue
        check_type(kind, value, name)
