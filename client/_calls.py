"""The calls a client makes to brokers outside its streams: lookups (following redirects),
unary calls at the broker that owns a topic, and the metadata every call carries.

:class:`BrokerCalls` owns the client's channels and credentials; the client, its producers and
consumers reach brokers only through it, so how a call is routed, authenticated (a two-way
exchange riding on the call itself) and retried is in one place.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from pulsargrpc.v1 import pulsar_pb2 as pb
from pulsargrpc.v1 import pulsar_pb2_grpc as pb_grpc

from ._auth import Authentication, Exchange, ExchangeAnswer
from ._channels import ChannelPool, LookupResult, grpc_url
from ._errors import AlreadyClosed, LookupFailed, error_from_rpc
from ._headers import AUTHORIZATION, Header
from ._http_lookup import HttpLookup
from ._stream import Metadata, Params, call_metadata

__all__ = ["BrokerCalls"]


class CallsState(enum.Enum):
    OPEN = "open"
    CLOSED = "closed"  # the client is closed: no new call starts


class BrokerCalls:
    """Lookups and unary calls over the client's channel pool (see the module doc)."""

    def __init__(
        self,
        service: tuple[str, bool] | HttpLookup,
        pool: ChannelPool,
        listener_name: str | None,
        authentication: Authentication | None,
        operation_timeout_s: float,
        max_lookup_redirects: int,
    ) -> None:
        self._http: HttpLookup | None = None
        self._target, self._tls = "", False
        self._https: list[HttpLookup] = []  # every web service used, closed with the client
        self._pools: list[ChannelPool] = []  # every pool used, closed with the client
        self._listener_name = listener_name
        self._operation_timeout_s = operation_timeout_s
        self._max_lookup_redirects = max_lookup_redirects
        self._state = CallsState.OPEN
        self.use(service, authentication, pool)

    def use(
        self,
        service: tuple[str, bool] | HttpLookup,
        authentication: Authentication | None,
        pool: ChannelPool,
    ) -> None:
        """Make later lookups and calls go to a cluster (at start, and on a cluster failover):
        a gRPC service URL's address or the web service its lookups go to instead, its
        credentials and channels (whose TLS trusts that cluster's CAs)."""
        if isinstance(service, HttpLookup):
            self._http, self._target, self._tls = service, "", service.prefers_tls
            if service not in self._https:
                self._https.append(service)
        else:
            self._http = None
            self._target, self._tls = service
        self._authentication = authentication
        self.pool = pool
        if pool not in self._pools:
            self._pools.append(pool)

    @property
    def closed(self) -> bool:
        """Whether the client is closing or closed (:meth:`refuse_new`)."""
        return self._state is CallsState.CLOSED

    def refuse_new(self) -> bool:
        """From now on no call starts (the client is closing); False if that was so already."""
        if self._state is CallsState.CLOSED:
            return False
        self._state = CallsState.CLOSED
        return True

    async def close_channels(self) -> None:
        """Close the channels, once no new call can start (:meth:`refuse_new`)."""
        await asyncio.gather(
            *(http.close() for http in self._https), *(pool.close() for pool in self._pools)
        )

    async def at_owner(self, topic: str, method: str, request: Any) -> Any:
        """A unary call about ``topic``, made at the broker that owns it (through the proxy
        that answered the lookup, when one did)."""
        result, (target, tls) = await self.lookup(topic)
        stub = self.stub(target, tls)
        return await self.unary(getattr(stub, method), request, topic, result.route())

    def stub(self, target: str, tls: bool) -> pb_grpc.PulsarServiceStub:
        """The stub for a broker's address."""
        if self._state is CallsState.CLOSED:
            raise AlreadyClosed("the client is closed")
        return self.pool.stub(target, tls)

    def _service_stub(self) -> pb_grpc.PulsarServiceStub:
        """The stub for a gRPC service URL (a web service URL's calls go over HTTP)."""
        return self.stub(self._target, self._tls)

    async def lookup(self, topic: str) -> tuple[LookupResult, tuple[str, bool]]:
        """The lookup answer for ``topic`` and the (``host:port``, tls) to connect to.

        Starts at the service URL; each Redirect is looked up again at the address it
        answers, up to ``max_lookup_redirects`` times, passing its ``authoritative`` on (as
        Pulsar's clients do: the broker the leader chose then takes the topic's bundle).
        """
        if self._http is not None:
            result = await self._http.lookup(topic)
            try:
                return result, result.grpc_address(self._tls)
            except LookupFailed as exc:
                raise LookupFailed(
                    f"lookup of {topic} at {self._http.url}: {exc.message}"
                ) from None
        request = pb.LookupRequest(topic=topic, listener_name=self._listener_name or "")
        target, tls = self._target, self._tls
        hops = [grpc_url(target, tls)]
        for _ in range(self._max_lookup_redirects + 1):
            response = await self.unary(self.stub(target, tls).Lookup, request, topic)
            result = LookupResult(
                grpc_url=response.grpc_url,
                grpc_url_tls=response.grpc_url_tls,
                http_url=response.http_url,
                http_url_tls=response.http_url_tls,
                authoritative=response.authoritative,
                redirect=response.response == pb.LookupResponse.Redirect,
                listener_name=response.listener_name,
                proxy_through_service_url=response.proxy_through_service_url,
                proxy_to_broker_url=response.proxy_to_broker_url,
            )
            try:
                address = result.grpc_address(self._tls)
            except LookupFailed as exc:
                raise LookupFailed(f"lookup of {topic} at {hops[-1]}: {exc.message}") from None
            if not result.redirect:
                return result, address
            target, tls = address
            request.authoritative = result.authoritative
            hops.append(grpc_url(target, tls))
        raise LookupFailed(
            f"lookup of {topic} was redirected more than {self._max_lookup_redirects} times: "
            + " -> ".join(hops)
        )

    async def partition_count(self, topic: str) -> int:
        """The topic's partition count (0: not partitioned), asked at the service URL."""
        if self._http is not None:
            return await self._http.partition_count(topic)
        request = pb.PartitionedTopicMetadataRequest(topic=topic)
        response = await self.unary(
            self._service_stub().GetPartitionedTopicMetadata, request, topic
        )
        return int(response.partitions)

    async def topics_of_namespace(self, namespace: str) -> list[str]:
        """The namespace's persistent topics, asked at the service URL."""
        if self._http is not None:
            return await self._http.topics_of_namespace(namespace)
        request = pb.GetTopicsOfNamespaceRequest(namespace=namespace)
        response = await self.unary(self._service_stub().GetTopicsOfNamespace, request, None)
        return list(response.topics)

    def metadata(self, topic: str | None, params: Params) -> Metadata:
        base: Params = {
            Header.TOPIC: topic,
            Header.LISTENER_NAME: self._listener_name,
            AUTHORIZATION: self._authentication.authorization() if self._authentication else None,
        }
        return call_metadata({**base, **params})

    async def unary(
        self,
        method: Callable[..., Awaitable[Any]],
        request: Any,
        topic: str | None,
        route: Mapping[str, str] | None = None,
    ) -> Any:
        """One unary call (see :meth:`_call`), after a two-way authentication's exchange
        when one is due. A call refused because the broker no longer takes the role token it
        carried (expired early, its key revoked) runs the exchange again and is tried once
        more; a wrong password fails the exchange itself with AuthenticationError.
        ``route``: the headers that send it through a proxy (:meth:`LookupResult.route`)."""
        auth = self._authentication
        route = route or {}
        exchange = self._exchange_on(method, request, topic, route)
        try:
            if auth is not None:
                await auth.prepare(exchange)
            metadata = self.metadata(topic, {**route})
            try:
                return await self._call(method, request, metadata)
            except grpc.aio.AioRpcError as exc:
                sent = dict(metadata).get(AUTHORIZATION)
                if auth is None or exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                    raise
                if not auth.refused(sent if isinstance(sent, str) else None):
                    raise
                await auth.prepare(exchange)
            return await self._call(method, request, self.metadata(topic, {**route}))
        except grpc.aio.AioRpcError as exc:
            raise error_from_rpc(exc) from None

    async def _call(
        self, method: Callable[..., Awaitable[Any]], request: Any, metadata: Metadata
    ) -> Any:
        """One call, tried a second time at once when it found the broker unreachable: a
        connection that was cut silently fails the first call made on it, and the second
        dials afresh. A broker that is really down (or refuses the TLS handshake) still fails
        promptly; reconnecting handles add their own backoff."""
        try:
            return await method(request, metadata=metadata, timeout=self._operation_timeout_s)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise
        return await method(request, metadata=metadata, timeout=self._operation_timeout_s)

    def _exchange_on(
        self,
        method: Callable[..., Awaitable[Any]],
        request: Any,
        topic: str | None,
        route: Mapping[str, str],
    ) -> Exchange:
        """A two-way authentication's steps ride on the call about to be made (PIP-59): each
        ends UNAUTHENTICATED with the broker's answer before the broker does anything for it.
        Any other failure (the broker unreachable) is the call's own, raised as it would be."""

        async def exchange(authorization: str) -> ExchangeAnswer:
            metadata = self.metadata(topic, {**route, AUTHORIZATION: authorization})
            try:
                await self._call(method, request, metadata)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAUTHENTICATED:
                    raise
                trailers = {k: v for k, v in exc.trailing_metadata() or () if isinstance(v, str)}
                return ExchangeAnswer(exc.code(), exc.details() or "", trailers)
            return ExchangeAnswer(grpc.StatusCode.OK, "", {})

        return exchange
