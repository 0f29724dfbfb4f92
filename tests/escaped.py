"""Errors that escape where no test looks: recorded so that the test in progress fails.

An exception raised in a task nobody awaits, or in a loop callback, only reaches the event
loop's exception handler, which logs it and carries on; an exception the broker catches and logs
(``log.exception`` in a read loop) is equally invisible to a test whose assertions happen to
hold. ``LoopErrors`` is an event loop exception handler and ``LogErrors`` a logging handler that
record such errors; the fixtures in ``tests/conftest.py`` fail the test when either recorded
anything.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from enum import Enum
from typing import Any

import pytest

# Loggers of the broker side; errors logged by the SDK (client) are for its application.
BROKER_LOGGERS = (
    "pulsar_grpc.broker",
    "pulsar_grpc.handler",
    "pulsar_grpc.interceptors",
    "pulsar_grpc.proxy",
)

# Errors that reached a loop after its test was checked (typically "Task exception was never
# retrieved" for a task the garbage collector freed later); reported at the end of the session.
LATE: list[str] = []


class Phase(Enum):
    RECORDING = "recording"  # the loop's test is in progress: errors are its own
    CHECKED = "checked"  # its test has been checked: later errors go to LATE


class LoopErrors:
    """An event loop exception handler that records every call (and still logs it, as the
    default handler does). Safe to call from the loop's thread while a test reads it."""

    def __init__(self, where: str) -> None:
        self.where = where
        self._contexts: list[dict[str, Any]] = []
        self._phase = Phase.RECORDING

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if is_grpc_completion_for_a_closed_loop(context):
            return
        if self._phase is Phase.CHECKED:
            LATE.append(f"after its test ended, {self._describe(context)}")
        else:
            self._contexts.append(context)
        loop.default_exception_handler(context)

    def install(self, loop: asyncio.AbstractEventLoop) -> asyncio.AbstractEventLoop:
        loop.set_exception_handler(self)
        return loop

    def check(self) -> list[str]:
        """What was recorded, described; what comes later goes to ``LATE``."""
        self._phase = Phase.CHECKED
        taken, self._contexts = self._contexts, []
        return [self._describe(context) for context in taken]

    def _describe(self, context: dict[str, Any]) -> str:
        return f"on {self.where}: {describe_context(context)}"


def is_grpc_completion_for_a_closed_loop(context: dict[str, Any]) -> bool:
    """grpc.aio polls all completions of the process on the first loop that used it (here a
    broker's or a test's) and forwards each to its call's loop. A channel's close() cancels its
    calls without waiting for their last completions, so one can reach a test loop that
    pytest-asyncio has closed since: forwarding it raises "Event loop is closed" on the polling
    loop. It belongs to a call nobody can await any more, in a process with several loops, which
    only tests have; it says nothing about the broker or the test, so it is not recorded."""
    exception = context.get("exception")
    return (
        isinstance(exception, RuntimeError)
        and str(exception) == "Event loop is closed"
        and "PollerCompletionQueue._handle_events" in str(context.get("message", ""))
    )


def describe_context(context: dict[str, Any]) -> str:
    """An exception handler's context as asyncio's default handler would log it, in short."""
    message = str(context.get("message", "unhandled exception"))
    details = [
        f"{key}: {value!r}"
        for key, value in context.items()
        if key not in ("message", "exception") and not key.startswith("source_traceback")
    ]
    text = "\n  ".join([message, *details])
    exception = context.get("exception")
    if isinstance(exception, BaseException):
        text += "\n" + "".join(traceback.format_exception(exception))
    return text


class LogErrors(logging.Handler):
    """Records log records at ERROR or above that carry an exception (``log.exception``)."""

    def __init__(self, loggers: tuple[str, ...] = BROKER_LOGGERS) -> None:
        super().__init__(logging.ERROR)
        self._loggers = loggers
        self._records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self._records.append(record)

    def __enter__(self) -> LogErrors:
        for name in self._loggers:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for name in self._loggers:
            logging.getLogger(name).removeHandler(self)

    def take(self) -> list[str]:
        taken, self._records = self._records, []
        formatter = logging.Formatter("%(levelname)s %(name)s: %(message)s")
        return [f"logged by the broker: {formatter.format(record)}" for record in taken]


def fail_if_any(errors: list[str], remedy: str = "") -> None:
    """Fail the test in progress (from a fixture's teardown) listing ``errors``."""
    if errors:
        header = f"{len(errors)} error(s) escaped during the test{remedy}:"
        pytest.fail("\n\n".join([header, *errors]), pytrace=False)
