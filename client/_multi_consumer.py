"""Pattern consumers: which topics of a namespace a regex names, and the periodic check that
subscribes the consumer to topics created after it (Pulsar's PatternMultiTopicsConsumerImpl).

The topics come from the ``GetTopicsOfNamespace`` call (Pulsar's CommandGetTopicsOfNamespace).
As in Pulsar's ``TopicList.filterTopics``, the regex is matched, whole, against a topic's name
without its ``persistent://`` scheme, and a partitioned topic's partitions count as the
partitioned topic (the consumer subscribes to all of them).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from ._errors import InvalidTopicName, PulsarError

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
        names = {_PARTITION.sub(r"\1", t) for t in topics if t.startswith(_SCHEME)}
        return sorted(n for n in names if self.regex.fullmatch(n[len(_SCHEME) :]))


class PatternWatcher:
    """Re-lists a pattern's namespace every ``period_s`` and subscribes to new matches.

    ``list_topics`` answers a namespace's topic names; ``subscribe`` starts streams on the
    given topics for the consumer, which owns this watcher and closes it first. A failed
    check (broker away, a topic refusing the subscription) is logged and tried again at the
    next period.
    """

    def __init__(
        self,
        pattern: TopicsPattern,
        period_s: float,
        list_topics: Callable[[str], Awaitable[list[str]]],
        subscribe: Callable[[list[str]], Awaitable[None]],
        subscribed: Callable[[], set[str]],
    ) -> None:
        if period_s <= 0:
            raise ValueError("pattern_auto_discovery_period must be above 0 seconds")
        self._pattern = pattern
        self._period_s = period_s
        self._list_topics = list_topics
        self._subscribe = subscribe
        self._subscribed = subscribed
        self._task: asyncio.Task[None] | None = None

    async def matching(self) -> list[str]:
        """The topics matching now."""
        return self._pattern.matching(await self._list_topics(self._pattern.namespace))

    def start(self) -> None:
        """Begin checking every period."""
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def check(self) -> list[str]:
        """Subscribe to the matching topics not subscribed yet; return them."""
        subscribed = self._subscribed()
        new = [
            t
            for t in await self.matching()
            if t not in subscribed and not any(s.startswith(f"{t}-partition-") for s in subscribed)
        ]
        if new:
            await self._subscribe(new)
        return new

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
                new = await self.check()
            except PulsarError as exc:
                log.warning("pattern %s: topic discovery failed: %s", self._pattern.regex, exc)
                continue
            if new:
                log.info("pattern %s: subscribed to %s", self._pattern.regex.pattern, new)
