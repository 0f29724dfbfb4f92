"""JSON text a client sent (an admin request's body, a schema definition), parsed so that text
nested deeper than the interpreter's recursion limit is refused like any other text that is not
JSON, rather than escaping as a RecursionError (a 500 with a traceback: ``[`` * 200,000 fits
an admin body's 1 MiB and took down each handler that parsed a body)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["json_value"]


def json_value(text: str | bytes) -> Any:
    """``json.loads(text)``; ValueError for text that is not JSON or is nested too deeply."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
