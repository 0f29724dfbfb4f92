"""Lookups answered by the proxy (PIP-1: "the proxy needs to be able to respond to both lookup
and partitions metadata without incurring in redirection to the clients").

The proxy asks a live broker (each in turn), follows Redirects itself (at most
maxLookupRedirects, passing ``authoritative`` on as Pulsar's clients do) and keeps the owner's
gRPC URL, the one it reaches brokers by (grpc+ssl with tlsEnabledWithBroker). A client's lookup
is answered with the proxy's own address and that owner URL (see docs/protocol.md).

Calls that come without x-pulsar-proxy-to-broker-url (a client that knows nothing of proxies)
are routed by the owner cache: an owner looked up less than :data:`OWNER_TTL_S` ago, dropped
as soon as a call forwarded there ends UNAVAILABLE (the topic moved, the broker stopped).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence

import grpc
from grpc import aio

from pulsar_grpc.broker.errors import BrokerError, ServiceNotReadyError
from pulsar_grpc.proxy.brokers import BrokerDirectory
from pulsar_grpc.proxy.forwarding.pool import BrokerChannels
from pulsargrpc.v1 import pulsar_pb2 as pb

OWNER_TTL_S = 5.0
MAX_CACHED_OWNERS = 10000
_LOOKUP = "/pulsargrpc.v1.PulsarService/Lookup"

Metadata = Sequence[tuple[str, str | bytes]]


class LookupRedirectsExceeded(ServiceNotReadyError):
    """The brokers kept redirecting (a bundle moving back and forth): the client retries."""


class BrokerLookups:
    """Owner lookups through the brokers, and the short-lived owner cache."""

    def __init__(
        self,
        brokers: BrokerDirectory,
        channels: BrokerChannels,
        tls_with_broker: bool,
        max_redirects: int,
        timeout_s: float,
    ) -> None:
        self._brokers = brokers
        self._channels = channels
        self._tls = tls_with_broker
        self._max_redirects = max_redirects
        self._timeout_s = timeout_s
        self._owners: OrderedDict[str, tuple[str, float]] = OrderedDict()

    async def owner(self, topic: str, metadata: Metadata) -> str:
        """The owner broker's URL for ``topic``: cached, else looked up. Errors of the broker's
        lookup (an unknown namespace, a refused role) are raised as its AioRpcError."""
        cached = self._owners.get(topic)
        if cached is not None and time.monotonic() - cached[1] < OWNER_TTL_S:
            return cached[0]
        return await self.lookup(topic, metadata)

    def forget(self, topic: str) -> None:
        """A call routed to the cached owner ended UNAVAILABLE: look up again next time."""
        self._owners.pop(topic, None)

    async def lookup(self, topic: str, metadata: Metadata) -> str:
        """Look ``topic`` up through a live broker, following Redirects."""
        request = pb.LookupRequest(topic=topic)
        url, response = await self._ask_live_broker(request, metadata)
        hops = [url]
        while response.response == pb.LookupResponse.Redirect:
            url = self._url_of(response)
            hops.append(url)
            if len(hops) > self._max_redirects + 1:
                raise LookupRedirectsExceeded(
                    f"lookup of {topic} was redirected more than {self._max_redirects} times: "
                    + " -> ".join(hops)
                )
            request.authoritative = response.authoritative
            response = await self._ask(url, request, metadata)
        owner = self._url_of(response)
        self._remember(topic, owner)
        return owner

    async def _ask_live_broker(
        self, request: pb.LookupRequest, metadata: Metadata
    ) -> tuple[str, pb.LookupResponse]:
        """Ask the live brokers in turn. One that answers UNAVAILABLE (a broker killed a
        moment ago still has its load report until its session expires) is passed over for
        the next, as long as there is one not yet asked: a lookup through the proxy fails only
        when no broker answers it."""
        asked: set[str] = set()
        while True:
            url = await self._brokers.service_url()
            try:
                return url, await self._ask(url, request, metadata)
            except aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE or url in asked:
                    raise
                asked.add(url)

    async def _ask(
        self, url: str, request: pb.LookupRequest, metadata: Metadata
    ) -> pb.LookupResponse:
        method = self._channels.channel(url).unary_unary(
            _LOOKUP,
            request_serializer=pb.LookupRequest.SerializeToString,
            response_deserializer=pb.LookupResponse.FromString,
        )
        response: pb.LookupResponse = await method(
            request, metadata=metadata, timeout=self._timeout_s
        )
        return response

    def _url_of(self, response: pb.LookupResponse) -> str:
        url = response.grpc_url_tls if self._tls else response.grpc_url
        if not url:
            scheme = "grpc+ssl" if self._tls else "grpc"
            raise BrokerError(f"the broker's lookup answered no {scheme} address")
        self._brokers.learn(url)
        return url

    def _remember(self, topic: str, url: str) -> None:
        self._owners[topic] = (url, time.monotonic())
        self._owners.move_to_end(topic)
        while len(self._owners) > MAX_CACHED_OWNERS:
            self._owners.popitem(last=False)
