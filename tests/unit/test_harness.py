"""The harness itself: errors that escape where a test's assertions cannot see them fail that
test, and ``eventually`` waits for a condition and reports what it waited for.

The failing tests run in a separate pytest process (pytester), with this suite's conftest, so
their failures are asserted on here and never fail this suite.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.escaped import LoopErrors
from tests.waiting import eventually, eventually_sync

ROOT = Path(__file__).resolve().parents[2]

INNER_TESTS = """
import asyncio
import gc
import logging

import pytest


def test_callback_raising_on_the_broker_loop(broker):
    broker.loop.call_soon_threadsafe(lambda: 1 / 0)
    broker.run(asyncio.sleep(0.05))


def test_task_left_running_on_the_broker_loop(broker):
    broker.loop.call_soon_threadsafe(lambda: broker.loop.create_task(asyncio.sleep(3600)))
    broker.run(asyncio.sleep(0))


async def test_task_exception_never_retrieved_on_the_test_loop():
    async def boom():
        raise ValueError("lost in a task")

    asyncio.get_running_loop().create_task(boom())
    await asyncio.sleep(0.05)


async def test_callback_raising_on_the_test_loop():
    asyncio.get_running_loop().call_soon(lambda: {}["missing"])
    await asyncio.sleep(0.05)


def log_a_swallowed_crash():
    try:
        raise RuntimeError("swallowed by a read loop")
    except RuntimeError:
        logging.getLogger("pulsar_grpc.broker.topics.dispatcher").exception("read loop failed")


def test_broker_logs_an_exception():
    log_a_swallowed_crash()


@pytest.mark.allow_broker_errors
def test_broker_logs_an_exception_on_purpose():
    log_a_swallowed_crash()


def test_error_without_traceback_is_only_a_log():
    logging.getLogger("pulsar_grpc.broker.service").error("a refused client, said plainly")


async def test_clean(broker):
    await broker.call(asyncio.sleep(0))


async def test_zz_failed_task_freed_only_after_the_test():
    gc.disable()  # the session's final collection finds it, not one in between (stays off: last)

    async def boom():
        raise ValueError("found by the collector")

    cycle = [asyncio.get_running_loop().create_task(boom())]
    cycle.append(cycle)
    await asyncio.sleep(0.05)
"""


EXPECTED = {  # inner test: (outcome, what its report must show)
    "test_callback_raising_on_the_broker_loop": ("error", "ZeroDivisionError"),
    "test_task_left_running_on_the_broker_loop": (
        "error",
        "task still running after BrokerService.close()",
    ),
    "test_task_exception_never_retrieved_on_the_test_loop": ("error", "lost in a task"),
    "test_callback_raising_on_the_test_loop": ("error", "KeyError: 'missing'"),
    "test_broker_logs_an_exception": ("error", "swallowed by a read loop"),
    "test_broker_logs_an_exception_on_purpose": ("passed", ""),
    "test_error_without_traceback_is_only_a_log": ("passed", ""),
    "test_clean": ("passed", ""),
    "test_zz_failed_task_freed_only_after_the_test": ("passed", "found by the collector"),
}


def test_escaped_errors_fail_the_test_that_let_them_escape(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The inner run starts in a temporary directory: it finds this checkout's tests package
    # through PYTHONPATH, whether or not the outer run was given one.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    )
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyprojecttoml(
        '[tool.pytest.ini_options]\nasyncio_mode = "auto"\n'
        'asyncio_default_fixture_loop_scope = "function"\n'
        'markers = ["allow_broker_errors: on purpose"]\n'
    )
    pytester.makepyfile(test_inner=INNER_TESTS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rA", timeout=120)
    output = "\n".join(result.outlines)
    outcomes: dict[str, str] = {}
    for line in result.outlines:
        word, _, rest = line.partition(" test_inner.py::")
        if rest and word in ("PASSED", "FAILED", "ERROR"):
            # A failure at teardown comes after the test's own PASSED line: the last one wins.
            outcomes[rest.split(" ")[0]] = word.lower()
    assert outcomes == {test: outcome for test, (outcome, _) in EXPECTED.items()}, output
    for test, (_, shown) in EXPECTED.items():
        assert shown in output, f"{test}: {shown!r} not in the report"
    late = output.partition("errors that escaped after their test ended")[2]
    assert "on the event loop of test_inner.py::test_zz_failed" in late, output
    assert "found by the collector" in late


async def test_eventually_returns_the_first_result_that_holds() -> None:
    started = time.monotonic()
    ready_at = started + 0.05
    assert await eventually(lambda: time.monotonic() >= ready_at and "ready") == "ready"
    assert time.monotonic() - started < 5


async def test_eventually_awaits_an_async_check_and_retries_its_assertion() -> None:
    calls = 0

    async def third_time_lucky() -> None:
        nonlocal calls
        calls += 1
        assert calls >= 3, "not yet"

    await eventually(third_time_lucky)
    assert calls == 3


async def test_eventually_says_what_it_waited_for_and_what_it_saw() -> None:
    with pytest.raises(AssertionError) as failure:
        await eventually(lambda: [], timeout=0.05)
    assert "not true within 0.05s" in str(failure.value)
    assert "lambda: []" in str(failure.value) and "last result: []" in str(failure.value)

    def never() -> None:
        raise AssertionError("still 3 in the backlog")

    with pytest.raises(AssertionError, match=r"never .*still 3 in the backlog"):
        await eventually(never, timeout=0.05)


def test_eventually_sync_polls_without_a_loop() -> None:
    values = iter([0, 0, 7])
    assert eventually_sync(lambda: next(values)) == 7
    with pytest.raises(AssertionError, match="ready"):
        eventually_sync(lambda: False, timeout=0.05, what="ready")


async def test_eventually_does_not_swallow_other_errors() -> None:
    empty: dict[str, int] = {}
    with pytest.raises(KeyError):
        await eventually(lambda: empty["missing"])


def test_a_grpc_completion_forwarded_to_a_closed_loop_is_not_recorded() -> None:
    """The one tolerated context (see ``is_grpc_completion_for_a_closed_loop``); a different
    error from the same callback, or the same error from elsewhere, is still recorded."""
    errors = LoopErrors("a test loop")
    loop = errors.install(asyncio.new_event_loop())
    grpc_callback = "Exception in callback PollerCompletionQueue._handle_events(<loop>)()"
    try:
        loop.call_exception_handler(
            {"message": grpc_callback, "exception": RuntimeError("Event loop is closed")}
        )
        loop.call_exception_handler({"message": grpc_callback, "exception": ValueError("bug")})
        loop.call_exception_handler(
            {
                "message": "Exception in callback f()",
                "exception": RuntimeError("Event loop is closed"),
            }
        )
        recorded = errors.check()
        assert [error.splitlines()[0] for error in recorded] == [
            f"on a test loop: {grpc_callback}",
            "on a test loop: Exception in callback f()",
        ]
        assert "ValueError: bug" in recorded[0] and "Event loop is closed" in recorded[1]
    finally:
        loop.close()
