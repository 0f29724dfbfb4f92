"""Pattern consumers: which topics of a namespace a regex names, and the periodic check that
subscribes the consumer to topics created after it and lets go of topics that are gone
(Pulsar's PatternMultiTopicsConsumerImpl: onTopicsAdded / onTopicsRemoved).

The topics come from the ``GetTopicsOfNamespace`` call (Pulsar's CommandGetTopicsOfNamespace).
As in Pulsar's ``TopicList.filterTopics``, the regex is matched, whole, against a topic's name
without its ``persistent://`` scheme, and a partitioned topic's partitions count as the
partitioned topic (the consumer subscribes to all of them).
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol, TypeVar

from ._errors import InvalidTopicName, PulsarException

log = logging.getLogger(__name__)

_SCHEME = "persistent://"
_PARTITION = re.compile(r"^(.*)-partition-\d+$")


@dataclass(frozen=True, slots=True)
class TopicsPattern:
    """A regex over the topics of one namespace.

    >>> p = TopicsPattern.of(re.compile("persistent://public/default/orders-.*"))
    >>> p.namespace, p.matching(["persistent://public/default/orders-eu-partition-0"])
    ('public/default', ['persistent://public/default/orders-eu'])
    """

    namespace: str
    regex: re.Pattern[str]

    @classmethod
    def of(cls, pattern: re.Pattern[str]) -> TopicsPattern:
        """Pulsar's forms: ``persistent://tenant/ns/<regex>``, ``tenant/ns/<regex>``, or a
        bare ``<regex>`` over ``public/default``."""
        text = pattern.pattern
        if "://" in text:
            if not text.startswith(_SCHEME):
                raise InvalidTopicName(f"pattern {text!r}: only persistent topics can be matched")
            text = text[len(_SCHEME) :]
        elif text.count("/") < 2:
            text = f"public/default/{text}"
        tenant, namespace, _ = text.split("/", 2)
        if not tenant or not namespace or any(c in tenant + namespace for c in ".*+?[]()\\|^$"):
            raise InvalidTopicName(
                f"pattern {pattern.pattern!r}: the tenant and namespace must be named, "
                "only the topic part may be a regex"
            )
        return cls(f"{tenant}/{namespace}", re.compile(text, pattern.flags))

    def matching(self, topics: list[str]) -> list[str]:
        """Full names of the topics (partitioned topics by their own name) that match."""
        names = {base_topic(t) for t in topics if t.startswith(_SCHEME)}
        return sorted(n for n in names if self.regex.fullmatch(n[len(_SCHEME) :]))


def base_topic(topic: str) -> str:
    """The partitioned topic a partition belongs to (a plain topic is its own)."""
    return _PARTITION.sub(r"\1", topic)


class TopicChanges(NamedTuple):
    """What one check changed: topics subscribed to, and streams let go of."""

    added: list[str]
    removed: list[str]


class PatternWatcher:
    """Re-lists a pattern's namespace every ``period_s``: subscribes to new matches and lets
    go of the topics that no longer match (deleted, or renamed out of the pattern).

    ``list_topics`` answers a namespace's topic names; ``subscribe`` starts streams on the
    given topics for the consumer, which owns this watcher and closes it first; ``forget``
    closes the consumer's streams on the given topics (partitions), as Pulsar's consumer
    closes, without unsubscribing, the consumer of a removed topic. A failed check (broker
    away, a topic refusing the subscription) is logged and tried again at the next period.
    """

    def __init__(
        self,
        pattern: TopicsPattern,
        period_s: float,
        list_topics: Callable[[str], Awaitable[list[str]]],
        subscribe: Callable[[list[str]], Awaitable[None]],
        subscribed: Callable[[], set[str]],
        forget: Callable[[list[str]], Awaitable[None]],
    ) -> None:
        if period_s <= 0:
            raise ValueError("pattern_auto_discovery_period must be above 0 seconds")
        self._pattern = pattern
        self._period_s = period_s
        self._list_topics = list_topics
        self._subscribe = subscribe
        self._subscribed = subscribed
        self._forget = forget
        self._task: asyncio.Task[None] | None = None

    async def matching(self) -> list[str]:
        """The topics matching now."""
        return self._pattern.matching(await self._list_topics(self._pattern.namespace))

    def start(self) -> None:
        """Begin checking every period."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def check(self) -> TopicChanges:
        """Subscribe to the matching topics not subscribed yet, let go of the subscribed
        streams whose topic no longer matches; return both."""
        matching = await self.matching()
        subscribed = self._subscribed()
        subscribed_bases = {base_topic(t) for t in subscribed}
        matched = set(matching)
        added = [t for t in matching if t not in subscribed and t not in subscribed_bases]
        removed = sorted(t for t in subscribed if base_topic(t) not in matched)
        if removed:
            await self._forget(removed)
        if added:
            await self._subscribe(added)
        return TopicChanges(added, removed)

    async def close(self) -> None:
        """Stop checking (a check under way is cancelled)."""
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._period_s)
            try:
                changes = await self.check()
            except PulsarException as exc:
                log.warning("pattern %s: topic discovery failed: %s", self._pattern.regex, exc)
                continue
            if changes.added:
                log.info("pattern %s: subscribed to %s", self._pattern.regex.pattern, changes.added)
            if changes.removed:
                log.info("pattern %s: let go of %s", self._pattern.regex.pattern, changes.removed)


class _Watched(Protocol):
    """What a pattern watcher needs of the consumer it keeps subscribed."""

    def subscribed_topics(self) -> set[str]: ...

    async def forget_topics(self, topics: list[str]) -> None: ...

    def watch(self, watcher: PatternWatcher) -> None: ...


W = TypeVar("W", bound=_Watched)


async def watch_pattern(
    consumer: W,
    pattern: TopicsPattern,
    period_s: float,
    list_topics: Callable[[str], Awaitable[list[str]]],
    attach: Callable[[W, list[str]], Awaitable[None]],
) -> None:
    """Subscribe ``consumer`` to the topics matching now (``attach`` starts its streams on
    them), and have it re-check every ``period_s``."""
    # Weak: the watcher's task must not keep a consumer the application dropped alive.
    ref = weakref.ref(consumer)

    async def subscribe(topics: list[str]) -> None:
        target = ref()
        if target is not None:
            await attach(target, topics)

    def subscribed() -> set[str]:
        target = ref()
        return target.subscribed_topics() if target is not None else set()

    async def forget(topics: list[str]) -> None:
        target = ref()
        if target is not None:
            await target.forget_topics(topics)

    watcher = PatternWatcher(pattern, period_s, list_topics, subscribe, subscribed, forget)
    await subscribe(await watcher.matching())
    consumer.watch(watcher)
    watcher.start()
