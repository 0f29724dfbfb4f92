"""The backlog-quota check (Pulsar's BacklogQuotaManager with BrokerService's
monitorBacklogQuota): every ``backlogQuotaCheckIntervalInSeconds``, each loaded topic's backlog
is measured against its quotas and the exceeded quota's policy applied:

- ``producer_request_hold``: the topic's producers' streams are left unread until a check finds
  the backlog under the quota (broker/topics/backlog_hold.py);
- ``producer_exception``: its producers are ended with ProducerBlockedQuotaExceededException
  (the receipts of what was stored are written first) and new ones refused while it lasts;
- ``consumer_backlog_eviction``: the slowest cursors are moved forward (acknowledged) until
  the backlog is under the quota: for size to 90% of it (Pulsar's reduction factor), for time
  past every message older than the limit. Cursors already ahead are not touched.

The size is the bytes of the entries after the slowest durable cursor's mark-delete position
(Pulsar's backlogSize, O(ledgers)); the age is that of the oldest unacknowledged message, read
from the one entry after that position (its publish time): the time limit is always measured
this way (Pulsar's preciseTimeBasedBacklogQuotaCheck; its default estimates it from ledger close
times). A time eviction finds its target by binary search over publish times (O(log entries)
reads): no check costs the event loop in proportion to the backlog, and each topic's check
yields to the loop before the next.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pulsar_grpc.broker import entry_format
from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.ledger import ManagedCursor, ManagedLedger, Position
from pulsar_grpc.broker.topics.backlog_hold import BacklogHold, QuotaState
from pulsar_grpc.broker.topics.backlog_quota import QuotaType, RetentionPolicy
from pulsar_grpc.broker.topics.periodic import PeriodicTask

log = logging.getLogger(__name__)

EVICTION_TARGET = 0.9  # Pulsar's reductionFactor: evict down to 90% of the size quota
HELD_RECHECK_S = 1.0  # how soon producers go on once the backlog is under the quota


class QuotaSubscription(Protocol):
    @property
    def durable(self) -> bool: ...

    @property
    def cursor(self) -> ManagedCursor: ...


class QuotaTopic(Protocol):
    """The port the check reaches a loaded topic through."""

    @property
    def name(self) -> str: ...

    @property
    def ledger(self) -> ManagedLedger: ...

    @property
    def backlog(self) -> BacklogHold: ...

    @property
    def subscriptions(self) -> Mapping[str, QuotaSubscription]: ...

    def backlog_size(self) -> int: ...

    def end_producers(self, error: BrokerError) -> None: ...


@dataclass(frozen=True, slots=True)
class Measure:
    size: int  # bytes after the slowest durable cursor
    age_s: float  # age of the oldest unacknowledged message (0: none)
    slowest: str | None  # that cursor's subscription

    def of(self, kind: QuotaType) -> float:
        return self.size if kind is QuotaType.DESTINATION_STORAGE else self.age_s


def _durable_cursors(topic: QuotaTopic) -> dict[str, ManagedCursor]:
    return {n: s.cursor for n, s in topic.subscriptions.items() if s.durable}


async def measure(topic: QuotaTopic, now_ms: int) -> Measure:
    cursors = _durable_cursors(topic)
    if not cursors:
        return Measure(0, 0.0, None)
    slowest = min(cursors, key=lambda n: cursors[n].mark_delete_position)
    oldest = topic.ledger.next_position(cursors[slowest].mark_delete_position)
    entry = await topic.ledger.read_entry(oldest)
    age_s = 0.0
    if entry is not None:
        age_s = max(0.0, (now_ms - entry_format.info(entry.data).publish_time) / 1000)
    return Measure(topic.backlog_size(), age_s, slowest)


def exceeded(topic: QuotaTopic, found: Measure) -> list[QuotaType]:
    """The kinds whose quota ``found`` is over (size: at or over it, as Pulsar)."""
    quotas = topic.backlog.quotas
    over = []
    for kind in QuotaType:
        limit = quotas.of(kind).limit(kind)
        if limit <= 0:
            continue
        value = found.of(kind)
        if (value >= limit) if kind is QuotaType.DESTINATION_STORAGE else (value > limit):
            over.append(kind)
    return over


def size_eviction_target(ledger: ManagedLedger, target_bytes: int) -> Position | None:
    """The position after which the entries hold at most ``target_bytes`` (by the same
    per-ledger average as the backlog size), O(ledgers); None when none need evicting."""
    kept = 0
    for info in reversed(ledger.ledgers):
        if info.entries == 0:
            continue
        if kept + info.size <= target_bytes:
            kept += info.size
            continue
        keep = (target_bytes - kept) * info.entries // info.size
        return Position(info.ledger_id, info.entries - keep - 1)
    return None


async def time_eviction_target(ledger: ManagedLedger, cutoff_ms: int) -> Position | None:
    """The newest entry published at or before ``cutoff_ms`` (binary search)."""
    return await ledger.find_newest_matching(
        lambda data: entry_format.info(data).publish_time <= cutoff_ms
    )


async def evict(topic: QuotaTopic, kind: QuotaType, now_ms: int) -> int:
    """Move every cursor behind the target to it; the number moved."""
    quota = topic.backlog.quotas.of(kind)
    if kind is QuotaType.DESTINATION_STORAGE:
        target = size_eviction_target(topic.ledger, int(quota.limit_size * EVICTION_TARGET))
    else:
        target = await time_eviction_target(topic.ledger, now_ms - quota.limit_time * 1000)
    if target is None:
        return 0
    behind = [c for c in _durable_cursors(topic).values() if c.mark_delete_position < target]
    await asyncio.gather(*(c.mark_delete(target) for c in behind))
    if behind:
        log.info(
            "%s over its %s quota: %d cursors moved to %s",
            topic.name,
            kind.value,
            len(behind),
            target,
        )
    return len(behind)


async def check_topic(topic: QuotaTopic) -> None:
    """Measure ``topic`` and apply the policy of each quota it is over."""
    hold = topic.backlog
    now_ms = time.time_ns() // 1_000_000
    found = await measure(topic, now_ms)
    over = exceeded(topic, found)
    evicting = [
        k for k in over if hold.quotas.of(k).policy is RetentionPolicy.CONSUMER_BACKLOG_EVICTION
    ]
    for kind in evicting:
        if await evict(topic, kind, now_ms):
            hold.evictions[kind] += 1
    if evicting:
        found = await measure(topic, now_ms)
        over = [k for k in exceeded(topic, found) if k not in evicting]
    hold.oldest_age_s = int(found.age_s)
    hold.oldest_subscription = found.slowest
    policies = {k: hold.quotas.of(k).policy for k in over}
    refusing = [k for k, p in policies.items() if p is RetentionPolicy.PRODUCER_EXCEPTION]
    holding = [k for k, p in policies.items() if p is RetentionPolicy.PRODUCER_REQUEST_HOLD]
    if refusing:
        hold.enter(QuotaState.REFUSING, refusing[0])
        topic.end_producers(hold.refusal())
    elif holding:
        hold.enter(QuotaState.HOLDING, holding[0])
    else:
        hold.enter(QuotaState.WITHIN, None)


class BacklogQuotaCheck(PeriodicTask):
    """The periodic check: one per broker (started only with backlogQuotaCheckEnabled).
    Every topic is checked every ``interval_s``; a topic that holds or refuses its producers
    is checked again every :data:`HELD_RECHECK_S` as well, so they go on soon after the
    backlog drains (Pulsar's held producers retry on their own backoff, and each retry
    measures the backlog live)."""

    def __init__(self, topics: Callable[[], Sequence[QuotaTopic]], interval_s: float) -> None:
        super().__init__(min(interval_s, HELD_RECHECK_S))
        self._topics = topics
        self._every = interval_s
        self._last_all = time.monotonic()

    async def check_all(self) -> None:
        await self._check(self._topics())

    async def _check(self, topics: Sequence[QuotaTopic]) -> None:
        for topic in topics:
            await asyncio.sleep(0)  # one topic at a time: the loop serves others in between
            try:
                await check_topic(topic)
            except BrokerError as exc:  # closed meanwhile, storage away: the next tick retries
                log.warning("backlog quota of %s not checked: %s", topic.name, exc.message)
            except Exception:
                log.exception("backlog quota check of %s failed", topic.name)

    async def tick(self) -> None:
        now = time.monotonic()
        if now - self._last_all >= self._every:
            self._last_all = now
            await self.check_all()
        else:
            over = [t for t in self._topics() if t.backlog.state is not QuotaState.WITHIN]
            await self._check(over)
