"""What the proxy does with each call of pulsargrpc.v1.PulsarService.

- Lookup: answered by the proxy (its own address, proxy_through_service_url, the owner's URL);
- GetPartitionedTopicMetadata, GetTopicsOfNamespace: asked of any live broker, answered as is;
- Produce, Consume and the unary calls about one topic: forwarded byte for byte to the broker
  the call names in x-pulsar-proxy-to-broker-url (checked to be a live broker), or to the
  topic's owner as the proxy looks it up.

Every call to a broker carries the proxy's own credentials (brokerClientAuthentication*) and,
when clients authenticate at the proxy, the client's role as x-pulsar-original-principal: the
broker authorizes the client. Without credentials of its own the proxy passes the client's
``authorization`` on unchanged, and the broker authenticates the client itself.
The client's listener header and any original principal it sent are never passed on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError
from grpc import aio

from pulsar_grpc.broker.errors import (
    AuthenticationError,
    BrokerError,
    InvalidArgumentError,
    InvalidTopicNameError,
    ServiceNotReadyError,
)
from pulsar_grpc.broker.errors import ServerError as Code
from pulsar_grpc.broker.security.expiry import CredentialExpiryCheck
from pulsar_grpc.client._auth import Authentication
from pulsar_grpc.handler.errors import abort
from pulsar_grpc.interceptors.context import current_or_none
from pulsar_grpc.interceptors.headers import AUTHORIZATION, Header
from pulsar_grpc.proxy.brokers import BrokerDirectory
from pulsar_grpc.proxy.forwarding.pool import BrokerChannels
from pulsar_grpc.proxy.forwarding.relay import Metadata, end_as, relay_stream, relay_unary
from pulsar_grpc.proxy.lookup import BrokerLookups
from pulsar_grpc.proxy.metrics import LookupKind, ProxyStats, Route
from pulsargrpc.v1 import pulsar_pb2 as pb

log = logging.getLogger(__name__)

SERVICE_NAME = "pulsargrpc.v1.PulsarService"
_PREFIX = f"/{SERVICE_NAME}/"
# Never passed on: the client's credentials (replaced by the proxy's own), what only the proxy
# may say about the client, where the client wanted to go, and what belongs to the connection.
_NOT_FORWARDED = frozenset(
    {
        AUTHORIZATION,
        Header.ORIGINAL_PRINCIPAL,
        Header.PROXY_TO_BROKER_URL,
        Header.LISTENER_NAME,
        "user-agent",
        "te",
        "content-type",
    }
)
# gRPC's own headers (deadline, encoding, ...) and HTTP/2 pseudo-headers: the channel's.
_RESERVED = ("grpc-", ":")
# Unary calls about one topic, forwarded to its owner, and the request type naming the topic.
_TOPIC_CALLS: dict[str, Any] = {
    "GetLastMessageId": pb.GetLastMessageIdRequest,
    "GetSchema": pb.GetSchemaRequest,
    "GetOrCreateSchema": pb.GetOrCreateSchemaRequest,
}


class TooManyLookupsError(ServiceNotReadyError):
    """Over maxConcurrentLookupRequests: retryable, as Pulsar's proxy answers TooManyRequests."""

    code = Code.TooManyRequests


@dataclass(frozen=True, slots=True)
class OwnAddress:
    """What the proxy answers to lookups: its own URLs (None: no such port)."""

    grpc_url: str | None
    grpc_url_tls: str | None


class ProxyServicer:
    """The RPCs, served from raw bytes (nothing forwarded is ever decoded)."""

    def __init__(
        self,
        brokers: BrokerDirectory,
        channels: BrokerChannels,
        lookups: BrokerLookups,
        credentials: Authentication | None,
        authenticating: bool,
        own: Callable[[], OwnAddress],
        max_lookups: int,
        expiry: CredentialExpiryCheck,
        stats: ProxyStats,
    ) -> None:
        self._brokers = brokers
        self._channels = channels
        self._lookups = lookups
        self._credentials = credentials
        self._authenticating = authenticating
        self._own = own
        self._max_lookups = max_lookups
        self._lookups_in_flight = 0
        self._expiry = expiry
        self.stats = stats

    def handler(self) -> grpc.GenericRpcHandler:
        """Every method of the service, raw bytes in and out."""

        def stream(method: str) -> grpc.RpcMethodHandler:
            async def serve(requests: AsyncIterator[bytes], context: aio.ServicerContext) -> None:
                await self._stream(method, context)

            return grpc.stream_stream_rpc_method_handler(serve)

        def unary(serve: Any) -> grpc.RpcMethodHandler:
            return grpc.unary_unary_rpc_method_handler(serve)

        def about_topic(method: str) -> grpc.RpcMethodHandler:
            async def serve(raw: bytes, context: aio.ServicerContext) -> bytes:
                return await self._topic_unary(method, raw, context)

            return unary(serve)

        def any_broker(method: str, kind: LookupKind) -> grpc.RpcMethodHandler:
            async def serve(raw: bytes, context: aio.ServicerContext) -> bytes:
                return await self._any_broker(method, kind, raw, context)

            return unary(serve)

        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Produce": stream("Produce"),
                "Consume": stream("Consume"),
                "Lookup": unary(self._lookup),
                "GetPartitionedTopicMetadata": any_broker(
                    "GetPartitionedTopicMetadata", LookupKind.PARTITIONS_METADATA
                ),
                "GetTopicsOfNamespace": any_broker(
                    "GetTopicsOfNamespace", LookupKind.TOPICS_OF_NAMESPACE
                ),
                **{name: about_topic(name) for name in _TOPIC_CALLS},
            },
        )

    # ------------------------------------------------------------ forwarding

    def _metadata(self, context: aio.ServicerContext) -> list[tuple[str, str | bytes]]:
        """The headers a call to a broker carries for this client call."""
        incoming = tuple(context.invocation_metadata() or ())
        forwarded: list[tuple[str, str | bytes]] = [
            (k, v) for k, v in incoming if k not in _NOT_FORWARDED and not k.startswith(_RESERVED)
        ]
        if self._credentials is not None:
            authorization = self._credentials.authorization()
            if authorization is not None:
                forwarded.append((AUTHORIZATION, authorization))
        else:
            forwarded += [(k, v) for k, v in incoming if k == AUTHORIZATION]
        # The client's role, for the broker to authorize, when the proxy calls as itself (a
        # broker believes an original principal only from a proxy role).
        ctx = current_or_none()
        acting_for = ctx.role if self._authenticating and ctx is not None else None
        if self._credentials is not None and acting_for is not None:
            forwarded.append((Header.ORIGINAL_PRINCIPAL, acting_for))
        return forwarded

    async def _target(
        self, context: aio.ServicerContext, topic: str | None, metadata: Metadata
    ) -> tuple[str, Route]:
        """The broker to forward to, and how the proxy knows it."""
        named = _header(context, Header.PROXY_TO_BROKER_URL)
        if named is not None:
            url, route = await self._brokers.check(named), Route.NAMED
        elif not topic:
            raise InvalidTopicNameError(f"missing call parameter {Header.TOPIC}")
        else:
            # A lookup the proxy makes for a client, under the same bound as the ones it
            # answers (maxConcurrentLookupRequests).
            with self._admitted(LookupKind.LOOKUP):
                url, route = await self._lookups.owner(topic, metadata), Route.LOOKED_UP
        self.stats.routes[route] += 1
        return url, route

    async def _stream(self, method: str, context: aio.ServicerContext) -> None:
        topic = _header(context, Header.TOPIC)
        metadata = self._metadata(context)
        try:
            url, route = await self._target(context, topic, metadata)
        except aio.AioRpcError as exc:  # the proxy's lookup failed at the broker
            await end_as(context, exc.code(), exc.details(), exc.trailing_metadata())
            return
        except BrokerError as exc:
            await abort(context, exc, topic)
        call = self._channels.channel(url).stream_stream(_PREFIX + method)(metadata=metadata)
        stats, peer = self.stats, context.peer()
        stats.stream_opened(method, peer)
        # The client's credentials expiring end the stream, as on a broker (which sees only
        # the proxy's): the relay is cancelled (and with it the broker call), then the
        # client is told why.
        relay = asyncio.current_task()
        assert relay is not None
        expired: list[AuthenticationError] = []

        def end(error: AuthenticationError) -> None:
            expired.append(error)
            relay.cancel()

        ctx = current_or_none()
        unwatch = self._expiry.watch(ctx.auth_expires_at if ctx else None, end)
        try:
            code = await relay_stream(context, call, stats)
        except asyncio.CancelledError:
            if not expired:
                raise
            relay.uncancel()
            await abort(context, expired[0])
        finally:
            unwatch()
            stats.stream_closed(method, peer)
        if route is Route.LOOKED_UP and topic and code == grpc.StatusCode.UNAVAILABLE:
            self._lookups.forget(topic)

    async def _topic_unary(self, method: str, raw: bytes, context: aio.ServicerContext) -> bytes:
        metadata = self._metadata(context)
        topic = _header(context, Header.TOPIC)
        try:
            if not topic:
                topic = _TOPIC_CALLS[method].FromString(raw).topic or None
            url, route = await self._target(context, topic, metadata)
        except aio.AioRpcError as exc:
            await end_as(context, exc.code(), exc.details(), exc.trailing_metadata())
            raise AssertionError("unreachable") from None
        except DecodeError as exc:
            await abort(context, InvalidArgumentError(f"not a {method} request: {exc}"))
        except BrokerError as exc:
            await abort(context, exc, topic)
        self.stats.unary_calls[method] += 1
        try:
            return await relay_unary(
                context,
                self._channels.channel(url).unary_unary(_PREFIX + method),
                raw,
                metadata,
                context.time_remaining(),
            )
        except aio.AbortError:
            if route is Route.LOOKED_UP and topic:
                self._lookups.forget(topic)  # cheap: the next call looks up again
            raise

    # ------------------------------------------------------------ answered by the proxy

    @contextlib.contextmanager
    def _admitted(self, kind: LookupKind) -> Iterator[None]:
        """Count one call answered by the proxy while it runs; TooManyLookupsError when
        maxConcurrentLookupRequests are running already."""
        if self._lookups_in_flight >= self._max_lookups:
            self.stats.rejected_lookups += 1
            raise TooManyLookupsError(
                f"too many lookups in flight at the proxy (maxConcurrentLookupRequests="
                f"{self._max_lookups}): try again"
            )
        self.stats.lookups[kind] += 1
        self._lookups_in_flight += 1
        try:
            yield
        finally:
            self._lookups_in_flight -= 1

    async def _any_broker(
        self, method: str, kind: LookupKind, raw: bytes, context: aio.ServicerContext
    ) -> bytes:
        try:
            with self._admitted(kind):
                url = await self._brokers.service_url()
                return await relay_unary(
                    context,
                    self._channels.channel(url).unary_unary(_PREFIX + method),
                    raw,
                    self._metadata(context),
                    context.time_remaining(),
                )
        except BrokerError as exc:
            await abort(context, exc)

    async def _lookup(self, raw: bytes, context: aio.ServicerContext) -> bytes:
        request = pb.LookupRequest()
        try:
            request.ParseFromString(raw)
            with self._admitted(LookupKind.LOOKUP):
                owner = await self._lookups.lookup(request.topic, self._metadata(context))
        except DecodeError as exc:
            await abort(context, InvalidArgumentError(f"not a LookupRequest: {exc}"))
        except aio.AioRpcError as exc:  # the broker's answer to the proxy's lookup
            await end_as(context, exc.code(), exc.details(), exc.trailing_metadata())
            raise AssertionError("unreachable") from None
        except BrokerError as exc:
            await abort(context, exc, request.topic)
        own = self._own()
        response = pb.LookupResponse(
            response=pb.LookupResponse.Connect,
            authoritative=True,
            grpc_url=own.grpc_url or "",
            grpc_url_tls=own.grpc_url_tls or "",
            proxy_through_service_url=True,
            proxy_to_broker_url=owner,
        )
        return response.SerializeToString()


def _header(context: aio.ServicerContext, name: str) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == name and isinstance(value, str):
            return value
    return None
