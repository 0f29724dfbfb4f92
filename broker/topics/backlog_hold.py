"""A topic's side of its backlog quotas: the quotas in force, what the last check found, and
the hold producers wait on while a producer_request_hold quota is exceeded.

The check (broker/topics/backlog_quota_check.py) is the one writer of the state; the produce
path only reads it: a new producer is refused while a producer_exception quota is exceeded
(ProducerBlockedQuotaExceededException, as Pulsar's ServerCnx), and a producer's stream is left
unread while a producer_request_hold quota is (the same stop as the rate limits': HTTP/2 flow
control holds the client back, nothing is refused, dropped or reordered), until a check finds
the backlog under the quota again or the quota is raised or removed.
"""

from __future__ import annotations

import asyncio
import enum

from pulsar_grpc.broker.errors import BacklogQuotaExceededError, ServerError
from pulsar_grpc.broker.topics.backlog_quota import (
    UNLIMITED,
    QuotaType,
    RetentionPolicy,
    TopicQuotas,
)


class QuotaState(enum.Enum):
    """What the topic's producers meet."""

    WITHIN = "within"  # under every quota (or over one whose policy evicts)
    HOLDING = "holding"  # over a producer_request_hold quota: streams are not read
    REFUSING = "refusing"  # over a producer_exception quota: producers are ended and refused


class BacklogHold:
    """One per topic."""

    def __init__(self) -> None:
        self.quotas: TopicQuotas = UNLIMITED
        self.state = QuotaState.WITHIN
        self.breached: QuotaType | None = None  # the quota the state comes from
        # What the last check measured (Pulsar's oldestBacklogMessageAgeSeconds, -1: none yet,
        # and oldestBacklogMessageSubscriptionName).
        self.oldest_age_s = -1
        self.oldest_subscription: str | None = None
        self.evictions = {kind: 0 for kind in QuotaType}  # checks that moved cursors, per kind
        # Set (and replaced) when the hold ends; made by the first producer held.
        self._released: asyncio.Event | None = None

    def set_quotas(self, quotas: TopicQuotas) -> None:
        """New quotas (a policy changed): a breach of a quota now removed ends at once; a
        breach of a changed one is measured again at the next check."""
        self.quotas = quotas
        if self.breached is not None and quotas.of(self.breached).limit(self.breached) <= 0:
            self.enter(QuotaState.WITHIN, None)

    def enter(self, state: QuotaState, breached: QuotaType | None) -> None:
        self.state, self.breached = state, breached
        if state is not QuotaState.HOLDING:
            released, self._released = self._released, None
            if released is not None:
                released.set()

    def refusal(self, kind: QuotaType | None = None) -> BacklogQuotaExceededError:
        """The error producers are ended and refused with (``kind``: the quota exceeded,
        by default the one the state comes from)."""
        kind = kind or self.breached
        return BacklogQuotaExceededError(
            ServerError.ProducerBlockedQuotaExceededException,
            f" ({kind.value if kind else 'backlog'} quota)",
        )

    def check_admission(self, backlog_size: int) -> None:
        """Refuse a new producer while a producer_exception quota is exceeded: the state the
        last check found, or the size measured now (Pulsar checks it at creation too)."""
        if self.state is QuotaState.REFUSING:
            raise self.refusal()
        size = self.quotas.size
        if (
            size.policy is RetentionPolicy.PRODUCER_EXCEPTION
            and 0 < size.limit_size <= backlog_size
        ):
            raise self.refusal(QuotaType.DESTINATION_STORAGE)

    def stats(self) -> dict[str, object]:
        """Pulsar's TopicStats backlog-quota fields: the quotas in force and what the last
        check measured."""
        return {
            "backlogQuotaLimitSize": self.quotas.size.limit_size,
            "backlogQuotaLimitTime": self.quotas.time.limit_time,
            "oldestBacklogMessageAgeSeconds": self.oldest_age_s,
            "oldestBacklogMessageSubscriptionName": self.oldest_subscription,
            "sizeBasedBacklogQuotaExceededEvictionCount": self.evictions[
                QuotaType.DESTINATION_STORAGE
            ],
            "timeBasedBacklogQuotaExceededEvictionCount": self.evictions[QuotaType.MESSAGE_AGE],
        }

    async def wait_released(self) -> None:
        """Return once no producer_request_hold quota is exceeded (at once when none is)."""
        while self.state is QuotaState.HOLDING:
            if self._released is None:
                self._released = asyncio.Event()
            await self._released.wait()
