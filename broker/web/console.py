"""The live console: a read-only page served at /console (and / redirects to it).

The page is plain HTML, one hand-written script and one stylesheet, all shipped in the package
(broker/web/console/, package data): no build step, nothing fetched from elsewhere. The script
polls the admin REST API with GET calls only, so everything it shows passes the same
authentication and authorization as any admin call: the page itself and its two assets carry no
data and are served without credentials (:data:`OPEN_PATHS`), the data calls carry the token the
operator pastes (``Authorization: Bearer``) or nothing. One call is the console's own
(:data:`TOPIC_STATS`): a topic's stats read by this broker from the topic's owner, since the
admin API's answer there is a 307 to the owner, another origin, which a page cannot follow.

A Content-Security-Policy lets only the broker's own script and stylesheet run and the page
reach only the broker, so that no name shown in it (topic names are the users') can run as
code; the script also writes every name with ``textContent``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.service_parts import HasConfig, HasResources
from pulsar_grpc.broker.web.partitioned_stats import (
    PartitionedStatsPort,
    owner_stats,
    partitioned_stats,
)

if TYPE_CHECKING:
    from pulsar_grpc.broker.config import ServiceConfiguration
    from pulsar_grpc.broker.web.access import AdminAccess
    from pulsar_grpc.broker.web.broker_client import BrokerClient

PAGE = "/console"
# A topic's stats as the admin API's, but read from the owner by this broker (the page cannot
# follow a 307 to another broker's origin).
TOPIC_STATS = PAGE + "/api/persistent/{tenant}/{namespace}/{topic}/stats"

# Each asset the page loads: its file in broker/web/console/ and its content type.
_ASSETS = {
    "console.js": "text/javascript",
    "console.css": "text/css",
}

# The paths served without authentication: the page and its assets, which hold no data.
OPEN_PATHS = frozenset({"/", PAGE, *(f"{PAGE}/{name}" for name in _ASSETS)})

_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_HEADERS = {
    "Content-Security-Policy": _CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
# Where index.html takes the polling period (milliseconds).
_REFRESH_PLACEHOLDER = "{{REFRESH_MS}}"
_LONGEST_REFRESH_S = 2


class ConsolePort(PartitionedStatsPort, HasConfig, HasResources, Protocol):
    """What the console uses: its refresh setting, the namespaces and topics' stats."""


def refresh_ms(config: ServiceConfiguration) -> int:
    """The page polls every stats interval (statsUpdateFrequencyInSecs: the rates change no
    faster) but at least every 2 s (Pulsar's default interval is 60 s, and backlogs, producers
    and consumers change between two intervals)."""
    seconds = min(max(config.statsUpdateFrequencyInSecs, 1), _LONGEST_REFRESH_S)
    return seconds * 1000


def _asset(name: str) -> str:
    return (resources.files(__package__) / "console" / name).read_text(encoding="utf-8")


class Console:
    """Serves the page (read once, at start), its assets and the one call the admin API lacks
    for it (a topic's stats from any broker)."""

    def __init__(
        self, service: ConsolePort, access: AdminAccess, broker_client: BrokerClient
    ) -> None:
        self.service = service
        self.access = access
        self.broker_client = broker_client
        page = _asset("index.html")
        self._page = page.replace(_REFRESH_PLACEHOLDER, str(refresh_ms(service.config)))
        self._assets = {name: _asset(name) for name in _ASSETS}

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get("/", self.root),
                web.get(PAGE, self.page),
                *(web.get(f"{PAGE}/{name}", self._serve(name)) for name in _ASSETS),
                web.get(TOPIC_STATS, self.topic_stats),
            ]
        )

    async def topic_stats(self, request: web.Request) -> web.Response:
        """The topic's stats (a partitioned topic's summed, as the admin API's), read from its
        owner wherever it is; the same authorization as GET .../stats (lookup)."""
        m = request.match_info
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await self.access.topic(request, topic, TopicOperation.LOOKUP)
        resources = self.service.resources
        partitions = await resources.get_partitioned_metadata(topic.full_name, auto_create=False)
        if partitions:
            stats = await partitioned_stats(self.service, self.broker_client, topic, partitions)
        else:
            stats = await owner_stats(self.service, self.broker_client, topic)
        return web.json_response(stats)

    async def root(self, request: web.Request) -> web.Response:
        raise web.HTTPFound(PAGE)

    async def page(self, request: web.Request) -> web.Response:
        return web.Response(text=self._page, content_type="text/html", headers=_HEADERS)

    def _serve(self, name: str) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def serve(request: web.Request) -> web.Response:
            return web.Response(
                text=self._assets[name], content_type=_ASSETS[name], headers=_HEADERS
            )

        return serve
