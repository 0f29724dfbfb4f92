"""Admin REST at Pulsar's paths for bundles and brokers: a namespace's bundles, unload of a
bundle or a whole namespace, split, what one of the cluster's brokers owns, and the bundle a
topic belongs to. (The cluster's brokers and its leader are the web service's own routes.)

A bundle operation is answered where the bundle is owned. Sent to another broker, it is
redirected (307, same path and query) to the owner's web address, as Pulsar's
validateNamespaceBundleOwnership does; an unload of a bundle nobody owns does nothing (204), as
in Pulsar; a split of one is done by the broker that takes it (the one asked, as a lookup).
These endpoints are the contract the leader's shedding and splitting call.
"""

from __future__ import annotations

from typing import Protocol

import aiohttp
from aiohttp import web
from yarl import URL

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.bundles import BundleOwner, BundleService, Owner
from pulsar_grpc.broker.cluster.ownership import POLICIES_ROOT
from pulsar_grpc.broker.cluster.split import SplitAlgorithm
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.naming import NamespaceBundle, NamespaceName, TopicName
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.broker.service_parts import (
    HasConfig,
    HasIdentity,
    HasNamespaces,
    HasResources,
    HasStore,
    HasTopics,
)
from pulsar_grpc.broker.web.access import AdminAccess
from pulsar_grpc.broker.web.broker_client import BrokerClient, refusal

__all__ = ["BundlesAdmin"]

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
MAX_PORT = 65535
# An unload asked of another broker (it closes the bundle's topics), redirects included: as
# long as Pulsar gives one (namespaceBundleUnloadingTimeoutMs, 60 s).
OWNER_TIMEOUT_S = 60.0


class BundlesPort(
    HasConfig, HasIdentity, HasNamespaces, HasResources, HasStore, HasTopics, Protocol
):
    """What the bundles routes use: bundle ownership, the namespaces' bundles and topics."""


class BundlesAdmin:
    """The routes, on one broker; ``add_routes`` registers them on the web application."""

    def __init__(
        self, service: BundlesPort, access: AdminAccess, broker_client: BrokerClient
    ) -> None:
        """Made when the web service starts, once the broker's parts exist."""
        self.service = service
        self.access = access
        self.broker_client = broker_client
        self.bundles = BundleService(
            service.config, service.resources, service.namespaces, service.topics
        )

    def add_routes(self, app: web.Application) -> None:
        # Registered after the web service's own routes (which answer
        # /admin/v2/brokers/leaderBroker and /admin/v2/brokers/{cluster}): the first match wins.
        app.add_routes(
            [
                web.get(NAMESPACE + "/bundles", self.get_bundles),
                web.put(NAMESPACE + "/unload", self.unload_namespace),
                web.put(NAMESPACE + "/{bundle}/unload", self.unload_bundle),
                web.put(NAMESPACE + "/{bundle}/split", self.split_bundle),
                web.get("/admin/v2/brokers/{cluster}/{broker}/ownedNamespaces", self.owned),
                web.get(
                    "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}/bundle",
                    self.topic_bundle,
                ),
            ]
        )

    # ------------------------------------------------------------ namespaces

    async def _namespace(self, request: web.Request) -> NamespaceName:
        """The namespace the path names; administering it needs a tenant admin."""
        ns = NamespaceName.get(f"{request.match_info['tenant']}/{request.match_info['namespace']}")
        await self.access.tenant_admin(request, ns.tenant)
        return ns

    async def get_bundles(self, request: web.Request) -> web.Response:
        """Pulsar's BundlesData: {"boundaries": [...], "numBundles": n}."""
        bundles, _ = await self.service.resources.get_bundles(await self._namespace(request))
        return web.json_response(
            {"boundaries": bundles.boundary_strings, "numBundles": len(bundles)}
        )

    async def unload_bundle(self, request: web.Request) -> web.Response:
        bundle = await self.bundles.bundle(
            await self._namespace(request), request.match_info["bundle"]
        )
        owner = await self.bundles.owner(bundle, take=False)
        if owner.kind is BundleOwner.THIS_BROKER:
            await self.bundles.unload(bundle)
        elif owner.kind is BundleOwner.OTHER_BROKER:
            raise _redirect(request, owner)
        return web.Response(status=204)

    async def unload_namespace(self, request: web.Request) -> web.Response:
        """Every bundle, each on its owner (Pulsar sends the others theirs as admin requests)."""
        await self.unload_all(await self._namespace(request))
        return web.Response(status=204)

    async def unload_all(self, ns: NamespaceName) -> None:
        """Unload each of the namespace's owned bundles on its owner (a namespace's delete
        lets its bundles go this way too)."""
        bundles, _ = await self.service.resources.get_bundles(ns)
        for bundle in bundles:
            owner = await self.bundles.owner(bundle, take=False)
            if owner.kind is BundleOwner.THIS_BROKER:
                await self.bundles.unload(bundle)
            elif owner.kind is BundleOwner.OTHER_BROKER:
                await self._unload_on(owner, bundle)

    async def split_bundle(self, request: web.Request) -> web.Response:
        """PUT .../{bundle}/split?unload=&splitAlgorithmName= with an optional JSON body: the
        positions for specified_positions_divide (Pulsar's splitBoundaries)."""
        name = request.query.get("splitAlgorithmName", "").strip()
        try:
            algorithm = SplitAlgorithm.parse(name) if name else None
        except e.InvalidArgumentError as exc:
            raise e.PreconditionFailedError(exc.message) from None
        positions = await _split_boundaries(request)
        bundle = await self.bundles.bundle(
            await self._namespace(request), request.match_info["bundle"]
        )
        owner = await self.bundles.owner(bundle, take=True)
        if owner.kind is BundleOwner.OTHER_BROKER:
            raise _redirect(request, owner)
        unload = request.query.get("unload", "false").lower() == "true"
        await self.bundles.split(bundle, algorithm, positions, unload)
        return web.Response(status=204)

    async def _unload_on(self, owner: Owner, bundle: NamespaceBundle) -> None:
        """Ask the owner to unload ``bundle`` (this broker's own admin request, with its
        broker client's credentials; a redirect is followed)."""
        data = owner.data
        assert data is not None
        base = self.broker_client.web_url(data.http_url, data.http_url_tls)
        if base is None:
            raise e.ServiceNotReadyError("the bundle's owner has no web address")
        url = f"{base}{_bundle_path(bundle)}/unload"
        timeout = aiohttp.ClientTimeout(total=OWNER_TIMEOUT_S)
        try:
            async with self.broker_client.session(timeout) as http, http.put(url) as response:
                if response.status >= 400:
                    raise e.ServiceNotReadyError(
                        f"the owner of {bundle} refused its unload: "
                        + refusal(response.status, await response.text())
                    )
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise e.ServiceNotReadyError(
                f"the owner of {bundle} could not be asked to unload it: {exc!r}"
            ) from None

    # ------------------------------------------------------------ brokers and topics

    def _check_cluster(self, request: web.Request) -> None:
        cluster = request.match_info["cluster"]
        if cluster != self.service.config.clusterName:
            raise e.NotFoundError(f"Cluster {cluster} does not exist")

    async def owned(self, request: web.Request) -> web.Response:
        """Pulsar's map of bundle -> NamespaceOwnershipStatus, answered by the broker named
        (another one's request is redirected to it, as Pulsar's validateBrokerName)."""
        self.access.super_user(request, "listing a broker's namespaces")
        self._check_cluster(request)
        broker = request.match_info["broker"]
        if broker != self.service.broker_id():
            location = _broker_url(request.scheme, broker).with_path(request.path)
            raise web.HTTPTemporaryRedirect(str(location.with_query(request.query)))
        ownership = self.service.namespaces.ownership
        if ownership is not None:
            owned = [(b, ownership.is_active(b)) for b in ownership.owned()]
        else:  # standalone: every bundle of every namespace
            owned = [(b, True) for b in await self._every_bundle()]
        return web.json_response(
            {
                str(bundle): {
                    "broker_assignment": "primary",
                    "is_controlled": False,
                    "is_active": active,
                }
                for bundle, active in sorted(owned, key=lambda o: str(o[0]))
            }
        )

    async def _every_bundle(self) -> list[NamespaceBundle]:
        resources = self.service.resources
        found: list[NamespaceBundle] = []
        for tenant in await self.service.store.get_children(POLICIES_ROOT):
            for ns in await resources.list_namespaces(tenant):
                bundles, _ = await resources.get_bundles(NamespaceName.get(ns))
                found.extend(bundles)
        return found

    async def topic_bundle(self, request: web.Request) -> web.Response:
        """Pulsar's GET /lookup/v2/topic/.../bundle: the topic's bundle range, as a string."""
        m = request.match_info
        if m["domain"] != "persistent":
            raise e.InvalidArgumentError(f"unsupported topic domain {m['domain']!r}")
        topic = TopicName.get(f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
        await self.access.topic(request, topic, TopicOperation.LOOKUP)
        bundles, _ = await self.service.resources.get_bundles(topic.namespace)
        return web.Response(text=bundles.bundle_for(topic).range_str)


def _broker_url(scheme: str, broker: str) -> URL:
    """The web address of the broker an admin path names as ``host:port`` (Pulsar's
    validateBrokerName); anything else is the caller's mistake (400), not a failed redirect."""
    host, _, port = broker.rpartition(":")
    if host.startswith("[") and host.endswith("]"):  # an IPv6 address
        host = host[1:-1]
    if host and port.isascii() and port.isdigit() and 0 < int(port) <= MAX_PORT:
        try:
            return URL.build(scheme=scheme, host=host, port=int(port))
        except ValueError:  # a host yarl cannot encode
            pass
    raise e.InvalidArgumentError(f"Invalid broker url {broker}: expected <host>:<port>")


def _owner_url(owner: Owner, tls: bool) -> str:
    data = owner.data
    assert data is not None
    url = (data.http_url_tls if tls else data.http_url) or data.http_url or data.http_url_tls
    if url is None:
        raise e.ServiceNotReadyError("the bundle's owner has no web address")
    return url


def _redirect(request: web.Request, owner: Owner) -> web.HTTPException:
    """307 to the same path and query on the owner's web address."""
    base = URL(_owner_url(owner, request.scheme == "https"))
    location = base.with_path(request.path).with_query(request.query)
    return web.HTTPTemporaryRedirect(str(location))


def _bundle_path(bundle: NamespaceBundle) -> str:
    return f"/admin/v2/namespaces/{bundle.namespace}/{bundle.range_str}"


async def _split_boundaries(request: web.Request) -> list[int]:
    """The optional JSON list of positions (Pulsar's splitBoundaries, longs)."""
    body = (await request.text()).strip()
    if not body:
        return []
    try:
        positions = json_value(body)
    except ValueError:
        raise e.InvalidArgumentError(
            f"body must be a JSON list of positions, got {body!r}"
        ) from None
    if positions is None:
        return []
    if not isinstance(positions, list) or not all(
        isinstance(p, int) and not isinstance(p, bool) for p in positions
    ):
        raise e.InvalidArgumentError(f"body must be a JSON list of positions, got {body!r}")
    return positions
