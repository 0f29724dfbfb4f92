"""The web service: /metrics plus the subset of Pulsar's admin API v2 that this broker serves.

Errors answer Pulsar's way: a JSON body ``{"reason": ...}`` with 400 (bad input; 406 where
Pulsar answers it, a number of partitions out of range), 404 (absent),
409 (already exists), 412 (not allowed now), 413 (a body over aiohttp's 1 MiB client_max_size)
or 500.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import http_exceptions, web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from yarl import URL

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker import service_parts as parts
from pulsar_grpc.broker.cluster.leader import LeaderBroker
from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.listeners import WEB_SCHEMES
from pulsar_grpc.broker.lookup import LookupResult
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.security.authentication import AuthenticationData, AuthenticationService
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.tls import certificate_common_name, server_ssl_context
from pulsar_grpc.broker.web.access import AdminAccess, remember_role
from pulsar_grpc.broker.web.backlog_quota_admin import BacklogQuotaAdmin
from pulsar_grpc.broker.web.broker_client import BrokerClient
from pulsar_grpc.broker.web.broker_stats_admin import BrokerStatsAdmin, BrokerStatsPort
from pulsar_grpc.broker.web.brokers_config_admin import BrokersConfigAdmin
from pulsar_grpc.broker.web.bundles_admin import BundlesAdmin, BundlesPort
from pulsar_grpc.broker.web.clusters_admin import ClustersAdmin, ClustersPort
from pulsar_grpc.broker.web.console import OPEN_PATHS, Console, ConsolePort
from pulsar_grpc.broker.web.metrics import BrokerCollector, MetricsPort
from pulsar_grpc.broker.web.namespaces_admin import NamespacesAdmin, NamespacesPort
from pulsar_grpc.broker.web.partitioned_stats import names_this_broker, partitioned_stats
from pulsar_grpc.broker.web.permissions_admin import PermissionsAdmin, PermissionsPort
from pulsar_grpc.broker.web.rate_admin import RateAdmin, RatePort
from pulsar_grpc.broker.web.role_tokens_admin import add_role_token_routes
from pulsar_grpc.broker.web.schemas_admin import SchemasAdmin
from pulsar_grpc.broker.web.subscriptions_admin import SubscriptionsAdmin, SubscriptionsPort
from pulsar_grpc.broker.web.topics_admin import TopicsAdmin, TopicsPort, partition_count

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_HTTP_STATUS: list[tuple[type[e.BrokerError], int]] = [
    (e.NotAcceptableError, 406),
    (e.InvalidArgumentError, 400),
    (e.NotFoundError, 404),
    (e.PreconditionFailedError, 412),
    (e.PreconditionError, 409),
    (e.TooLargeError, 413),
    (e.AuthenticationError, 401),
    (e.AuthorizationError, 403),
    (e.ServiceNotReadyError, 503),
]


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except e.BrokerError as exc:
        status = next((s for cls, s in _HTTP_STATUS if isinstance(exc, cls)), 500)
        # A SCRAM step answers with its next message in headers, as RFC 7804 does over HTTP.
        headers = dict(exc.metadata) if isinstance(exc, e.AuthenticationChallenge) else None
        return web.json_response({"reason": exc.message}, status=status, headers=headers)
    except web.HTTPRequestEntityTooLarge as exc:  # aiohttp's, over client_max_size: its text
        return web.json_response({"reason": exc.text}, status=exc.status)


def _authenticating(service: AuthenticationService, metrics_open: bool) -> Middleware:
    """The admin API behind the broker's authentication (Pulsar's AuthenticationFilter): the
    Authorization header or the https client certificate; a failure answers 401 {"reason"}.
    /metrics stays open unless authenticateMetricsEndpoint, as in Pulsar; the console's page
    and assets always are (they hold no data: what the page shows comes from admin calls)."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        open_path = request.path in OPEN_PATHS or (metrics_open and request.path == "/metrics")
        if not open_path:
            peer = request.transport.get_extra_info("peername") if request.transport else None
            authorization = request.headers.getall("Authorization", [])
            if len(authorization) > 1:  # which one would count is anyone's guess: neither
                raise e.AuthenticationError("more than one Authorization header")
            result = await service.authenticate(
                AuthenticationData(
                    authorization=authorization[0] if authorization else None,
                    tls_common_name=_peer_common_name(request),
                    remote_address=str(peer),
                )
            )
            remember_role(request, result.role)
        return await handler(request)

    return authenticate


def _peer_common_name(request: web.Request) -> str | None:
    """CN of the client certificate the https handshake verified (None over http)."""
    cert = request.transport.get_extra_info("peercert") if request.transport else None
    return certificate_common_name(cert)


class WebPort(
    parts.HasAuthentication,
    parts.HasAuthorization,
    parts.HasConfig,
    parts.HasDynamicConfig,
    parts.HasIdentity,
    parts.HasLedgers,
    parts.HasListeners,
    parts.HasNamespaces,
    parts.HasOpenCheck,
    parts.HasPermissions,
    parts.HasResources,
    parts.HasSchemas,
    parts.HasStalls,
    parts.HasStore,
    parts.HasTopics,
    BrokerStatsPort,
    Protocol,
):
    """Every part the web service reaches: its own routes' (the leader, lookups, topics listing
    and creation, health) and, passed on as each one's narrower port, its route groups'."""


class WebService:
    def __init__(self, service: WebPort) -> None:
        self.service = service
        self.access = AdminAccess(service.authorization)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(parts.narrowed(service, MetricsPort)))
        # This broker's credentials and trust for its calls to the other brokers' web services.
        self.broker_client = BrokerClient(service.config)
        self._runner: web.AppRunner | None = None
        # (host, port) of each socket -> its listener (None: a primary address)
        self._via: dict[tuple[str, int], str | None] = {}

    def _port(self, port: type) -> Any:
        """The service seen through one route group's port (``parts.narrowed``)."""
        return parts.narrowed(self.service, port)

    @property
    def http_url(self) -> str:
        """This broker's web address on the internal listener."""
        return self.service.web_service_url()

    def app(self) -> web.Application:
        middlewares: list[Middleware] = [_errors]
        authentication = self.service.authentication
        if authentication is not None:
            metrics_open = not self.service.config.authenticateMetricsEndpoint
            middlewares.append(_authenticating(authentication, metrics_open))
        app = web.Application(middlewares=middlewares)
        BrokersConfigAdmin(self._port(parts.HasDynamicConfig), self.access).add_routes(
            app
        )  # before brokers/{cluster}
        base = "/admin/v2/persistent/{tenant}/{namespace}"
        app.add_routes(
            [
                web.get("/metrics", self.metrics),
                web.get("/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}", self.lookup),
                # leaderBroker before {cluster}: the first matching route answers
                web.get("/admin/v2/brokers/leaderBroker", self.leader_broker),
                web.get("/admin/v2/brokers/health", self.health),
                web.get("/admin/v2/brokers/{cluster}", self.active_brokers),
                web.get("/admin/v2/namespaces/{tenant}", self.list_namespaces),
                web.get(base, self.list_topics),
                web.put(base + "/{topic}", self.create_topic),
                web.put(base + "/{topic}/partitions", self.create_partitioned),
                web.get(base + "/{topic}/partitions", self.partitions),
                web.get(base + "/{topic}/stats", self.stats),
            ]
        )
        bundles = BundlesAdmin(self._port(BundlesPort), self.access, self.broker_client)
        bundles.add_routes(app)
        topics = TopicsAdmin(
            self._port(TopicsPort), self.access, self._served_here, self.broker_client
        )
        topics.add_routes(app)
        SubscriptionsAdmin(self._port(SubscriptionsPort), topics).add_routes(app)
        NamespacesAdmin(self._port(NamespacesPort), self.access, topics, bundles).add_routes(app)
        ClustersAdmin(self._port(ClustersPort), self.access).add_routes(app)
        PermissionsAdmin(self._port(PermissionsPort), self.access).add_routes(app)
        SchemasAdmin(self.service.schemas, self.access).add_routes(app)
        RateAdmin(self._port(RatePort), self.access).add_routes(app)
        BacklogQuotaAdmin(self._port(RatePort), self.access).add_routes(app)
        add_role_token_routes(app, authentication, self.access)
        BrokerStatsAdmin(self._port(BrokerStatsPort), self.access).add_routes(app)
        Console(self._port(ConsolePort), self.access, self.broker_client).add_routes(app)
        return app

    async def start(self) -> None:
        """Listen on every http and https bind address (PIP-95), each tied to its listener."""
        self._runner = web.AppRunner(self.app(), access_log=None, logger=_SERVER_LOG)
        await self._runner.setup()
        binds = self.service.listeners.bind_addresses_for(WEB_SCHEMES)
        tls = server_ssl_context(self.service.config) if any(b.tls for b in binds) else None
        for bind in binds:
            site = web.TCPSite(
                self._runner, bind.host, bind.port, ssl_context=tls if bind.tls else None
            )
            await site.start()
            server = site._server
            assert server is not None
            # A host name may open several sockets (IPv4 and IPv6): remember each one's own
            # address, which is what a request's socket reports.
            for sock in server.sockets:  # type: ignore[attr-defined]
                host, port = sock.getsockname()[:2]
                self._via[(host, port)] = bind.listener
            self.service.record_bound(bind, port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ handlers

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _arrived_via(self, request: web.Request) -> str | None:
        """The listener of the socket this request came in on."""
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if not sockname:
            return None
        host, port = sockname[0], sockname[1]
        if (host, port) in self._via:
            return self._via[(host, port)]
        for (bound_host, bound_port), listener in self._via.items():
            if bound_port == port and bound_host in ("0.0.0.0", "::"):
                return listener
        return None

    async def lookup(self, request: web.Request) -> web.Response:
        """Pulsar's GET /lookup/v2/topic/...: listenerName query > X-Pulsar-ListenerName header
        > the listener of the address the request came through > lookupListenerName > the
        internal listener. An unknown listener is 400 (PIP-95; Pulsar answers 500)."""
        m = request.match_info
        if m["domain"] != "persistent":
            raise e.InvalidArgumentError(f"unsupported topic domain {m['domain']!r}")
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await self.access.topic(request, topic, TopicOperation.LOOKUP)
        result = await self._served_here(request, topic)
        return web.json_response(result.as_lookup_data())

    async def _served_here(self, request: web.Request, topic: TopicName) -> LookupResult:
        """Look ``topic`` up for this request (placing an unowned bundle, as Pulsar's lookups
        and its admin's validateTopicOwnership do) and answer 307 to the broker to ask next
        unless this one serves it: the leader, the broker it chose, or the owner (PIP-338: on
        the chosen listener's address, same scheme as the request, carrying listenerName)."""
        requested = request.query.get("listenerName") or request.headers.get(
            "X-Pulsar-ListenerName"
        )
        authoritative = request.query.get("authoritative", "").lower() == "true"
        result = await self.service.namespaces.lookup_topic(
            topic.full_name, requested, self._arrived_via(request), authoritative
        )
        if not result.redirect and names_this_broker(self.service, result):
            return result
        tls = request.scheme == "https" or not result.http_url
        to_url = (result.http_url_tls if tls else result.http_url) or result.http_url
        if to_url is None:
            raise e.ServiceNotReadyError(f"the broker to ask for {topic} has no web address")
        query = {
            **request.query,
            "authoritative": str(result.authoritative).lower(),
            "listenerName": result.listener,
        }
        location = URL(to_url).with_path(request.path).with_query(query)
        raise web.HTTPTemporaryRedirect(str(location))

    async def leader_broker(self, request: web.Request) -> web.Response:
        """Pulsar's GET /admin/v2/brokers/leaderBroker; a standalone broker leads itself."""
        self.access.super_user(request, "reading the leader broker")
        namespaces = self.service.namespaces
        if not namespaces.clustered:
            return web.json_response(
                LeaderBroker(self.service.broker_id(), self.http_url).as_json()
            )
        leader = namespaces.leader()
        if leader is None:
            raise e.NotFoundError("Couldn't find leader broker")
        return web.json_response(leader.as_json())

    async def health(self, request: web.Request) -> web.Response:
        """Pulsar's GET /admin/v2/brokers/health: "ok" once this broker serves and its
        metadata and ledger stores answer; 503 otherwise (a super-user's call, as Pulsar)."""
        self.access.super_user(request, "checking the broker's health")
        self.service.check_open()
        try:
            await self.service.store.exists(POLICIES_ROOT)
            await self.service.ledgers.exists("health/check")
        except Exception as exc:
            raise e.ServiceNotReadyError(f"the broker's stores do not answer: {exc!r}") from None
        return web.Response(text="ok")

    async def active_brokers(self, request: web.Request) -> web.Response:
        """Pulsar's GET /admin/v2/brokers/{cluster}: the active brokers, as host:webport
        (sorted: the store lists children in no set order)."""
        self.access.super_user(request, "listing the active brokers")
        cluster = request.match_info["cluster"]
        if cluster != self.service.config.clusterName:
            raise e.NotFoundError(f"Cluster {cluster} does not exist")
        if not self.service.namespaces.clustered:
            return web.json_response([self.service.broker_id()])
        return web.json_response(sorted(await self.service.namespaces.active_brokers()))

    async def list_namespaces(self, request: web.Request) -> web.Response:
        await self.access.tenant_admin(request, request.match_info["tenant"])
        return web.json_response(
            await self.service.resources.list_namespaces(request.match_info["tenant"])
        )

    async def list_topics(self, request: web.Request) -> web.Response:
        ns = f"{request.match_info['tenant']}/{request.match_info['namespace']}"
        await self.access.namespace_topics(request, NamespaceName.get(ns))
        return web.json_response(await self.service.resources.list_topics(ns))

    def _topic(self, request: web.Request) -> str:
        m = request.match_info
        return TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}").full_name

    async def create_topic(self, request: web.Request) -> web.Response:
        name = self._topic(request)
        await self.access.tenant_admin(request, TopicName.get(name).tenant)
        await self._served_here(request, TopicName.get(name))
        if await self.service.resources.get_partitioned_metadata(name, auto_create=False):
            raise e.NotAllowedError(f"partitioned topic {name} already exists")
        if await self.service.ledgers.exists(TopicName.get(name).persistence_naming_encoding):
            raise e.NotAllowedError(f"topic {name} already exists")
        await self.service.topics.get_topic(name, explicit=True)
        return web.Response(status=204)

    async def create_partitioned(self, request: web.Request) -> web.Response:
        await self.access.tenant_admin(request, request.match_info["tenant"])
        partitions = partition_count(await request.text())
        await self.service.resources.create_partitioned_topic(self._topic(request), partitions)
        return web.Response(status=204)

    async def partitions(self, request: web.Request) -> web.Response:
        """Pulsar's GET .../partitions: a read, unless ``checkAllowAutoCreation=true`` (Pulsar's
        query parameter, false by default) lets it auto-create the topic as a lookup would."""
        name = self._topic(request)
        await self.access.topic(request, TopicName.get(name), TopicOperation.LOOKUP)
        auto_create = request.query.get("checkAllowAutoCreation", "false").lower() == "true"
        partitions = await self.service.resources.get_partitioned_metadata(name, auto_create)
        return web.json_response({"partitions": partitions})

    async def stats(self, request: web.Request) -> web.Response:
        """A topic's stats from its owner (307 there); a partitioned topic's gathered from
        each partition's owner."""
        name = self._topic(request)
        await self.access.topic(request, TopicName.get(name), TopicOperation.LOOKUP)
        partitions = await self.service.resources.get_partitioned_metadata(name, auto_create=False)
        if partitions:
            return web.json_response(
                await partitioned_stats(
                    self.service, self.broker_client, TopicName.get(name), partitions
                )
            )
        await self._served_here(request, TopicName.get(name))
        topic = await self.service.topics.get_topic(name, create=False)
        return web.json_response(topic.stats())


class _OneLineForUnreadableRequests(logging.Filter):
    """aiohttp logs a request it cannot parse with its traceback; a gRPC client pointed at the
    web service port (HTTP/2's preface ``PRI * HTTP/2.0``) is a client's mistake, not the
    broker's: one line that names it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, http_exceptions.HttpProcessingError):
            preface = "PRI" in str(exc)
            what = record.getMessage()
            first_line = str(exc.message).splitlines()[0] if exc.message else str(exc.code)
            record.msg = "%s: %s%s"
            record.args = (
                what,
                f"{type(exc).__name__}: {first_line}",
                " (HTTP/2: a gRPC client on the web service port?)" if preface else "",
            )
            record.exc_info = None
            record.exc_text = None
        return True


_SERVER_LOG = logging.getLogger("pulsar_grpc.broker.web.server")
_SERVER_LOG.addFilter(_OneLineForUnreadableRequests())
