"""An admin call on a partitioned topic applied to each partition where it is served (Pulsar's
PersistentTopicsBase forwards a partitioned topic's calls to each partition the same way), or
on each topic of a namespace being deleted.

Each partition is looked up on the internal listener, as :mod:`.partitioned_stats` does: served
here, the call runs locally on the loaded partition; served elsewhere, the same call (method,
path after the topic, query, body) is made to that broker's admin API for the partition, with
this broker's own credentials (the caller's rights were checked here), following its
redirects. The partitions are done one after another, in order; the first refusal ends the call
with the owner's status and reason.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from yarl import URL

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.service_parts import HasIdentity, HasListeners, HasNamespaces
from pulsar_grpc.broker.web.broker_client import REASON_CHARS, BrokerClient
from pulsar_grpc.broker.web.partitioned_stats import names_this_broker

__all__ = ["Absent", "PartitionCall", "on_each_partition", "on_each_topic"]

# One partition's call on another broker, redirects included (an unload closes a topic).
OWNER_TIMEOUT_S = 60.0

# An owner's refusal, as the same error here (so the caller gets the owner's status).
_REFUSALS: dict[int, type[e.BrokerError]] = {
    400: e.InvalidArgumentError,
    404: e.NotFoundError,
    409: e.NotAllowedError,
    412: e.PreconditionFailedError,
}


class FanoutPort(HasIdentity, HasListeners, HasNamespaces, Protocol):
    """What sending a call to each topic's owner uses: lookups and this broker's addresses."""


class Absent(enum.Enum):
    """What a partition that does not exist (404) does to the call."""

    FAILS = "fails"
    IGNORED = "ignored"  # e.g. deleting: a partition nobody wrote to has nothing to delete


@dataclass(frozen=True)
class PartitionCall:
    """The call as another broker is asked it for a partition: ``suffix`` is the path after the
    topic (already URL-encoded), e.g. ``/subscription/s/skip_all``."""

    method: str
    suffix: str
    query: dict[str, str] = field(default_factory=dict)
    body: bytes | None = None
    absent: Absent = Absent.FAILS


async def on_each_partition(
    service: FanoutPort,
    broker_client: BrokerClient,
    topic: TopicName,
    partitions: int,
    call: PartitionCall,
    local: Callable[[TopicName], Awaitable[Any]],
) -> list[Any]:
    """Each partition's answer: ``local``'s (given the partition) where it is served here, the
    owner's JSON answer (None when empty) elsewhere; None for an absent partition that
    ``call`` ignores."""
    names = [topic.get_partition(i) for i in range(partitions)]
    return await on_each_topic(service, broker_client, names, call, local)


async def on_each_topic(
    service: FanoutPort,
    broker_client: BrokerClient,
    topics: list[TopicName],
    call: PartitionCall,
    local: Callable[[TopicName], Awaitable[Any]],
) -> list[Any]:
    """:func:`on_each_partition` for any topics (a namespace's, when it is deleted)."""
    answers: list[Any] = []
    timeout = aiohttp.ClientTimeout(total=OWNER_TIMEOUT_S)
    async with broker_client.session(timeout) as http:
        for topic in topics:
            try:
                answers.append(await _one(service, broker_client, http, topic, call, local))
            except e.NotFoundError:
                if call.absent is Absent.FAILS:
                    raise
                answers.append(None)
    return answers


async def _one(
    service: FanoutPort,
    broker_client: BrokerClient,
    http: aiohttp.ClientSession,
    partition: TopicName,
    call: PartitionCall,
    local: Callable[[TopicName], Awaitable[Any]],
) -> Any:
    listener = service.listeners.internal_listener_name
    result = await service.namespaces.lookup_topic(partition.full_name, listener, None)
    if not result.redirect and names_this_broker(service, result):
        return await local(partition)
    base = broker_client.web_url(result.http_url, result.http_url_tls)
    if base is None:
        raise e.ServiceNotReadyError(f"the owner of {partition} has no web address")
    url = (
        URL(base)
        .with_path(f"/admin/v2/{partition.rest_path}{call.suffix}", encoded=True)
        .with_query(
            {
                **call.query,
                "authoritative": str(result.authoritative).lower(),
                "listenerName": result.listener,
            }
        )
    )
    return await _ask(http, url, call, partition)


async def _ask(
    http: aiohttp.ClientSession, url: URL, call: PartitionCall, partition: TopicName
) -> Any:
    try:
        async with http.request(call.method, url, data=call.body) as response:
            text = await response.text()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise e.ServiceNotReadyError(
            f"the owner of {partition} could not be reached: {exc!r}"
        ) from None
    if status < 300:
        try:
            return json.loads(text) if text else None
        except ValueError:
            return text
    try:
        reason = str(json.loads(text)["reason"])
    except (ValueError, KeyError, TypeError):
        reason = text[:REASON_CHARS]
    error = _REFUSALS.get(status, e.ServiceNotReadyError)
    raise error(f"{partition}: {reason}")
