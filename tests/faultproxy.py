"""A TCP proxy for tests that breaks connections on purpose (as asyncpg's fuzzing proxy).

It listens on a free 127.0.0.1 port and forwards every connection to a target address. A test
puts it between the client and a broker (the broker advertises the proxy's address, so lookups
send streams through it too) and then:

- :meth:`FaultProxy.cut` aborts every open connection mid-stream, as a network failure or a
  broker crash would look to the client;
- :attr:`FaultProxy.delay_s` holds each chunk of data back for a while, in both directions;
- :attr:`FaultProxy.refusing` closes new connections at once (the broker is unreachable);
- :meth:`FaultProxy.blackhole` makes the network silent: open connections, and those made
  while it lasts, stay open but nothing passes in either direction (a host gone, a dropped
  route: no reset reaches anyone); :meth:`FaultProxy.heal` ends it by resetting those
  connections, as each end's kernel answers the other's packets once they get through again,
  and new connections forward normally.

It runs on the event loop of the test that starts it; :class:`ProxyThread` runs one on a loop
of its own instead, for proxies that must keep forwarding while the test blocks (the ZooKeeper
and PostgreSQL links of broker processes, which a synchronous fixture starts and waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from pulsar_grpc.cli.local_servers import free_port

__all__ = ["FaultProxy", "ProxyThread", "free_port"]


class FaultProxy:
    def __init__(self, target_port: int, port: int = 0, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = port
        self.delay_s = 0.0
        self.refusing = False
        self.silent = False  # blackholed: new connections forward nothing until heal()
        self.accepted = 0  # connections accepted, cut ones included
        self._server: asyncio.Server | None = None
        self._pairs: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._silenced: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter]] = set()
        self._healed = asyncio.Event()  # clear while a blackhole lasts
        self._healed.set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def cut(self) -> int:
        """Abort every open connection (both sides see a reset; a blackhole ends); return how
        many."""
        pairs = list(self._pairs)
        for client, upstream in pairs:
            client.transport.abort()
            upstream.transport.abort()
        self._pairs.clear()
        self._silenced.clear()
        self.silent = False
        self._healed.set()
        return len(pairs)

    def blackhole(self) -> int:
        """Stop forwarding on every open connection and on new ones, without closing any;
        return how many were open."""
        self.silent = True
        self._healed.clear()
        self._silenced.update(self._pairs)
        return len(self._pairs)

    def heal(self) -> int:
        """Forward again: reset the connections the blackhole held (their ends gave up on
        them or will, on the first packet); return how many."""
        self.silent = False
        self._healed.set()
        held, self._silenced = list(self._silenced), set()
        for client, upstream in held:
            client.transport.abort()
            upstream.transport.abort()
            self._pairs.discard((client, upstream))
        return len(held)

    @property
    def open_connections(self) -> int:
        return len(self._pairs)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        self.cut()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        pair = (writer, up_writer)
        self._pairs.add(pair)
        if self.silent:
            self._silenced.add(pair)
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, pair)),
            asyncio.ensure_future(self._pump(up_reader, writer, pair)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            if pair in self._silenced:  # one end closed: the other cannot know yet
                await self._healed.wait()
        finally:
            for pump in pumps:
                pump.cancel()
                self._tasks.discard(pump)
            self._pairs.discard(pair)
            for w in pair:
                w.transport.abort()

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pair: tuple[asyncio.StreamWriter, asyncio.StreamWriter],
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await reader.read(65536):
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if pair in self._silenced:
                    continue  # lost on the way
                writer.write(data)
                await writer.drain()


class ProxyThread:
    """A :class:`FaultProxy` serving from a thread and event loop of its own, driven by plain
    (blocking) calls from any thread or loop: ``cut``, ``blackhole``, ``heal``, ``refuse``."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.proxy = self._call(FaultProxy(target_port, target_host=target_host).start)

    def _call(self, fn: Callable[[], Any]) -> Any:
        """fn() on the proxy's loop (awaited when it returns a coroutine); its result."""

        async def run() -> Any:
            result = fn()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    @property
    def port(self) -> int:
        return self.proxy.port

    @property
    def address(self) -> str:
        return self.proxy.address

    def cut(self) -> int:
        """Reset every open connection (new ones forward normally)."""
        return int(self._call(self.proxy.cut))

    def blackhole(self) -> int:
        """Silence open and new connections until :meth:`heal`."""
        return int(self._call(self.proxy.blackhole))

    def heal(self) -> int:
        """End a blackhole (resetting the connections it held) or a refusal."""

        def heal() -> int:
            self.proxy.refusing = False
            return self.proxy.heal()

        return int(self._call(heal))

    def refuse(self) -> int:
        """Reset every open connection and refuse new ones until :meth:`heal`: the server is
        unreachable and says so at once (a closed port, a firewall's reset)."""

        def refuse() -> int:
            self.proxy.refusing = True
            return self.proxy.cut()

        return int(self._call(refuse))

    def close(self) -> None:
        if self._thread.is_alive():
            self._call(self.proxy.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
            self._loop.close()
