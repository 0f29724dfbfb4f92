"""A topic's subscriptions in Pulsar's admin API v2 (PersistentTopics), over
:class:`~pulsar_grpc.broker.topics.cursor_admin.CursorAdmin`:

- ``GET    .../{topic}/subscriptions``: the names;
- ``PUT    .../{topic}/subscription/{sub}`` with an optional MessageId body (``{"ledgerId": -1,
  "entryId": -1}`` earliest, Long.MAX both latest, the default): 409 when it exists;
- ``DELETE .../{topic}/subscription/{sub}[?force=true]``: 412 "Subscription has active
  connected consumers" unless forced;
- ``POST   .../{topic}/subscription/{sub}/skip/{n}``, ``.../skip_all`` (clear backlog);
- ``POST   .../{topic}/subscription/{sub}/resetcursor/{timestamp}`` and ``.../resetcursor``
  with a ResetCursorData body (``ledgerId``, ``entryId``, ``batchIndex``, ``isExcluded``,
  ``partitionIndex``): the subscription's consumers are disconnected and read again from there;
- ``GET    .../{topic}/subscription/{sub}/position/{n}``: peek the n-th unacknowledged entry,
  answered as Pulsar does: the payload as body, the metadata in X-Pulsar-* headers;
- ``GET    .../{topic}/examinemessage?initialPosition=earliest|latest&messagePosition=n``.

On a partitioned topic, listing, creating, deleting, clearing and resetting to a time apply to
every partition; peeking, skipping, examining and resetting to a message id are per partition
(405, as Pulsar, unless the body names a partitionIndex).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import quote

from aiohttp import web

from pulsar_grpc.broker import errors as e
from pulsar_grpc.broker.json_text import json_value
from pulsar_grpc.broker.ledger import Entry, Position
from pulsar_grpc.broker.naming import TopicName
from pulsar_grpc.broker.service_parts import HasResources, HasTopics
from pulsar_grpc.broker.topics.cursor_admin import CursorAdmin, Force, From, Start, entry_headers
from pulsar_grpc.broker.topics.topic import PersistentTopic
from pulsar_grpc.broker.web.partition_fanout import FanoutPort, PartitionCall, on_each_partition
from pulsar_grpc.broker.web.partitioned_stats import PartitionedStatsPort, partitioned_stats
from pulsar_grpc.broker.web.topics_admin import TOPIC, Right, TopicsAdmin, forced, topic_of

__all__ = ["SubscriptionsAdmin"]

SUBSCRIPTION = TOPIC + "/subscription/{subscription}"
# Java's Long.MAX_VALUE: MessageId.latest's ledgerId and entryId.
LONG_MAX = (1 << 63) - 1


class SubscriptionsPort(FanoutPort, PartitionedStatsPort, HasResources, HasTopics, Protocol):
    """What the subscriptions routes use: partitioned metadata, the loaded topics, and the
    fan-out of a call or a stats read to each partition's owner."""


class SubscriptionsAdmin:
    """The routes; ``add_routes`` registers them on the web application."""

    def __init__(self, service: SubscriptionsPort, topics: TopicsAdmin) -> None:
        self.service = service
        self.topics = topics

    def add_routes(self, app: web.Application) -> None:
        app.add_routes(
            [
                web.get(TOPIC + "/subscriptions", self.list),
                web.put(SUBSCRIPTION, self.create),
                web.delete(SUBSCRIPTION, self.delete),
                web.post(SUBSCRIPTION + "/skip_all", self.clear_backlog),
                web.post(SUBSCRIPTION + "/skip/{n}", self.skip),
                web.post(SUBSCRIPTION + "/resetcursor/{timestamp}", self.reset_to_time),
                web.post(SUBSCRIPTION + "/resetcursor", self.reset_to_message_id),
                web.get(SUBSCRIPTION + "/position/{n}", self.peek),
                web.get(TOPIC + "/examinemessage", self.examine),
            ]
        )

    # ------------------------------------------------------------ which topics

    async def _authorized(self, request: web.Request, right: Right) -> TopicName:
        """The topic the path names, once the caller is found to have ``right``: checked
        before anything else (body, numbers, partitions), so that a stranger learns nothing
        of the topic's shape."""
        topic = topic_of(request)
        await self.topics.check(request, topic, right)
        return topic

    async def _apply(
        self,
        request: web.Request,
        topic: TopicName,
        call: PartitionCall,
        local: Callable[[PersistentTopic], Awaitable[Any]],
    ) -> list[Any]:
        """``local`` on ``topic`` (authorized), or on each partition of a partitioned one
        (``call`` made to the partition's owner where another broker serves it)."""
        partitions = await self._partitions(topic)
        if not partitions:
            return [await local(await self.topics.served_topic(request, topic))]

        async def loaded(partition: TopicName) -> Any:
            return await local(await self.service.topics.get_topic(partition, create=False))

        return await on_each_partition(
            self.service, self.topics.broker_client, topic, partitions, call, loaded
        )

    async def _one(self, request: web.Request, topic: TopicName, what: str) -> PersistentTopic:
        """``topic`` (authorized), loaded here; a partitioned one is refused (405, as
        Pulsar)."""
        if await self._partitions(topic):
            raise web.HTTPMethodNotAllowed(
                request.method,
                [],
                text=json.dumps({"reason": f"{what} on a partitioned topic is not allowed"}),
                content_type="application/json",
            )
        return await self.topics.served_topic(request, topic)

    async def _partitions(self, topic: TopicName) -> int:
        return await self.service.resources.get_partitioned_metadata(
            topic.full_name, auto_create=False
        )

    async def _refuse_if_connected(self, topic: TopicName, partitions: int, name: str) -> None:
        """412 when the subscription has consumers on any partition: checked on all of them
        before any is deleted, so that a refused delete deletes nothing (as Pulsar's delete
        of a partitioned topic)."""
        gathered = await partitioned_stats(
            self.service, self.topics.broker_client, topic, partitions
        )
        for stats in gathered["partitions"].values():
            subscription = (stats.get("subscriptions") or {}).get(name) or {}
            if subscription.get("consumers"):
                raise e.PreconditionFailedError("Subscription has active connected consumers")

    # ------------------------------------------------------------ routes

    async def list(self, request: web.Request) -> web.Response:
        topic = await self._authorized(request, Right.LOOKUP)

        async def names(loaded: PersistentTopic) -> list[str]:
            return CursorAdmin(loaded).names()

        answers = await self._apply(request, topic, PartitionCall("GET", "/subscriptions"), names)
        return web.json_response(sorted({n for answer in answers for n in answer}))

    async def create(self, request: web.Request) -> web.Response:
        topic = await self._authorized(request, Right.TENANT_ADMIN)
        body = await request.read()
        start = _start(_json(body))
        name = request.match_info["subscription"]

        async def create(loaded: PersistentTopic) -> None:
            await CursorAdmin(loaded).create(name, start)

        await self._apply(request, topic, _call("PUT", name, "", body), create)
        return web.Response(status=204)

    async def delete(self, request: web.Request) -> web.Response:
        topic = await self._authorized(request, Right.TENANT_ADMIN)
        force = Force.DISCONNECT if forced(request) else Force.REFUSE_IF_CONNECTED
        name = request.match_info["subscription"]
        if force is Force.REFUSE_IF_CONNECTED:
            partitions = await self._partitions(topic)
            if partitions:
                await self._refuse_if_connected(topic, partitions, name)

        async def delete(loaded: PersistentTopic) -> None:
            await CursorAdmin(loaded).delete(name, force)

        call = _call("DELETE", name, "", query={"force": str(forced(request)).lower()})
        await self._apply(request, topic, call, delete)
        return web.Response(status=204)

    async def clear_backlog(self, request: web.Request) -> web.Response:
        topic = await self._authorized(request, Right.TENANT_ADMIN)
        name = request.match_info["subscription"]

        async def clear(loaded: PersistentTopic) -> None:
            await CursorAdmin(loaded).clear_backlog(name)

        await self._apply(request, topic, _call("POST", name, "/skip_all"), clear)
        return web.Response(status=204)

    async def skip(self, request: web.Request) -> web.Response:
        named = await self._authorized(request, Right.TENANT_ADMIN)
        n = _number(request.match_info["n"], "number of messages")
        topic = await self._one(request, named, "Skipping messages")
        await CursorAdmin(topic).skip(request.match_info["subscription"], n)
        return web.Response(status=204)

    async def reset_to_time(self, request: web.Request) -> web.Response:
        topic = await self._authorized(request, Right.TENANT_ADMIN)
        timestamp = _number(request.match_info["timestamp"], "timestamp")
        name = request.match_info["subscription"]

        async def reset(loaded: PersistentTopic) -> None:
            await CursorAdmin(loaded).reset_to_time(name, timestamp)

        call = _call("POST", name, f"/resetcursor/{timestamp}")
        await self._apply(request, topic, call, reset)
        return web.Response(status=204)

    async def reset_to_message_id(self, request: web.Request) -> web.Response:
        named = await self._authorized(request, Right.TENANT_ADMIN)
        body = _json(await request.read())
        if not isinstance(body, dict):
            raise e.InvalidArgumentError("the body must be a JSON ResetCursorData object")
        position = _position(body)
        partition = _int(body, "partitionIndex", -1)
        if partition >= 0 and await self._partitions(named):
            topic = await self.topics.served_topic(request, named.get_partition(partition))
        else:
            topic = await self._one(request, named, "Resetting a cursor to a position")
        admin = CursorAdmin(topic)
        if position is None:  # earliest or latest
            ledger = topic.ledger
            position = ledger.first_position() if _is_earliest(body) else ledger.end_position()
        await admin.reset_to_position(
            request.match_info["subscription"],
            position,
            _int(body, "batchIndex", -1),
            bool(body.get("isExcluded", False)),
        )
        return web.Response(status=204)

    async def peek(self, request: web.Request) -> web.Response:
        named = await self._authorized(request, Right.CONSUME)
        n = _number(request.match_info["n"], "message position")
        topic = await self._one(request, named, "Peeking messages")
        entry = await CursorAdmin(topic).peek(request.match_info["subscription"], n)
        return _entry_response(topic, entry)

    async def examine(self, request: web.Request) -> web.Response:
        named = await self._authorized(request, Right.CONSUME)
        initial = request.query.get("initialPosition", "latest").lower()
        if initial not in (f.value for f in From):
            raise e.InvalidArgumentError(
                f"initialPosition must be earliest or latest, got {initial!r}"
            )
        n = _number(request.query.get("messagePosition", "1"), "messagePosition")
        topic = await self._one(request, named, "Examining a message")
        entry = await CursorAdmin(topic).examine(From(initial), n)
        return _entry_response(topic, entry)


def _entry_response(topic: PersistentTopic, entry: Entry) -> web.Response:
    headers, body = entry_headers(entry, topic.partition)
    content_type = headers.pop("Content-Type")
    return web.Response(body=body, headers=headers, content_type=content_type)


def _call(
    method: str,
    subscription: str,
    suffix: str,
    body: bytes | None = None,
    query: dict[str, str] | None = None,
) -> PartitionCall:
    """The call on a subscription as a partition's owner is asked it."""
    path = f"/subscription/{quote(subscription, safe='')}{suffix}"
    return PartitionCall(method, path, query or {}, body)


def _json(body: bytes) -> Any:
    text = body.decode(errors="replace").strip()
    if not text:
        return None
    try:
        return json_value(text)
    except ValueError:
        raise e.InvalidArgumentError(f"the body is not JSON: {text[:60]!r}") from None


def _number(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise e.InvalidArgumentError(f"{what} must be a number, got {text!r}") from None


def _int(body: dict[str, Any], key: str, default: int) -> int:
    value = body.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise e.InvalidArgumentError(f"{key} must be a number, got {value!r}")
    return value


def _is_earliest(body: dict[str, Any]) -> bool:
    return _int(body, "ledgerId", LONG_MAX) == -1 and _int(body, "entryId", LONG_MAX) == -1


def _position(body: dict[str, Any]) -> Position | None:
    """The MessageId's entry; None for MessageId.earliest or MessageId.latest."""
    ledger, entry = _int(body, "ledgerId", LONG_MAX), _int(body, "entryId", LONG_MAX)
    if (ledger, entry) in ((-1, -1), (LONG_MAX, LONG_MAX)):
        return None
    if ledger < 0 or entry < 0:
        raise e.InvalidArgumentError(f"not a message id: ledgerId {ledger}, entryId {entry}")
    return Position(ledger, entry)


def _start(body: Any) -> Start:
    """Where a created subscription starts: the body's MessageId (latest without one)."""
    if body is None:
        return Start()
    if not isinstance(body, dict):
        raise e.InvalidArgumentError("the body must be a JSON MessageId object")
    position = _position(body)
    if position is not None:
        return Start(end=None, position=position)
    return Start(end=From.EARLIEST if _is_earliest(body) else From.LATEST)
