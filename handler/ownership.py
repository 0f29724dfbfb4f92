"""The WatchTopicOwnership RPC: a client's topics' bundle ownership, streamed as it changes.

The broker side is broker/cluster/ownership_watch.py; this turns its events into responses with
the owner's addresses for the call's listener, as a Lookup would answer them (see
docs/protocol.md, "Watching topic ownership"). The call is authorized as a Lookup of each topic:
what it tells is what lookups tell.
"""

from __future__ import annotations

import grpc
from grpc import aio

from pulsar_grpc.broker.cluster.ownership_watch import OwnershipEvent, OwnershipState
from pulsar_grpc.broker.errors import BrokerError
from pulsar_grpc.broker.protocol import BrokerContext
from pulsar_grpc.broker.security.authorization import TopicOperation
from pulsar_grpc.handler import advertised, codec
from pulsar_grpc.handler.access import authorize_topic
from pulsar_grpc.handler.errors import abort
from pulsar_grpc.interceptors import current
from pulsargrpc.v1 import pulsar_pb2 as pb

_STATES = {
    OwnershipState.OWNED: pb.OWNERSHIP_STATE_OWNED,
    OwnershipState.UNLOADING: pb.OWNERSHIP_STATE_UNLOADING,
    OwnershipState.UNOWNED: pb.OWNERSHIP_STATE_UNOWNED,
}


async def watch_topic_ownership(
    broker: BrokerContext, raw: bytes, context: aio.ServicerContext
) -> None:
    """Serve one watch until the client cancels it or the broker ends it (UNAVAILABLE)."""
    watches = broker.ownership_watches
    if watches is None:
        await context.abort(
            grpc.StatusCode.UNIMPLEMENTED,
            "a standalone broker's bundles never move: there is no ownership to watch",
        )
        return
    try:
        broker.check_open()
        request = codec.parse(pb.WatchTopicOwnershipRequest, raw)
        for topic in request.topics:
            await authorize_topic(broker, topic, TopicOperation.LOOKUP)
        watch = await watches.watch(list(request.topics))
    except Exception as exc:
        await abort(context, exc)
    ctx = current()
    listener = request.listener_name or ctx.listener_name
    try:
        while True:
            event = await watch.next()
            await context.write(_response(broker, event, listener, ctx.bind_listener))
    except BrokerError as exc:  # the watch ended: this broker closes or lost its session
        await abort(context, exc)
    finally:
        watch.close()


def _response(
    broker: BrokerContext, event: OwnershipEvent, listener: str | None, via: str | None
) -> pb.WatchTopicOwnershipResponse:
    response = pb.WatchTopicOwnershipResponse(
        state=_STATES[event.ownership.state],
        bundle=str(event.bundle),
        topics=event.topics,
        initial=event.initial,
    )
    owner = event.ownership.owner
    if owner is not None and event.ownership.state is OwnershipState.OWNED:
        try:
            grpc_url, grpc_url_tls = advertised.grpc_urls(broker.owner_lookup(owner, listener, via))
        except BrokerError:  # the owner advertises no such listener: a lookup will say so
            grpc_url = grpc_url_tls = None
        response.grpc_url = grpc_url or ""
        response.grpc_url_tls = grpc_url_tls or ""
    return response
