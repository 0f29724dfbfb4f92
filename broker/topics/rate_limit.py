"""Rate limits as token buckets: pure state, no I/O, no tasks (the caller waits).

A :class:`Throttle` holds one limit (messages and bytes per period, Pulsar's PublishRate and
DispatchRate) and is shared by everything that limit covers: a topic's producers, a topic's
subscriptions, the whole broker. Work is counted after it is done (:meth:`Throttle.consume`
may drive a bucket into debt, as Pulsar's AsyncTokenBucket does), and the caller then holds
back for :meth:`Throttle.delay_s`: the protocol handler stops reading the producer's stream,
the dispatcher stops reading entries. Nothing is refused or dropped.

Why buckets and not Pulsar's older fixed one-second windows: a bucket refilled continuously
gives the precise mode's accuracy (preciseTopicPublishRateLimiterEnable) at no extra cost, and
a debt carries over, so a large batch taken at once is paid back before anything more. A full
bucket holds one period's worth: that is the burst an idle producer may send at once.

A dispatch rate may be relative to the publish rate (Pulsar's ``relativeToPublishRate``): its
throttle then allows, per period, the topic's measured publish rate plus the configured rate
(Pulsar's DispatchRateLimiter: ``lastUpdatedAvgPublishRateInMsg + dispatchThrottlingRateInMsg``),
re-measured every stats interval (statsUpdateFrequencyInSecs), as Pulsar re-reads it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``messages`` and ``bytes`` allowed per ``period_s`` seconds; 0 (or less) = no limit of
    that kind, as in Pulsar. ``relative_to_publish``: the topic's current publish rate is
    added to each limited kind (a dispatch rate that keeps up with the producers)."""

    messages: int = 0
    bytes: int = 0
    period_s: int = 1
    relative_to_publish: bool = False

    @property
    def unlimited(self) -> bool:
        return self.messages <= 0 and self.bytes <= 0


UNLIMITED = RateLimit()


class Kind(enum.Enum):
    """What a throttle counts; a delay names the kind that caused it (the stats count each)."""

    MESSAGES = "msg"
    BYTES = "bytes"


class TokenBucket:
    """``per_period`` tokens refilled evenly over ``period_s``; holds at most one period's
    worth and may go into debt."""

    def __init__(self, per_period: int, period_s: int, now: float) -> None:
        self.rate = per_period / period_s
        self.capacity = float(per_period)
        self._tokens = self.capacity
        self._at = now

    def retune(self, per_period: int, period_s: int, now: float) -> None:
        """A new rate from now on: tokens earned so far are kept (at most the new capacity),
        a debt too, which a higher rate pays back sooner."""
        self._refill(now)
        self.rate = per_period / period_s
        self.capacity = float(per_period)
        self._tokens = min(self._tokens, self.capacity)

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
            self._at = now

    def tokens(self, now: float) -> float:
        self._refill(now)
        return self._tokens

    def consume(self, n: int, now: float) -> None:
        self._refill(now)
        self._tokens -= n

    def wait_s(self, now: float, need: float = 0.0) -> float:
        """Seconds until the bucket holds ``need`` tokens (0: out of debt)."""
        missing = need - self.tokens(now)
        return missing / self.rate if missing > 0 else 0.0


# (messages/s, bytes/s) published on a topic now: what a relative limit adds to its own.
PublishRate = Callable[[], tuple[float, float]]

# How often a relative limit re-reads the publish rate (the meter changes once a second).
RELATIVE_REFRESH_S = 1.0


class Throttle:
    """One limit and the buckets that enforce it; :meth:`update` changes it live.

    ``publish_rate`` is what a limit relative to the publish rate follows; a throttle without
    one applies such a limit as it is (the broker-wide rates have no topic to follow)."""

    def __init__(
        self,
        limit: RateLimit = UNLIMITED,
        clock: Clock = time.monotonic,
        publish_rate: PublishRate | None = None,
    ) -> None:
        self._clock = clock
        self._publish_rate = publish_rate
        self.limit = UNLIMITED
        self._buckets: dict[Kind, TokenBucket] = {}
        self._followed_at = float("-inf")  # when a relative limit last read the publish rate
        self.update(limit)

    @property
    def _relative(self) -> bool:
        return self.limit.relative_to_publish and self._publish_rate is not None

    def update(self, limit: RateLimit) -> None:
        self.limit = limit
        self._retune(self._clock())

    def effective(self) -> RateLimit:
        """The limit applied now: a relative one with the publish rate added."""
        limit = self.limit
        if not self._relative:
            return limit
        assert self._publish_rate is not None
        msg_rate, byte_rate = self._publish_rate()
        return RateLimit(
            messages=limit.messages + int(msg_rate) if limit.messages > 0 else 0,
            bytes=limit.bytes + int(byte_rate) if limit.bytes > 0 else 0,
            period_s=limit.period_s,
        )

    def _follow(self, now: float) -> None:
        """A relative limit re-reads the publish rate once it may have changed."""
        if self._relative and now - self._followed_at >= RELATIVE_REFRESH_S:
            self._retune(now)

    def _retune(self, now: float) -> None:
        limit = self.effective()
        self._followed_at = now
        for kind, per_period in ((Kind.MESSAGES, limit.messages), (Kind.BYTES, limit.bytes)):
            bucket = self._buckets.get(kind)
            if per_period <= 0:
                self._buckets.pop(kind, None)
            elif bucket is None:
                self._buckets[kind] = TokenBucket(per_period, limit.period_s, now)
            else:
                bucket.retune(per_period, limit.period_s, now)

    def consume(self, messages: int, nbytes: int) -> None:
        if not self._buckets:
            return
        now = self._clock()
        self._follow(now)
        for kind, n in ((Kind.MESSAGES, messages), (Kind.BYTES, nbytes)):
            bucket = self._buckets.get(kind)
            if bucket is not None:
                bucket.consume(n, now)

    def delay(self, need_one: bool = False) -> tuple[float, Kind | None]:
        """How long to hold back, and which kind is over its limit (None: not held).

        ``need_one``: wait until at least one message's (one byte's) worth is available, which
        is what a reader that takes work in chunks needs; else only until out of debt."""
        now = self._clock()
        self._follow(now)
        longest, cause = 0.0, None
        for kind, bucket in self._buckets.items():
            wait = bucket.wait_s(now, 1.0 if need_one else 0.0)
            if wait > longest:
                longest, cause = wait, kind
        return longest, cause

    def available(self, kind: Kind) -> float | None:
        """Tokens of ``kind`` available now; None when that kind is not limited."""
        now = self._clock()
        self._follow(now)
        bucket = self._buckets.get(kind)
        return None if bucket is None else bucket.tokens(now)
