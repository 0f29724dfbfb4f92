"""A real OAuth 2.0 issuer for tests: an aiohttp app on a free loopback port serving
``/.well-known/openid-configuration`` and a client-credentials token endpoint that checks
``client_id`` and ``client_secret`` and answers a JWT for the client's role (its ``sub``),
signed with the key a broker's token provider is configured to verify."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiohttp import web

from pulsar_grpc.broker.security.tokens import create_token


@dataclass
class Issued:
    """One token the issuer handed out, and the form it was asked with."""

    token: str
    form: dict[str, str]


@dataclass
class Issuer:
    """Clients (id -> secret) and the lifetimes of the tokens it hands out, in order (the
    last one for all that follow)."""

    key: bytes
    clients: dict[str, str]
    lifetimes_s: list[int] = field(default_factory=lambda: [3600])
    issued: list[Issued] = field(default_factory=list)
    configurations_served: int = 0
    url: str = ""
    _runner: web.AppRunner | None = None

    async def start(self) -> Issuer:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._configuration)
        app.router.add_post("/oauth/token", self._token)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _configuration(self, request: web.Request) -> web.Response:
        self.configurations_served += 1
        return web.json_response({"issuer": self.url, "token_endpoint": self.url + "/oauth/token"})

    async def _token(self, request: web.Request) -> web.Response:
        form = {k: v for k, v in (await request.post()).items() if isinstance(v, str)}
        client_id = form.get("client_id", "")
        if form.get("grant_type") != "client_credentials":
            return web.json_response({"error": "unsupported_grant_type"}, status=400)
        if client_id not in self.clients or self.clients[client_id] != form.get("client_secret"):
            return web.json_response({"error": "invalid_client"}, status=401)
        lifetime = self.lifetimes_s[min(len(self.issued), len(self.lifetimes_s) - 1)]
        token = create_token(self.key, client_id, expires_at=int(time.time()) + lifetime)
        self.issued.append(Issued(token, form))
        return web.json_response(
            {"access_token": token, "token_type": "Bearer", "expires_in": lifetime}
        )
