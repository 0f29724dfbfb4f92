"""The gRPC handler's advertised data (PIP-59): what it publishes in the broker's load and
ownership data, and how it reads that data back from an owner's lookup answer. Only this
handler knows the format; the broker core carries it as an opaque string.

The format: JSON, for every listener, this handler's ``grpc`` and ``grpc+ssl`` URLs.
"""

from __future__ import annotations

import json

from pulsar_grpc.broker.listeners import GRPC, GRPC_SCHEMES, GRPC_TLS, Listener
from pulsar_grpc.broker.lookup import LookupResult

PROTOCOL_NAME = "grpc"


def advertise(listeners: dict[str, Listener]) -> str:
    return json.dumps(
        {
            name: {s: url for s in GRPC_SCHEMES if (url := listener.url(s))}
            for name, listener in listeners.items()
        },
        sort_keys=True,
    )


def grpc_urls(result: LookupResult) -> tuple[str | None, str | None]:
    """The owner's gRPC and gRPC-TLS URLs for the answer's listener, from the owner's own
    advertised data; the listener's advertised addresses when it has none for it."""
    raw = result.protocols.get(PROTOCOL_NAME)
    urls = json.loads(raw).get(result.listener) if raw else None
    if urls is None:
        return result.grpc_url, result.grpc_url_tls
    return urls.get(GRPC), urls.get(GRPC_TLS)
