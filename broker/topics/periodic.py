"""A broker task that does one thing every interval until it is closed (the stats task, the
backlog-quota check): one place for starting, stopping and surviving a failed round."""

from __future__ import annotations

import asyncio
import contextlib
import logging

log = logging.getLogger(__name__)


class PeriodicTask:
    """Runs :meth:`tick` every ``interval_s`` seconds from :meth:`start` to :meth:`close`; a
    round that fails is logged and the next one runs all the same."""

    def __init__(self, interval_s: float) -> None:
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def tick(self) -> None:
        """One round."""
        raise NotImplementedError

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.tick()
            except Exception:  # a bug in one round must not stop the task for good
                log.exception("%s: a round failed", type(self).__name__)
