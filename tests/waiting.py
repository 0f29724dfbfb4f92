"""Waiting for a condition instead of sleeping for a guessed time.

A fixed sleep is either too short on a loaded machine (a flaky test) or longer than needed
everywhere else (a slow suite). ``eventually`` polls a check at a short interval and returns as
soon as it holds; when it never holds within ``timeout`` it fails with what it was waiting for
and what it saw last, so a timeout reads like any other failed assertion.

A check is a callable taking no arguments, in either of two styles:

- a predicate: it holds when it returns a truthy value (returned by ``eventually``), and not
  yet while it returns a falsy one other than ``None``;
- an assertion: it holds when it returns (``None`` included) and not yet while it raises
  ``AssertionError``.

With ``eventually`` (async) the check may also return an awaitable, which is awaited.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

INTERVAL_S = 0.01  # short: loopback brokers answer in well under a millisecond


class _Attempts:
    """One run of polling: the deadline and what the check did last, for the failure message."""

    def __init__(self, check: Callable[[], Any], timeout: float, what: str | None) -> None:
        self.check = check
        self.timeout = timeout
        self.what = what or _describe(check)
        self.deadline = time.monotonic() + timeout
        self.last_error: AssertionError | None = None
        self.last_result: Any = None

    def holds(self, result: Any) -> bool:
        self.last_error, self.last_result = None, result
        return result is None or bool(result)

    def failed(self, error: AssertionError) -> None:
        self.last_error = error

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def timeout_error(self) -> AssertionError:
        seen = (
            f"last check failed: {self.last_error}"
            if self.last_error is not None
            else f"last result: {self.last_result!r}"
        )
        return AssertionError(f"not true within {self.timeout:g}s: {self.what} ({seen})")


def _describe(check: Callable[[], Any]) -> str:
    """The check's source line for a lambda, its name otherwise."""
    name = getattr(check, "__qualname__", repr(check))
    if name.endswith("<lambda>"):
        try:
            return inspect.getsource(check).strip()
        except (OSError, TypeError):
            pass
    return name


async def eventually(
    check: Callable[[], Any],
    timeout: float = 10,  # noqa: ASYNC109 - how long to poll, not a cancellation scope
    interval: float = INTERVAL_S,
    what: str | None = None,
) -> Any:
    """Poll ``check`` on the running loop until it holds; return its result."""
    attempts = _Attempts(check, timeout, what)
    while True:
        try:
            result = check()
            if isinstance(result, Awaitable):
                result = await result
            if attempts.holds(result):
                return result
        except AssertionError as error:
            attempts.failed(error)
        if attempts.expired():
            raise attempts.timeout_error() from attempts.last_error
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], Any],
    timeout: float = 10,
    interval: float = INTERVAL_S,
    what: str | None = None,
) -> Any:
    """The same for synchronous tests (those that drive a broker thread or a subprocess)."""
    attempts = _Attempts(check, timeout, what)
    while True:
        try:
            result = check()
            if attempts.holds(result):
                return result
        except AssertionError as error:
            attempts.failed(error)
        if attempts.expired():
            raise attempts.timeout_error() from attempts.last_error
        time.sleep(interval)
