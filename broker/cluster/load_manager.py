"""The leader's load management (Pulsar's ModularLoadManagerImpl.doLoadShedding and
checkNamespaceBundleSplit), run every loadBalancerSheddingIntervalMinutes while this broker is
the leader, both only when the cluster has more than one broker (as Pulsar).

Both read every broker's load report and act through the owner's admin REST, as Pulsar's leader
does through its admin client: ``PUT .../{bundle}/unload`` and ``PUT .../{bundle}/split``
(a redirect to the current owner is followed), with the broker client's credentials
(brokerClientAuthenticationPlugin/Parameters, :mod:`broker.web.broker_client`). What to shed
and what to split are pure decisions (:mod:`.shedding`, :mod:`.auto_split`); this module
gathers their inputs and carries them out:

- shedding: before unloading a bundle the placement chooses its next broker, other than the one
  it leaves (nothing is unloaded when there is no other); the bundle is then not shed again for
  loadBalancerSheddingGracePeriodMinutes;
- splitting: a bundle the namespace no longer has (a report older than a split) is skipped; the
  owner splits with its defaultNamespaceBundleSplitAlgorithm and unloads the halves when
  loadBalancerAutoUnloadSplitBundlesEnabled.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from pulsar_grpc.broker.cluster.auto_split import (
    BundleStats,
    SplitLimits,
    find_bundles_to_split,
    namespace_of,
)
from pulsar_grpc.broker.cluster.leader import LeaderElection
from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.cluster.placement import RESOURCES, BundlePlacement, percent_usage
from pulsar_grpc.broker.cluster.shedding import (
    BrokerUsage,
    ThresholdShedder,
    find_bundles_to_unload,
)
from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.metadata.store import MetadataStore
from pulsar_grpc.broker.naming import NamespaceName
from pulsar_grpc.broker.resources import NamespaceResources
from pulsar_grpc.broker.web.broker_client import BrokerClient, refusal

__all__ = ["LoadManager"]

log = logging.getLogger(__name__)

# An unload or split waits for the owner to close the bundle's topics: give it time.
_ADMIN_TIMEOUT = aiohttp.ClientTimeout(total=120)

Report = dict[str, Any]  # a LocalBrokerData JSON


class AdminCallError(Exception):
    """An owner refused (or could not be asked for) an unload or split."""


class LoadManager:
    """The leader-only tasks; :meth:`register` hangs them on the election."""

    def __init__(
        self,
        config: ServiceConfiguration,
        store: MetadataStore,
        placement: BundlePlacement,
        resources: NamespaceResources,
    ) -> None:
        self.config = config
        self.store = store
        self.placement = placement
        self.resources = resources
        self.shedder = ThresholdShedder(config)
        self.broker_client = BrokerClient(config)
        # Bundle -> when the leader unloaded it (monotonic); pruned after the grace period.
        self._recently_unloaded: dict[str, float] = {}

    def register(self, election: LeaderElection) -> None:
        interval = self.config.loadBalancerSheddingIntervalMinutes * 60
        election.add_task("load shedding", interval, self.do_load_shedding)
        election.add_task("bundle split", interval, self.check_namespace_bundle_split)

    async def reports(self) -> dict[str, Report]:
        """Every active broker's load report, by broker id."""
        brokers = await self.store.get_children(LOADBALANCE_BROKERS_ROOT)
        found = await asyncio.gather(
            *(self.store.get(f"{LOADBALANCE_BROKERS_ROOT}/{b}") for b in brokers)
        )
        return {b: json.loads(f.value) for b, f in zip(brokers, found, strict=True) if f}

    # ------------------------------------------------------------ shedding

    async def do_load_shedding(self) -> list[tuple[str, str]]:
        """One shedding run; the (bundle, broker it left) pairs unloaded."""
        if not self.config.loadBalancerSheddingEnabled:
            return []
        reports = await self.reports()
        if len(reports) <= 1:
            return []
        now = time.monotonic()
        grace_s = self.config.loadBalancerSheddingGracePeriodMinutes * 60
        self._recently_unloaded = {
            b: t for b, t in self._recently_unloaded.items() if now - t < grace_s
        }
        self.shedder.forget_others(reports.keys())
        usages = [self._usage(broker, report) for broker, report in reports.items()]
        chosen = find_bundles_to_unload(usages, self._recently_unloaded, self.shedder.rules)
        if chosen:
            log.info(
                "load shedding: brokers' usage %s",
                ", ".join(f"{u.broker} {u.usage:.1%}" for u in usages),
            )
        unloaded = []
        for broker, bundles in chosen.items():
            for bundle in bundles:
                destination = await self.placement.select_away_from(bundle, broker)
                if destination is None:
                    log.info("no broker available to take bundle %s from %s", bundle, broker)
                    continue
                log.info(
                    "load shedding: unloading bundle %s from broker %s to broker %s",
                    bundle,
                    broker,
                    destination.broker_id,
                )
                try:
                    await self._admin_put(reports[broker], f"{bundle}/unload")
                except AdminCallError as exc:
                    log.warning("load shedding: could not unload %s: %s", bundle, exc)
                    continue
                self._recently_unloaded[bundle] = time.monotonic()
                unloaded.append((bundle, broker))
        return unloaded

    def _usage(self, broker: str, report: Report) -> BrokerUsage:
        percent = {name: percent_usage(report.get(name)) for name in RESOURCES}
        stats: Mapping[str, Mapping[str, float]] = report.get("lastStats") or {}
        return BrokerUsage(
            broker=broker,
            usage=self.shedder.usage(broker, percent),
            throughput=float(report.get("msgThroughputIn", 0.0))
            + float(report.get("msgThroughputOut", 0.0)),
            bundles={
                bundle: BundleStats.from_json(stats.get(bundle, {})).msg_throughput
                for bundle in report.get("bundles") or ()
            },
        )

    # ------------------------------------------------------------ splitting

    async def check_namespace_bundle_split(self) -> list[str]:
        """One split run; the bundles split."""
        if not self.config.loadBalancerAutoBundleSplitEnabled:
            return []
        reports = await self.reports()
        if len(reports) <= 1:
            return []
        current: dict[str, set[str]] = {}  # namespace -> its bundles now
        last_stats: list[tuple[str, dict[str, BundleStats]]] = []
        for broker, report in reports.items():
            stats = {}
            for bundle, raw in (report.get("lastStats") or {}).items():
                namespace = namespace_of(bundle)
                if namespace not in current:
                    current[namespace] = await self._bundles_of(namespace)
                if bundle in current[namespace]:  # else split since the report was written
                    stats[bundle] = BundleStats.from_json(raw)
            last_stats.append((broker, stats))
        counts = {namespace: len(bundles) for namespace, bundles in current.items()}
        to_split = find_bundles_to_split(last_stats, counts, SplitLimits.of(self.config))
        unload = str(self.config.loadBalancerAutoUnloadSplitBundlesEnabled).lower()
        split = []
        for bundle, broker in to_split.items():
            log.info("load manager: splitting bundle %s (unload: %s)", bundle, unload)
            try:
                await self._admin_put(reports[broker], f"{bundle}/split?unload={unload}")
            except AdminCallError as exc:
                log.warning("could not split bundle %s: %s", bundle, exc)
                continue
            split.append(bundle)
        return split

    async def _bundles_of(self, namespace: str) -> set[str]:
        try:
            bundles, _ = await self.resources.get_bundles(NamespaceName.get(namespace))
        except BrokerError:  # deleted meanwhile
            return set()
        return {str(b) for b in bundles}

    async def _admin_put(self, report: Report, bundle_path: str) -> None:
        """PUT /admin/v2/namespaces/<bundle_path> on the broker whose report this is
        (following a redirect to the bundle's current owner)."""
        base = self.broker_client.web_url(
            report.get("webServiceUrl"), report.get("webServiceUrlTls")
        )
        if not base:
            raise AdminCallError("the broker has no web address")
        url = f"{base}/admin/v2/namespaces/{bundle_path}"
        try:
            async with (
                self.broker_client.session(_ADMIN_TIMEOUT) as http,
                http.put(url) as response,
            ):
                if response.status >= 400:
                    raise AdminCallError(refusal(response.status, await response.text()))
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise AdminCallError(f"{url}: {exc!r}") from exc
