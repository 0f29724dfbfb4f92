"""Dynamic broker configuration (Pulsar's "dynamic config"): properties an admin changes at run
time, on every broker of the cluster at once, without a restart.

Pulsar's model: the ServiceConfiguration fields marked ``@FieldContext(dynamic = true)`` may be
overridden in the metadata store node ``/admin/configuration``, a JSON map of property name to
its text (as broker.conf would give it). Every broker reads the node when it starts and
watches it; an override replaces the broker.conf value, and removing it brings that value back.
Here the dynamic properties are the rate limits and maxNumPartitionsPerPartitionedTopic (all
of them dynamic in Pulsar too), applied live: the broker-wide throttles and every loaded topic's
limits are retuned at once, so open producer streams and dispatchers feel a change within a
notification's delay; the partitions' limit holds for the next create or update.

A change is an event, not a write into the broker's configuration: the ServiceConfiguration
read at start stays as loaded, and each listener is called with a new one, the broker.conf
values with the overrides in effect; its owners (the topic registry, the namespace resources)
build their own settings from it and apply them, so nothing else writes what they read.

A value is checked when written (its type, minimum and maximum, as at load: a bad one is
refused with 412, as Pulsar refuses an invalid dynamic-config value) and again when read, since
another tool may have written the node: a bad value there is logged and the broker.conf value holds.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from pulsar_grpc.broker.config import PROPERTY_NAMES, ServiceConfiguration, parse_checked
from pulsar_grpc.broker.errors import MetadataError, PreconditionFailedError
from pulsar_grpc.broker.metadata import MetadataStore
from pulsar_grpc.broker.metadata.store import (
    BadVersionError,
    Notification,
    NotificationType,
    SessionEvent,
)

log = logging.getLogger(__name__)

DYNAMIC_CONFIG_PATH = "/admin/configuration"  # Pulsar's BROKER_SERVICE_CONFIGURATION_PATH

# The rate properties the broker reads, and the partitions' limit; Pulsar marks each dynamic.
DYNAMIC_PROPERTIES: frozenset[str] = frozenset(
    {
        "maxPublishRatePerTopicInMessages",
        "maxPublishRatePerTopicInBytes",
        "brokerPublisherThrottlingMaxMessageRate",
        "brokerPublisherThrottlingMaxByteRate",
        "dispatchThrottlingRatePerTopicInMsg",
        "dispatchThrottlingRatePerTopicInByte",
        "dispatchThrottlingRatePerSubscriptionInMsg",
        "dispatchThrottlingRatePerSubscriptionInByte",
        "dispatchThrottlingRateInMsg",
        "dispatchThrottlingRateInByte",
        # Read at each create or update of a partitioned topic; dynamic in Pulsar too.
        "maxNumPartitionsPerPartitionedTopic",
    }
)

# Shown as this in the runtime configuration: credentials, or where to find them.
SECRET_PROPERTIES = frozenset(
    {"tokenSecretKey", "basicAuthConf", "scramAuthConf", "brokerClientAuthenticationParameters"}
)
MASK = "******"
# The password of a URL-valued property (ledgerStorageUrl=postgresql://user:password@host/db).
_URL_PASSWORD = re.compile(r"(?P<head>://[^/@:\s]*:)[^/@\s]*(?P<at>@)")

_WRITE_ATTEMPTS = 10
_NOTIFIED_BY = frozenset(
    {NotificationType.CREATED, NotificationType.MODIFIED, NotificationType.DELETED}
)


class DynamicConfigState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"  # the broker is closing: notifications are not followed any more


def check_dynamic(name: str, raw: str) -> Any:
    """The typed value of ``raw`` for dynamic property ``name``; 412 (Pulsar's answer) for a
    property that is not dynamic or a value that is not valid."""
    check_is_dynamic(name, "update")
    try:
        return parse_checked(name, raw)
    except ValueError as exc:
        raise PreconditionFailedError(f"Invalid dynamic-config value: {exc}") from None


def check_is_dynamic(name: str, action: str) -> None:
    if name not in DYNAMIC_PROPERTIES:
        raise PreconditionFailedError(
            f"Can't {action} non-dynamic configuration: {name[:80]!r} is not a dynamic "
            f"property (dynamic: {', '.join(sorted(DYNAMIC_PROPERTIES))})"
        )


def parse_node(value: bytes) -> dict[str, str]:
    """The node's map; what is not a map of strings (another tool wrote it) is left out."""
    try:
        node = json.loads(value or b"{}")
    except ValueError:
        log.warning("%s is not JSON: dynamic configuration ignored", DYNAMIC_CONFIG_PATH)
        return {}
    if not isinstance(node, dict):
        log.warning("%s is not a JSON object: ignored", DYNAMIC_CONFIG_PATH)
        return {}
    return {k: v for k, v in node.items() if isinstance(v, str)}


def as_text(value: Any) -> str:
    """A property's value as broker.conf would write it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(as_text(item) for item in value)
    return str(value)


# Told the configuration in effect after a dynamic change; applies what it owns of it.
ConfigListener = Callable[[ServiceConfiguration], None]


class DynamicConfig:
    """The overrides of this broker's configuration (``config``, as loaded: never written).
    ``effective`` is the configuration in effect; each of ``listeners`` is called with it
    after a dynamic property changed."""

    def __init__(
        self,
        config: ServiceConfiguration,
        store: MetadataStore,
        listeners: Sequence[ConfigListener],
    ) -> None:
        self._config = config  # broker.conf's values: what a removed override falls back to
        self._store = store
        self._listeners = tuple(listeners)
        self.effective = config
        self.overrides: dict[str, str] = {}  # the ones applied now
        self._state = DynamicConfigState.OPEN
        # One read-and-apply at a time, in the order the notifications came: the last applies
        # the newest node.
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        store.register_listener(self._on_notification)
        store.register_session_listener(self._on_session_event)

    async def start(self) -> None:
        """Apply the overrides stored now (and watch the node from then on)."""
        await self._reload()

    async def close(self) -> None:
        self._state = DynamicConfigState.CLOSED
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ------------------------------------------------------------ admin

    async def update(self, name: str, raw: str) -> None:
        """Store an override for every broker; this one applies it before returning."""
        check_dynamic(name, raw)
        await self._write(lambda node: node.__setitem__(name, raw))

    async def delete(self, name: str) -> None:
        """Remove an override (none set: nothing to do, as Pulsar)."""
        check_is_dynamic(name, "delete")
        await self._write(lambda node: node.pop(name, None))

    async def stored(self) -> dict[str, str]:
        """The overrides in the store now (Pulsar's GET .../configuration/values)."""
        found = await self._store.get(DYNAMIC_CONFIG_PATH)
        return {} if found is None else parse_node(found.value)

    def runtime(self) -> dict[str, str]:
        """Every property's value in effect on this broker, secrets masked."""
        return {
            name: MASK
            if name in SECRET_PROPERTIES
            else _without_password(as_text(getattr(self.effective, name)))
            for name in PROPERTY_NAMES
        }

    async def _write(self, change: Callable[[dict[str, str]], Any]) -> None:
        """Read, change, write back if nobody wrote meanwhile (else again), then apply."""
        for _ in range(_WRITE_ATTEMPTS):
            found = await self._store.get(DYNAMIC_CONFIG_PATH)
            node = {} if found is None else parse_node(found.value)
            change(node)
            try:
                await self._store.put(
                    DYNAMIC_CONFIG_PATH,
                    json.dumps(node).encode(),
                    -1 if found is None else found.version,
                )
            except BadVersionError:
                continue
            await self._reload()
            return
        raise MetadataError("dynamic configuration: too many concurrent changes, try again")

    # ------------------------------------------------------------ following the node

    async def _reload(self) -> None:
        async with self._lock:
            found = await self._store.get(DYNAMIC_CONFIG_PATH)  # re-arms the watch
            if self._state is DynamicConfigState.OPEN:
                self._apply({} if found is None else parse_node(found.value))

    def _apply(self, node: dict[str, str]) -> None:
        values = {name: getattr(self._config, name) for name in DYNAMIC_PROPERTIES}
        applied: dict[str, str] = {}
        for name, raw in node.items():
            if name not in DYNAMIC_PROPERTIES:
                log.warning("dynamic configuration: %r is not a dynamic property, ignored", name)
                continue
            try:
                values[name] = parse_checked(name, raw)
            except ValueError as exc:
                log.warning("dynamic configuration ignored: %s", exc)
                continue
            applied[name] = raw
        self.overrides = applied
        changed = sorted(n for n, v in values.items() if getattr(self.effective, n) != v)
        if changed:
            self.effective = dataclasses.replace(self._config, **values)
            log.info(
                "dynamic configuration: %s",
                ", ".join(f"{n}={as_text(values[n])}" for n in changed),
            )
            for listener in self._listeners:
                listener(self.effective)

    def _on_notification(self, notification: Notification) -> None:
        if notification.path == DYNAMIC_CONFIG_PATH and notification.type in _NOTIFIED_BY:
            self._spawn_reload()

    def _on_session_event(self, event: SessionEvent) -> None:
        # Watches of a lost session are gone, and a change may have been missed meanwhile.
        if event in (SessionEvent.RECONNECTED, SessionEvent.SESSION_REESTABLISHED):
            self._spawn_reload()

    def _spawn_reload(self) -> None:
        if self._state is DynamicConfigState.CLOSED:
            return
        task = asyncio.get_running_loop().create_task(self._follow())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self) -> None:
        try:
            await self._reload()
        except MetadataError as exc:
            # The store is away: the session's return reads the node again.
            log.warning("dynamic configuration not re-read: %s", exc.message)


def _without_password(text: str) -> str:
    """``text`` with the password of any URL in it masked."""
    return _URL_PASSWORD.sub(rf"\g<head>{MASK}\g<at>", text)
