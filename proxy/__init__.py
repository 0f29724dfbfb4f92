"""The PIP-1 proxy: a stateless gRPC front door to the brokers (``pulsar-grpc proxy``).

Clients connect only to it; it answers lookups itself (its own address, the owner broker's URL,
``proxy_through_service_url``) and forwards each Produce, Consume and topic call byte for byte
to the broker that owns the topic, over a few pooled HTTP/2 connections per broker. See
docs/protocol.md, "Through a proxy".

Modules: config (settings, Pulsar proxy.conf names), brokers (which brokers are live),
lookup (lookups through the brokers), forwarding (the connection pool and the relay),
servicer (what each RPC does), metrics and web (/metrics, /status.html), server (lifecycle).
"""

from pulsar_grpc.proxy.config import ProxyConfiguration, load_proxy_config
from pulsar_grpc.proxy.server import ProxyService

__all__ = ["ProxyConfiguration", "ProxyService", "load_proxy_config"]
