"""pulsar-grpc: a message broker in the Apache Pulsar model whose client protocol is gRPC.

Everything the product installs lives under this one import name. The Python SDK is
re-exported here, so application code reads like code written for ``pulsar-client``::

    from pulsar_grpc import Client

    async def main() -> None:
        async with Client("grpc://127.0.0.1:50051") as client:
            producer = await client.create_producer("my-topic")
            await producer.send(b"hello")

The subpackages are the repository's top-level folders, mapped in by pyproject.toml:
``pulsar_grpc.client`` (the SDK), ``pulsar_grpc.broker`` (the broker core),
``pulsar_grpc.handler`` and ``pulsar_grpc.interceptors`` (the gRPC protocol handler),
``pulsar_grpc.cli`` and ``pulsar_grpc.spark`` (the Spark data source).

The SDK is imported on first use of one of its names, not with the package: the ``pulsar-grpc``
command's admin verbs live under this package too and need none of it (grpc and protobuf take
a second to import; see cli/main.py).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import *  # noqa: F403  (the SDK's public names are the package's)
    from .client import __all__ as __all__


def __getattr__(name: str) -> Any:
    """A name of the SDK (``__all__`` too, for ``from pulsar_grpc import *``), importing it."""
    client = importlib.import_module(f"{__name__}.client")
    if name == "__all__" or name in client.__all__:
        return getattr(client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
