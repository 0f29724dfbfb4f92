"""Bundle placement: which broker should own an unowned bundle (Pulsar's
ModularLoadManagerImpl.selectBrokerForAssignment with its default strategy,
LeastLongTermMessageRate).

The candidates are the brokers with a load report (/loadbalance/brokers/*). Brokers whose
largest resource usage is over loadBalancerBrokerOverloadedThresholdPercentage are left out;
among the others the least long-term message rate wins. As in Pulsar, a bundle without rate data
of its own counts the default rate Pulsar assumes for one (50 msg/s in, 50 out): the reports
carry only the broker's total rate, so a broker counts the larger of its reported rate and the
default rate for each bundle it reports, plus the default rate for each bundle assigned to it
recently that its report does not show yet (Pulsar's preallocated bundles). When every broker
is overloaded, all are candidates.
A bundle the leader shed is placed as Pulsar's doLoadShedding places it: on the best broker
other than the one it left (chosen before the unload, remembered like any other choice), so
that it does not come straight back.
Pulsar picks at random among equal scores; here the tie goes to the broker with the fewest
bundles (reported and preallocated), then to the smallest broker id, so that placing bundles on
idle brokers spreads them evenly and predictably.

The report's msgRateIn + msgRateOut stands for Pulsar's long-term average: the broker reports
it at most every loadBalancerReportUpdateMinIntervalMillis, so it is already smoothed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass

from pulsar_grpc.broker.cluster import broker_data_of
from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT
from pulsar_grpc.broker.lookup import BrokerData
from pulsar_grpc.broker.metadata.store import MetadataStore

__all__ = [
    "DEFAULT_BUNDLE_MSG_RATE",
    "RESOURCES",
    "BrokerLoad",
    "BundlePlacement",
    "percent_usage",
    "select_broker",
]

# Pulsar's ModularLoadManagerImpl.DEFAULT_MESSAGE_RATE, assumed both in and out for a bundle
# without data of its own.
DEFAULT_BUNDLE_MSG_RATE = 50.0
_DEFAULT_BUNDLE_RATE = 2 * DEFAULT_BUNDLE_MSG_RATE  # in + out
# The resources whose largest usage decides whether a broker is overloaded (LocalBrokerData's).
RESOURCES = ("cpu", "memory", "directMemory", "bandwidthIn", "bandwidthOut")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BrokerLoad:
    """What placement reads from one broker's load report (LocalBrokerData)."""

    broker_id: str
    max_resource_usage: float  # Pulsar's getMaxResourceUsage: the largest usage / limit
    msg_rate: float  # msgRateIn + msgRateOut
    bundles: frozenset[str]
    data: BrokerData  # its addresses, to send a client there

    @classmethod
    def from_report(cls, broker_id: str, raw: bytes) -> BrokerLoad:
        report = json.loads(raw)
        usages = [percent_usage(report.get(name)) for name in RESOURCES]
        return cls(
            broker_id=broker_id,
            max_resource_usage=max(usages) / 100,
            msg_rate=float(report.get("msgRateIn", 0.0)) + float(report.get("msgRateOut", 0.0)),
            bundles=frozenset(report.get("bundles") or ()),
            data=broker_data_of(
                report.get("advertisedListeners") or {}, report.get("protocols") or {}
            ),
        )


def percent_usage(usage: object) -> float:
    """Pulsar's ResourceUsage.percentUsage: 0 when the limit is unknown."""
    if not isinstance(usage, dict):
        return 0.0
    limit = float(usage.get("limit", 0.0))
    return 100 * float(usage.get("usage", 0.0)) / limit if limit > 0 else 0.0


def select_broker(
    loads: Iterable[BrokerLoad],
    preallocated: dict[str, set[str]],
    overloaded_threshold_percentage: float,
    excluded: str | None = None,
) -> str | None:
    """The broker to own a new bundle (see the module docstring); None without brokers.
    ``preallocated``: broker id -> bundles assigned to it that its report may not show yet;
    ``excluded``: a broker not to choose (the one a shed bundle leaves)."""
    threshold = overloaded_threshold_percentage / 100
    candidates = [load for load in loads if load.broker_id != excluded]
    scored = []
    for load in candidates:
        pending = preallocated.get(load.broker_id, set()) - load.bundles
        if load.max_resource_usage > threshold:
            score = math.inf
        else:
            reported = max(load.msg_rate, _DEFAULT_BUNDLE_RATE * len(load.bundles))
            score = reported + _DEFAULT_BUNDLE_RATE * len(pending)
        scored.append((score, len(load.bundles | pending), load.broker_id))
    if not scored:
        return None
    best = min(scored)
    if best[0] == math.inf:  # all overloaded: any of them, as Pulsar (tie rules as above)
        best = min((0.0, count, broker) for _, count, broker in scored)
    return best[2]


class BundlePlacement:
    """Chooses a broker for each unowned bundle from the current load reports, remembering its
    recent choices until the chosen broker's report shows the bundle (or the broker leaves).

    Memory is bounded by the cluster's bundles: one remembered choice per bundle.
    """

    def __init__(self, store: MetadataStore, overloaded_threshold_percentage: float) -> None:
        self.store = store
        self.threshold = overloaded_threshold_percentage
        self._preallocated: dict[str, str] = {}  # bundle -> broker id
        self._lock = asyncio.Lock()  # one choice at a time: each sees the previous ones

    async def active_brokers(self) -> list[str]:
        """The brokers with a load report: the cluster's active brokers (host:webport)."""
        return await self.store.get_children(LOADBALANCE_BROKERS_ROOT)

    async def load(self, broker: str) -> BrokerLoad | None:
        """One broker's load report; None when it has none (it left the cluster) or when it
        cannot be read (another version's or a damaged report: that broker is not chosen, and
        the lookup that asked goes on with the others instead of failing)."""
        found = await self.store.get(f"{LOADBALANCE_BROKERS_ROOT}/{broker}")
        if found is None:
            return None
        try:
            return BrokerLoad.from_report(broker, found.value)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            log.warning(
                "load report of %s cannot be read (%s): not placing bundles there", broker, exc
            )
            return None

    async def loads(self) -> dict[str, BrokerLoad]:
        reports = await asyncio.gather(*(self.load(b) for b in await self.active_brokers()))
        return {load.broker_id: load for load in reports if load is not None}

    async def select(self, bundle: str) -> BrokerLoad | None:
        """The broker to own ``bundle``: the one chosen before while that choice is pending,
        else the least loaded; None when no broker has a load report."""
        async with self._lock:
            loads = await self.loads()
            self._settle(loads)
            chosen = self._preallocated.get(bundle)
            if chosen is not None:
                return loads[chosen]
            return self._choose(bundle, loads, None)

    async def select_away_from(self, bundle: str, leaving: str) -> BrokerLoad | None:
        """Choose where ``bundle``, about to be unloaded from ``leaving``, goes next: the least
        loaded other broker, remembered for the lookups that follow; None when there is
        none."""
        async with self._lock:
            loads = await self.loads()
            self._settle(loads)
            self._preallocated.pop(bundle, None)
            return self._choose(bundle, loads, leaving)

    def _choose(
        self, bundle: str, loads: dict[str, BrokerLoad], excluded: str | None
    ) -> BrokerLoad | None:
        pending: dict[str, set[str]] = {}
        for b, broker in self._preallocated.items():
            pending.setdefault(broker, set()).add(b)
        broker_id = select_broker(loads.values(), pending, self.threshold, excluded)
        if broker_id is None:
            return None
        self._preallocated[bundle] = broker_id
        return loads[broker_id]

    def _settle(self, loads: dict[str, BrokerLoad]) -> None:
        """Forget choices the chosen broker's report now shows, and those of brokers gone."""
        self._preallocated = {
            bundle: broker
            for bundle, broker in self._preallocated.items()
            if broker in loads and bundle not in loads[broker].bundles
        }
