"""A Node.js client through the PIP-1 proxy: tests/node/produce_consume.js with --lookup looks
its topic up at the proxy (two brokers with token authentication and authorization behind it,
test_proxy_security's cluster), connects where the lookup answered (the proxy itself), names
the owner broker the proxy answered on its calls, produces 1000 messages and consumes them,
with a token. The broker serving the topic is the one the proxy named; a role the brokers have
not granted is refused by them (the proxy's lookup is made as the client's role), and a client
without a token is refused at the proxy."""

from __future__ import annotations

import asyncio
import json
import uuid

from tests.e2e.test_authorization import grant, token
from tests.e2e.test_node_client import run_node
from tests.e2e.test_proxy_security import SecureCluster, secure
from tests.zookeeper import zookeeper

__all__ = ["secure", "zookeeper"]  # fixtures, imported to be found


async def node_through(
    cluster: SecureCluster, topic: str, role: str | None
) -> tuple[int, str, dict[str, object]]:
    """produce_consume.js --lookup at the proxy's plaintext address, as ``role``."""
    env = {"PULSAR_GRPC_AUTH_TOKEN": token(role) if role else ""}
    address = cluster.terminating.grpc_address
    code, output, last = await asyncio.to_thread(run_node, address, env, "--lookup", topic=topic)
    return code, output, json.loads(last)


async def test_a_node_client_looks_up_produces_and_consumes_through_the_proxy(
    secure: SecureCluster,
) -> None:
    await grant(secure.brokers[0], "node-app", ["produce", "consume"])
    topic = f"persistent://public/default/node-proxy-{uuid.uuid4().hex}"
    code, output, summary = await node_through(secure, topic, "node-app")
    assert code == 0, output
    lookup = summary.pop("lookup")
    assert summary == {"produced": 1000, "consumed": 1000, "redelivered": 0}, output
    assert isinstance(lookup, dict)
    assert lookup["connected_to"] == secure.terminating.grpc_address
    assert lookup["proxy_through_service_url"] is True
    (owner,) = [b for b in secure.brokers if b.service_url == lookup["proxy_to_broker_url"]]
    assert owner.service is not None
    assert topic in {t.name for t in owner.service.topics.loaded_topics()}


async def test_a_node_client_is_refused_by_the_broker_or_at_the_proxy(
    secure: SecureCluster,
) -> None:
    topic = f"persistent://public/default/node-proxy-refused-{uuid.uuid4().hex}"
    code, output, summary = await node_through(secure, topic, "node-stranger")
    assert code == 1, output
    # Authenticated at the proxy; the proxy's lookup, made at a broker for the client's
    # role, is refused there (AuthorizationError), though the proxy itself is a super-user.
    assert "lookup" not in summary, output
    error = str(summary["error"])
    assert error.startswith("gRPC PERMISSION_DENIED: role node-stranger is not authorized"), output
    assert error.endswith("pulsar-error-code=4"), output
    code, output, summary = await node_through(secure, topic, None)
    assert code == 1, output
    assert "UNAUTHENTICATED" in str(summary["error"]), output
