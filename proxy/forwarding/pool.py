"""A few HTTP/2 connections per broker, many client streams over each.

Pulsar's proxy opens one broker connection per client connection. Here every client stream to a
broker is one HTTP/2 stream on one of ``connectionsPerBroker`` channels to it (4 by default),
taken in turn: thousands of client streams cost the broker a handful of connections, while
more than one connection lets the heavy streams of one broker progress in parallel (each gRPC
connection is one TCP flow-control window and one transport read loop in grpc core) and a
single slow connection does not hold up every client. Each channel gets its own subchannel
pool, or grpc core would share one connection between channels with identical arguments.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import grpc
from grpc import aio

from pulsar_grpc.client._channels import parse_service_url


class BrokerChannels:
    """``connections`` channels per broker URL, opened on first use, closed with the pool."""

    def __init__(
        self,
        connections: int,
        options: Sequence[tuple[str, Any]],
        tls_credentials: Callable[[], grpc.ChannelCredentials],
    ) -> None:
        self._connections = connections
        self._options = [*options, ("grpc.use_local_subchannel_pool", 1)]
        self._tls_credentials = tls_credentials
        self._channels: dict[str, list[aio.Channel]] = {}
        self._turns: dict[str, itertools.count[int]] = {}

    def channel(self, url: str) -> aio.Channel:
        """The next channel to the broker at ``url`` (grpc:// or grpc+ssl://)."""
        channels = self._channels.get(url)
        if channels is None:
            target, tls = parse_service_url(url)
            channels = self._channels[url] = [
                aio.secure_channel(target, self._tls_credentials(), options=self._options)
                if tls
                else aio.insecure_channel(target, options=self._options)
                for _ in range(self._connections)
            ]
            self._turns[url] = itertools.count()
        return channels[next(self._turns[url]) % len(channels)]

    async def close(self) -> None:
        """Close every channel (their calls end CANCELLED)."""
        channels = [c for group in self._channels.values() for c in group]
        self._channels.clear()
        await asyncio.gather(*(c.close() for c in channels))
