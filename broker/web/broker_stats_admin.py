"""The brokers' load reports over the admin API, read-only and a super-user's (as Pulsar's
BrokerStats):

- ``GET /admin/v2/broker-stats/load-report``: Pulsar's path, this broker's LocalBrokerData
  (the figures its load reporter computes now); 404 on a standalone broker, which keeps none.
- ``GET /admin/v2/broker-stats/load-reports``: every active broker's last written report,
  keyed by broker id (Pulsar has no such call: the console's cluster view reads it, since a
  page cannot follow one broker's redirect to another's origin). ``{}`` on a standalone broker.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

from pulsar_grpc.broker.cluster.load_report import LOADBALANCE_BROKERS_ROOT, LoadReporter
from pulsar_grpc.broker.errors import NotFoundError

if TYPE_CHECKING:
    from pulsar_grpc.broker.web.access import AdminAccess

BASE = "/admin/v2/broker-stats"


class BrokerStatsPort(Protocol):
    """What the broker-stats routes read: the load reporter, None on a standalone broker and
    until a cluster member has joined (so read at each call, not at composition)."""

    @property
    def load_reporter(self) -> LoadReporter | None: ...


class BrokerStatsAdmin:
    def __init__(self, service: BrokerStatsPort, access: AdminAccess) -> None:
        self.service = service
        self.access = access

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(f"{BASE}/load-report", self.load_report),
                web.get(f"{BASE}/load-reports", self.load_reports),
            ]
        )

    async def load_report(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "reading the load report")
        reporter = self.service.load_reporter
        if reporter is None:
            raise NotFoundError("a standalone broker keeps no load report")
        data, _ = reporter.report()
        return web.json_response(data)

    async def load_reports(self, request: web.Request) -> web.Response:
        self.access.super_user(request, "reading the brokers' load reports")
        reporter = self.service.load_reporter
        if reporter is None:
            return web.json_response({})
        store = reporter.store
        brokers = await store.get_children(LOADBALANCE_BROKERS_ROOT)
        found = await asyncio.gather(
            *(store.get(f"{LOADBALANCE_BROKERS_ROOT}/{b}") for b in brokers)
        )
        reports: dict[str, Any] = {}
        for broker, node in zip(brokers, found, strict=True):
            if node is None:  # it left between the listing and the read
                continue
            try:
                reports[broker] = json.loads(node.value)
            except ValueError:
                reports[broker] = {"unreadable": True}
        return web.json_response(dict(sorted(reports.items())))
