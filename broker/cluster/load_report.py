"""The broker's load report: Pulsar's LocalBrokerData at /loadbalance/brokers/<broker id>.

Every cluster member keeps this ephemeral node, so it vanishes with the broker's session. Its
JSON uses Pulsar's field names (LocalBrokerData, ResourceUsage as {usage, limit}); `protocols`
carries each protocol handler's advertised data unparsed (PIP-41: only the handler reads it), so
a lookup on any broker can find the gRPC endpoints of a topic's owner (PIP-59).

It is rewritten as Pulsar's ModularLoadManagerImpl does: checked every
loadBalancerReportUpdateMinIntervalMillis, written when the load moved by more than
loadBalancerReportUpdateThresholdPercentage since the last write (:func:`needs_update`) or when
loadBalancerReportUpdateMaxIntervalMinutes have passed.

``lastStats`` carries each owned bundle's NamespaceBundleStats (Pulsar's field names), summed
from the bundle's loaded topics: what the leader's shedding and bundle splitting read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from pulsar_grpc.broker.cluster import advertised_listener, broker_id
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.listeners import GRPC, GRPC_TLS, HTTP, HTTPS, BindAddress, ListenerConfig
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata import (
    CreateOption,
    MetadataNotFoundError,
    MetadataStore,
    MetadataStoreError,
    SessionEvent,
    release_at_close,
)
from pulsar_grpc.broker.naming import NamespaceBundle

if TYPE_CHECKING:
    from pulsar_grpc.broker.topics import PersistentTopic

__all__ = [
    "LOADBALANCE_BROKERS_ROOT",
    "LoadReporter",
    "LoadSample",
    "needs_update",
    "percent_change",
]

log = logging.getLogger(__name__)

# Pulsar's LoadManager.LOADBALANCE_BROKERS_ROOT.
LOADBALANCE_BROKERS_ROOT = "/loadbalance/brokers"
_MB = 1024 * 1024
_MIN_CPU_WINDOW_S = 1.0


@dataclass(frozen=True)
class LoadReportPort:
    """What the load report reads of its broker, handed in by the broker service (which this
    module must not import: the service holds the reporter, and the leader's placement below
    the service reads the reports): its settings, addresses and loaded topics."""

    config: ServiceConfiguration
    listeners: ListenerConfig
    # The port each server socket really got (bound before the report is made).
    bound: Mapping[BindAddress, int]
    broker_data: Callable[[], BrokerData]
    loaded_topics: Callable[[], list[PersistentTopic]]


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """Pulsar's ResourceUsage: a usage and its limit, in the same unit."""

    usage: float
    limit: float

    def percent_usage(self) -> float:
        """Pulsar's percentUsage: 0 when the limit is unknown (0)."""
        return 100 * self.usage / self.limit if self.limit > 0 else 0.0

    def as_json(self) -> dict[str, float]:
        return {"usage": self.usage, "limit": self.limit}


@dataclass(frozen=True, slots=True)
class LoadSample:
    """What the update rule compares between the last written report and the current one."""

    max_resource_usage: float  # Pulsar's getMaxResourceUsage: the largest percentUsage / 100
    msg_rate: float  # msgRateIn + msgRateOut
    msg_throughput: float  # msgThroughputIn + msgThroughputOut
    num_bundles: int


def percent_change(old: float, new: float) -> float:
    """Pulsar's percentChange: infinite from 0 to anything else, 0 from 0 to 0."""
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return 100 * abs((old - new) / old)


def needs_update(
    last: LoadSample, current: LoadSample, seconds_since_write: float, config: ServiceConfiguration
) -> bool:
    """Pulsar's needBrokerDataUpdate: the max interval has passed, or some load moved by more
    than the threshold percentage."""
    if seconds_since_write > config.loadBalancerReportUpdateMaxIntervalMinutes * 60:
        return True
    change = max(
        percent_change(last.max_resource_usage, current.max_resource_usage),
        percent_change(last.msg_rate, current.msg_rate),
        percent_change(last.msg_throughput, current.msg_throughput),
        percent_change(last.num_bundles, current.num_bundles),
    )
    return change > config.loadBalancerReportUpdateThresholdPercentage


class SystemUsage:
    """The broker's resources from psutil, in Pulsar's units: cpu in percent of one core (limit
    100 per core) used by this broker's process (as Pulsar in a container measures its own
    cgroup: brokers sharing a host each report their own load, which is what shedding
    compares), memory in MB (this process's resident set against the machine's memory),
    bandwidth in kbit/s since the previous sample (limit: the up interfaces' speeds, 0 when
    unknown). Python has no direct memory: it is reported as 0 of 0."""

    def __init__(self) -> None:
        self._process = psutil.Process(os.getpid())
        self._cores = psutil.cpu_count() or 1
        self._cpu = (time.monotonic(), self._cpu_seconds(), 0.0)  # when, cpu time, percent
        self._net = self._net_bytes()

    def _cpu_seconds(self) -> float:
        times = self._process.cpu_times()
        return float(times.user + times.system)

    def _cpu_percent(self) -> float:
        """The process's cpu since the last measurement, over at least a second (a shorter
        window is dominated by the clock ticks cpu time is counted in: the previous value
        stands); never more than all the cores."""
        then, used, last = self._cpu
        now, used_now = time.monotonic(), self._cpu_seconds()
        if now - then < _MIN_CPU_WINDOW_S:
            return last
        percent = min(100 * (used_now - used) / (now - then), 100.0 * self._cores)
        self._cpu = (now, used_now, percent)
        return percent

    @staticmethod
    def _net_bytes() -> tuple[float, int, int]:
        counters = psutil.net_io_counters()
        return time.monotonic(), counters.bytes_recv, counters.bytes_sent

    @staticmethod
    def _nic_limit_kbps() -> float:
        stats = psutil.net_if_stats()
        return float(sum(s.speed for name, s in stats.items() if s.isup and name != "lo") * 1000)

    def sample(self) -> dict[str, ResourceUsage]:
        then, received, sent = self._net
        self._net = now, received_now, sent_now = self._net_bytes()
        elapsed = max(now - then, 1e-3)
        nic = self._nic_limit_kbps()
        return {
            "cpu": ResourceUsage(self._cpu_percent(), 100.0 * self._cores),
            "memory": ResourceUsage(
                self._process.memory_info().rss / _MB, psutil.virtual_memory().total / _MB
            ),
            "directMemory": ResourceUsage(0.0, 0.0),
            "bandwidthIn": ResourceUsage((received_now - received) * 8 / 1000 / elapsed, nic),
            "bandwidthOut": ResourceUsage((sent_now - sent) * 8 / 1000 / elapsed, nic),
        }


class LoadReporter:
    """Keeps this broker's load-report node; :meth:`start` writes it, :meth:`close` removes it."""

    def __init__(
        self,
        service: LoadReportPort,
        store: MetadataStore,
        bundles: Callable[[], list[NamespaceBundle]] = list,
    ) -> None:
        self.service = service
        self.store = store
        self.config = service.config
        self.bundles = bundles  # the bundles this broker owns (none until ownership exists)
        self.broker_id = broker_id(self.config.advertisedAddress, service.listeners, service.bound)
        self.path = f"{LOADBALANCE_BROKERS_ROOT}/{self.broker_id}"
        self._static = self._identity()
        self._system = SystemUsage()
        self._last: LoadSample | None = None
        self._last_write = 0.0
        self._task: asyncio.Task[None] | None = None
        self._recreating: set[asyncio.Task[None]] = set()  # held until done; close cancels

    def _identity(self) -> dict[str, object]:
        """The fields that do not change while the broker runs: its addresses and the
        handlers' advertised data, as read before the handlers start serving."""
        data = self.service.broker_data()
        internal = data.listeners[self.service.listeners.internal_listener_name]
        return {
            "webServiceUrl": internal.url(HTTP),
            "webServiceUrlTls": internal.url(HTTPS),
            "pulsarServiceUrl": internal.url(GRPC),
            "pulsarServiceUrlTls": internal.url(GRPC_TLS),
            "persistentTopicsEnabled": True,
            "nonPersistentTopicsEnabled": False,
            "advertisedListeners": {
                name: advertised_listener(listener) for name, listener in data.listeners.items()
            },
            "protocols": dict(data.protocols),
            "brokerVersionString": _version(),
            "loadManagerClassName": "pulsar_grpc.broker.cluster.load_report.LoadReporter",
            "startTimestamp": int(time.time() * 1000),
        }

    def report(self) -> tuple[dict[str, object], LoadSample]:
        """The current LocalBrokerData JSON (lastUpdate: now) and its sample for the rule."""
        topics = self.service.loaded_topics()
        subscriptions = [s for t in topics for s in t.subscriptions.values()]
        rate_in, rate_out, tp_in, tp_out = _rates(topics)
        usage = self._system.sample()
        bundles = self.bundles()
        last_stats = self._bundle_stats(topics, bundles)
        data: dict[str, object] = {
            **self._static,
            **{name: u.as_json() for name, u in usage.items()},
            "msgRateIn": rate_in,
            "msgRateOut": rate_out,
            "msgThroughputIn": tp_in,
            "msgThroughputOut": tp_out,
            "numTopics": len(topics),
            "numBundles": len(bundles),
            "numProducers": sum(len(t.producers) for t in topics),
            "numConsumers": sum(len(s.consumers) for s in subscriptions),
            "bundles": sorted(str(b) for b in bundles),
            "lastStats": last_stats,
            "lastUpdate": int(time.time() * 1000),
        }
        sample = LoadSample(
            max(u.percent_usage() for u in usage.values()) / 100,
            rate_in + rate_out,
            tp_in + tp_out,
            len(bundles),
        )
        return data, sample

    def _bundle_stats(
        self, topics: list[PersistentTopic], bundles: list[NamespaceBundle]
    ) -> dict[str, dict[str, float]]:
        """Pulsar's NamespaceBundleStats of each owned bundle, from its loaded topics' rates
        (those of the last stats interval)."""
        members: dict[str, list[PersistentTopic]] = {str(b): [] for b in bundles}
        for topic in topics:
            bundle = _bundle_of(topic, bundles)
            if bundle is not None:
                members[str(bundle)].append(topic)
        stats = {}
        for name, group in members.items():
            subscriptions = [s for t in group for s in t.subscriptions.values()]
            rate_in, rate_out, tp_in, tp_out = _rates(group)
            stats[name] = {
                "msgRateIn": rate_in,
                "msgRateOut": rate_out,
                "msgThroughputIn": tp_in,
                "msgThroughputOut": tp_out,
                "consumerCount": sum(len(s.consumers) for s in subscriptions),
                "producerCount": sum(len(t.producers) for t in group),
                "topics": len(group),
                # The entry cache is the broker's, not a bundle's: nothing to attribute here.
                "cacheSize": 0,
            }
        return stats

    async def start(self) -> None:
        """Create the node (replacing one a previous session of this broker left), then keep
        it fresh; a new session after a lost one creates it again."""
        await self._create()
        self.store.register_session_listener(self._on_session_event)
        self._task = asyncio.create_task(self._run(), name=f"load report {self.broker_id}")

    async def _create(self) -> None:
        data, sample = self.report()
        try:
            await self.store.delete(self.path)  # bound to a dead session: ours must own it
        except MetadataNotFoundError:
            pass
        await self.store.put(self.path, _encode(data), -1, CreateOption.EPHEMERAL)
        self._written(sample)

    def _written(self, sample: LoadSample) -> None:
        self._last = sample
        self._last_write = time.monotonic()

    def _on_session_event(self, event: SessionEvent) -> None:
        if event is SessionEvent.SESSION_REESTABLISHED and self._task is not None:
            task = asyncio.get_running_loop().create_task(self._recreate())
            self._recreating.add(task)
            task.add_done_callback(self._recreating.discard)

    async def _recreate(self) -> None:
        try:
            await self._create()
        except MetadataStoreError as exc:
            log.warning("could not write the load report %s again: %s", self.path, exc)

    async def _run(self) -> None:
        interval = self.config.loadBalancerReportUpdateMinIntervalMillis / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                await self.update()
            except Exception:
                # One failed sample (psutil, a broken topic) must not end the reports for good.
                log.exception("load report %s: update failed", self.path)

    async def update(self) -> bool:
        """Write the report if the rule asks for it; whether it was written."""
        data, sample = self.report()
        assert self._last is not None, "start() writes the first report"
        if not needs_update(self._last, sample, time.monotonic() - self._last_write, self.config):
            return False
        try:
            await self.store.put(self.path, _encode(data), None, CreateOption.EPHEMERAL)
        except MetadataStoreError as exc:
            # The session is down; the next tick (or a re-established session) writes again.
            log.warning("could not write the load report %s: %s", self.path, exc)
            return False
        self._written(sample)
        return True

    async def close(self) -> None:
        """Stop updating and remove the node: the broker leaves the cluster at once."""
        task, self._task = self._task, None
        for running in [*self._recreating, *([task] if task else [])]:
            running.cancel()
            try:
                await running
            except asyncio.CancelledError:
                pass
        await release_at_close(self.store, f"the load report {self.path}", self._delete)

    async def _delete(self) -> None:
        try:
            await self.store.delete(self.path)
        except MetadataNotFoundError:
            pass  # gone already (an expired session took it)


def _rates(topics: list[PersistentTopic]) -> tuple[float, float, float, float]:
    """Messages/s in, out, bytes/s in, out of ``topics`` over the last stats interval, as
    Pulsar's load report sums its topics' stats."""
    outs = [t.rates_out() for t in topics]
    return (
        sum(t.rate_in.msg_rate for t in topics),
        sum(r for r, _ in outs),
        sum(t.rate_in.byte_rate for t in topics),
        sum(b for _, b in outs),
    )


def _bundle_of(topic: PersistentTopic, bundles: list[NamespaceBundle]) -> NamespaceBundle | None:
    """The bundle of ``bundles`` that ``topic`` belongs to (None: not an owned one)."""
    return next((b for b in bundles if b.includes(topic.topic_name)), None)


def _encode(data: dict[str, object]) -> bytes:
    return json.dumps(data, sort_keys=True).encode()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pulsar-grpc")
    except PackageNotFoundError:
        return "unknown"
