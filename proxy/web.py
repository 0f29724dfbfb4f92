"""The proxy's web port: /metrics (Prometheus) and /status.html (Pulsar's health probe; /health
too), answered while the proxy serves."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from pulsar_grpc.proxy.metrics import ProxyCollector, ProxyStats


class ProxyWeb:
    """``await start(host, port)``, then ``await close()``."""

    def __init__(self, stats: ProxyStats) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(ProxyCollector(stats))
        self._runner: web.AppRunner | None = None
        self.url: str | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.add_routes(
            [
                web.get("/metrics", self.metrics),
                web.get("/status.html", self.status),
                web.get("/health", self.status),
            ]
        )
        return app

    async def start(self, host: str, port: int) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert server is not None
        bound = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self.url = f"http://{host}:{bound}"

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def status(self, request: web.Request) -> web.Response:
        return web.Response(text="OK")
