"""Who may create a partitioned topic as anonymousUserRole (issue 26), by Pulsar's rule:

- the admin API's create is a namespace operation (NamespaceOperation.CREATE_TOPIC), which
  PulsarAuthorizationProvider allows a super-user or an admin of the tenant only;
- a client's lookup of the topic's partitions needs TopicOperation.LOOKUP (a produce or consume
  grant), and with allowAutoTopicCreationType=partitioned that lookup creates the topic with
  defaultNumPartitions.

pulsar-client-python's CI sets its broker up this way (build-support/
start-test-service-inside-container.sh): tenant ``public`` with adminRoles ``anonymous``, its
namespaces granting produce,consume to ``anonymous``, tenant ``private`` with no admin."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from pulsar_grpc.client import AuthorizationError, Client
from tests.e2e.test_authorization import AUTHZ, TIMEOUT_S, admin, http
from tests.support import BrokerThread

ANONYMOUS = "anonymous"
PARTITIONS = 3


@pytest.fixture(name="anonymous_broker")
def anonymous_broker_fixture(broker_factory: Callable[..., BrokerThread]) -> BrokerThread:
    return broker_factory(
        **AUTHZ,
        anonymousUserRole=ANONYMOUS,
        allowAutoTopicCreationType="partitioned",
        defaultNumPartitions=PARTITIONS,
    )


async def set_up_as_pulsar_client_python_ci(broker: BrokerThread) -> None:
    """``open`` administered by the anonymous role, ``private`` by nobody; both with a
    namespace granting it produce and consume, ``private`` with one granting it consume only
    and one granting nothing."""
    clusters = [broker.config.clusterName]
    for tenant, admins in (("open", [ANONYMOUS]), ("private", [])):
        body = {"adminRoles": admins, "allowedClusters": clusters}
        await admin(broker, "PUT", f"/admin/v2/tenants/{tenant}", body)
        await admin(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns")
        grant = f"/admin/v2/namespaces/{tenant}/ns/permissions/{ANONYMOUS}"
        await admin(broker, "POST", grant, ["produce", "consume"])
    await admin(broker, "PUT", "/admin/v2/namespaces/private/closed")
    await admin(broker, "PUT", "/admin/v2/namespaces/private/readers")
    await admin(
        broker, "POST", f"/admin/v2/namespaces/private/readers/permissions/{ANONYMOUS}", ["consume"]
    )


async def anonymous_call(broker: BrokerThread, method: str, path: str, body: object = None):
    return await asyncio.to_thread(http, broker, method, path, None, body)


async def partitions_of(broker: BrokerThread, topic: str) -> int:
    """The stored count, read without the auto-creation a lookup of it may do (0: none)."""
    assert broker.service is not None
    resources = broker.service.resources
    return await broker.call(
        resources.get_partitioned_metadata(f"persistent://{topic}", auto_create=False)
    )


async def test_the_anonymous_role_creates_partitioned_topics_where_it_is_tenant_admin(
    anonymous_broker: BrokerThread,
) -> None:
    b = anonymous_broker
    await set_up_as_pulsar_client_python_ci(b)
    path = "/admin/v2/persistent/open/ns/made/partitions"
    assert await anonymous_call(b, "PUT", path, 4) == (204, None)
    assert await partitions_of(b, "open/ns/made") == 4

    status, answer = await anonymous_call(
        b, "PUT", "/admin/v2/persistent/private/ns/x/partitions", 4
    )
    assert status == 403, answer
    assert await partitions_of(b, "private/ns/x") == 0


async def test_the_anonymous_sdk_auto_creates_a_partitioned_topic_where_it_may_look_it_up(
    anonymous_broker: BrokerThread,
) -> None:
    b = anonymous_broker
    await set_up_as_pulsar_client_python_ci(b)
    async with Client(b.service_url, operation_timeout_ms=5000) as c:
        for topic in ("open/ns/auto", "private/ns/auto"):  # a grant suffices, as in Pulsar
            producer = await c.create_producer(f"persistent://{topic}")
            consumer = await c.subscribe(f"persistent://{topic}", "s")
            await producer.send(b"hello")
            assert (await consumer.receive(timeout_ms=TIMEOUT_S * 1000)).data() == b"hello"
            assert await partitions_of(b, topic) == PARTITIONS
        # Looking the partitions up is enough, with a consume grant only (canLookup).
        names = await c.get_topic_partitions("persistent://private/readers/t")
        assert names == [f"persistent://private/readers/t-partition-{i}" for i in range(3)]
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(c.create_producer("persistent://private/closed/t"), TIMEOUT_S)
        with pytest.raises(AuthorizationError):
            await asyncio.wait_for(
                c.get_topic_partitions("persistent://private/closed/u"), TIMEOUT_S
            )
    assert await partitions_of(b, "private/closed/t") == 0
    assert await partitions_of(b, "private/closed/u") == 0


async def test_reading_the_partitions_auto_creates_only_when_asked(
    anonymous_broker: BrokerThread,
) -> None:
    """Pulsar's GET .../partitions takes checkAllowAutoCreation, false by default."""
    b = anonymous_broker
    path = "/admin/v2/persistent/public/default/read/partitions"
    assert await admin(b, "GET", path) == {"partitions": 0}
    assert await partitions_of(b, "public/default/read") == 0
    assert await admin(b, "GET", path + "?checkAllowAutoCreation=true") == {
        "partitions": PARTITIONS
    }
    assert await partitions_of(b, "public/default/read") == PARTITIONS
