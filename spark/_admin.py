"""The few admin HTTP calls the gRPC protocol has no RPC for (Pulsar's admin API v2).

The gRPC contract has no list-topics, create-topic or stats call; Pulsar tooling uses the
broker's admin REST API for those, so the source and the load test do too (option
``admin.url``, e.g. ``http://broker:8080``). Plain urllib: no extra dependency on executors.
The query's credentials and TLS trust (its ClientOptions) go with each call when given.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._options import ClientOptions


def _path(full_topic: str) -> str:
    """``persistent://t/ns/x`` -> ``persistent/t/ns/x`` (each part URL-quoted)."""
    domain, _, rest = full_topic.partition("://")
    return "/".join([domain, *(urllib.parse.quote(p, safe="") for p in rest.split("/"))])


def _call(
    method: str,
    url: str,
    body: str | None = None,
    timeout: float = 30,
    client: ClientOptions | None = None,
) -> Any:
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    authentication = client.authentication() if client is not None else None
    authorization = authentication.authorization() if authentication is not None else None
    if authorization:
        request.add_header("Authorization", authorization)
    trust = client.tls_trust_certs_file_path if client is not None else None
    context = ssl.create_default_context(cafile=trust) if trust else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            text = response.read().decode()
    except urllib.error.HTTPError as exc:
        reason = exc.read().decode(errors="replace")
        raise RuntimeError(f"admin {method} {url} failed: HTTP {exc.code} {reason}") from None
    return json.loads(text) if text.strip() else None


def list_topics(admin_url: str, namespace: str, client: ClientOptions | None = None) -> list[str]:
    """Full names of the persistent topics of ``tenant/ns`` (partitioned ones by base name)."""
    return list(_call("GET", f"{admin_url}/admin/v2/persistent/{namespace}", client=client))


def create_partitioned_topic(admin_url: str, full_topic: str, partitions: int) -> None:
    """Create a partitioned topic; an existing one with the same count is fine."""
    url = f"{admin_url}/admin/v2/{_path(full_topic)}/partitions"
    try:
        _call("PUT", url, str(partitions))
    except RuntimeError as exc:
        if "HTTP 409" not in str(exc):
            raise
        existing = _call("GET", url)["partitions"]
        if existing != partitions:
            raise RuntimeError(
                f"{full_topic} exists with {existing} partitions, not {partitions}"
            ) from None


def topic_stats(admin_url: str, full_topic: str) -> dict[str, Any]:
    """``GET .../stats``: for a partitioned topic, per-partition stats under ``partitions``."""
    return dict(_call("GET", f"{admin_url}/admin/v2/{_path(full_topic)}/stats", timeout=10))
