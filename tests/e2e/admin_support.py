"""What the admin tests share: one broker per module (their names are unique, so no state
leaks between tests) and an HTTP call answering (status, JSON or text)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from tests.support import BrokerThread, broker_config


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    # As an operator who lets admins force a namespace's delete (Pulsar's default refuses).
    config = broker_config(tmp_path_factory.mktemp("admin"), forceDeleteNamespaceAllowed=True)
    broker = BrokerThread(config).start()
    try:
        yield broker
    finally:
        broker.stop()


async def call(
    broker: BrokerThread, method: str, path: str, body: Any = None, raw: str | None = None
) -> tuple[int, Any]:
    """(status, the JSON answer, its text when not JSON, None when empty)."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http,
        http.request(method, broker.http_url + path, data=data) as response,
    ):
        text = await response.text()
    if not text:
        return response.status, None
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text
