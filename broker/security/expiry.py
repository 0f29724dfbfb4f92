"""Ending long-lived calls whose credentials expire (Pulsar's authenticationRefreshCheckSeconds).

A call is authenticated once, when it starts; a Produce or Consume stream may then run for
days, long after the token that opened it expired. As Pulsar's ServerCnx does with
``refreshAuthenticationCredentials``, the broker looks again every
authenticationRefreshCheckSeconds (default 60) and ends each stream whose credentials have
expired with :class:`AuthenticationError`; a client with a token supplier reconnects with a
fresh token (Pulsar's client answers an AuthChallenge instead: gRPC has no way to ask a client
for new headers on an open call, so the stream is reopened).

What expires is known at authentication time (:attr:`Authenticated.expires_at`: a token's
``exp``, a role token's expiry), so a check only compares times; it never re-runs a provider.
One check serves a protocol handler: a single task, running only while some stream with an
expiry is open. Streams whose credentials never expire (or a broker without authentication)
are not watched and cost nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from pulsar_grpc.broker.errors import AuthenticationError

log = logging.getLogger(__name__)

# Ends a stream with the error: a producer's ``end``, a consumer transport's ``close``.
EndStream = Callable[[AuthenticationError], None]


@dataclass(frozen=True, slots=True)
class _Watched:
    expires_at: float  # seconds since the epoch
    end: EndStream


class CredentialExpiryCheck:
    """Every ``interval_s``, ends the watched streams whose credentials have expired.

    ``clock`` gives seconds since the epoch, as token times are; a unit test passes its own.
    """

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.time) -> None:
        if interval_s <= 0:
            raise ValueError("the credential check interval must be positive")
        self.interval_s = interval_s
        self._clock = clock
        self._watched: dict[int, _Watched] = {}
        self._keys = itertools.count()
        self._task: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """Streams watched now."""
        return len(self._watched)

    def watch(self, expires_at: float | None, end: EndStream) -> Callable[[], None]:
        """Watch a stream until the returned function is called (when the stream ends for
        any reason); ``end`` is called once, at the first check after ``expires_at``.
        Credentials without an expiry (None) are not watched at all."""
        if expires_at is None:
            return _nothing
        key = next(self._keys)
        self._watched[key] = _Watched(expires_at, end)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())

        def unwatch() -> None:
            self._watched.pop(key, None)

        return unwatch

    def check(self) -> int:
        """End the streams whose credentials have expired by now; how many were ended."""
        now = self._clock()
        expired = [key for key, w in self._watched.items() if w.expires_at <= now]
        for key in expired:
            watched = self._watched.pop(key)
            watched.end(expired_error(watched.expires_at, self.interval_s))
        if expired:
            log.info("ended %d stream(s) whose credentials expired", len(expired))
        return len(expired)

    async def _run(self) -> None:
        """Check at a fixed rate while anything is watched; then the task ends."""
        while self._watched:
            await asyncio.sleep(self.interval_s)
            self.check()

    async def close(self) -> None:
        """Stop checking (the broker is shutting down; its streams are ending anyway)."""
        self._watched.clear()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def _nothing() -> None:
    """Unwatching a stream that was never watched."""


def expired_error(expires_at: float, interval_s: float) -> AuthenticationError:
    """What a client whose stream's credentials expired is told."""
    when = datetime.fromtimestamp(expires_at, UTC).isoformat(timespec="seconds")
    return AuthenticationError(
        f"authentication credentials expired at {when} (checked every "
        f"authenticationRefreshCheckSeconds={interval_s:g}): reconnect with fresh credentials"
    )
