"""The authorization rules, decision by decision, over a real (in-memory) metadata store:
super-users, tenant admins, namespace and topic grants, partitions, subscription roles and the
proxy rules of PIP-1; and the permission cache seeing a change written behind its back."""

from __future__ import annotations

import asyncio
import json
import uuid
from types import SimpleNamespace

import pytest

from pulsar_grpc.broker.config import ServiceConfiguration
from pulsar_grpc.broker.errors import AuthorizationError, InvalidArgumentError, NotFoundError
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from pulsar_grpc.broker.metadata.store import GetResult
from pulsar_grpc.broker.naming import NamespaceName, TopicName
from pulsar_grpc.broker.security.authorization import AuthorizationService, Caller
from pulsar_grpc.broker.security.authorization import TopicOperation as Op
from pulsar_grpc.broker.security.permissions import PermissionStore, TenantInfo, parse_actions
from pulsar_grpc.handler.access import ended_when_revoked
from pulsar_grpc.interceptors.context import CallContext, _current
from tests.waiting import eventually

NS = NamespaceName.get("acme/ns")
TOPIC = TopicName.get("persistent://acme/ns/t")


@pytest.fixture
async def service() -> AuthorizationService:
    store = MemoryMetadataStore(f"authz-{uuid.uuid4().hex}")
    permissions = PermissionStore(store)
    await permissions.put_tenant("acme", TenantInfo(("acme-admin",), ()), create=True)
    await store.put(f"/admin/policies/{NS}", b"{}")
    config = ServiceConfiguration(
        authenticationEnabled=True,
        authorizationEnabled=True,
        superUserRoles=["root"],
        proxyRoles=["proxy"],
    )
    authorization = AuthorizationService.from_config(config, permissions)
    assert authorization is not None
    return authorization


async def allowed(
    service: AuthorizationService,
    role: str,
    op: Op,
    topic: TopicName = TOPIC,
    subscription: str | None = None,
    original: str | None = None,
) -> bool:
    try:
        await service.check_topic(Caller(role, original), topic, op, subscription)
    except AuthorizationError:
        return False
    return True


async def test_super_users_and_tenant_admins_may_do_everything(
    service: AuthorizationService,
) -> None:
    for role in ("root", "acme-admin"):
        for op in Op:
            assert await allowed(service, role, op)
    assert not await allowed(service, "acme-admin", Op.PRODUCE, TopicName.get("public/default/t"))
    await service.check_tenant_admin(Caller("acme-admin"), "acme")
    with pytest.raises(AuthorizationError, match="role app is not authorized to administer"):
        await service.check_tenant_admin(Caller("app"), "acme")
    with pytest.raises(NotFoundError):
        await service.check_tenant_admin(Caller("app"), "nope")


async def test_grants_on_the_namespace_and_on_the_topic(service: AuthorizationService) -> None:
    permissions = service.permissions
    assert not await allowed(service, "app", Op.LOOKUP)
    await permissions.grant_namespace(NS, "app", ["produce"])
    assert await allowed(service, "app", Op.PRODUCE)
    assert await allowed(service, "app", Op.LOOKUP)
    assert not await allowed(service, "app", Op.CONSUME)
    await permissions.grant_topic(TOPIC, "reader", ["consume"])
    assert await allowed(service, "reader", Op.CONSUME)
    assert await allowed(service, "reader", Op.CONSUME, TOPIC.get_partition(2))
    assert not await allowed(service, "reader", Op.CONSUME, TopicName.get("acme/ns/other"))
    assert await permissions.topic_permissions(TOPIC) == {
        "app": ["produce"],
        "reader": ["consume"],
    }
    await permissions.revoke_namespace(NS, "app")
    assert not await allowed(service, "app", Op.PRODUCE)


async def test_subscription_roles(service: AuthorizationService) -> None:
    await service.permissions.grant_namespace(NS, "a", ["consume"])
    await service.permissions.grant_namespace(NS, "b", ["consume"])
    await service.permissions.grant_subscription(NS, "billing", ["a"])
    assert await allowed(service, "a", Op.CONSUME, subscription="billing")
    assert not await allowed(service, "b", Op.CONSUME, subscription="billing")
    assert await allowed(service, "b", Op.CONSUME, subscription="other")
    await service.permissions.revoke_subscription(NS, "billing", "a")
    assert await allowed(service, "b", Op.CONSUME, subscription="billing")


async def test_the_proxy_rules(service: AuthorizationService) -> None:
    await service.permissions.grant_namespace(NS, "proxy", ["produce", "consume"])
    await service.permissions.grant_namespace(NS, "app", ["produce"])
    assert await allowed(service, "proxy", Op.PRODUCE, original="app")
    assert not await allowed(service, "proxy", Op.CONSUME, original="app")  # app may not
    assert not await allowed(service, "proxy", Op.PRODUCE)  # names no client
    assert not await allowed(service, "proxy", Op.PRODUCE, original="proxy")
    assert not await allowed(service, "root", Op.PRODUCE, original="app")  # not a proxy


async def test_the_cache_sees_a_change_written_behind_its_back(
    service: AuthorizationService,
) -> None:
    assert not await allowed(service, "app", Op.PRODUCE)  # cached now
    store = service.permissions._store
    found = await store.get(f"/admin/policies/{NS}")
    assert found is not None
    policies = {"auth_policies": {"namespace_auth": {"app": ["produce"]}}}
    await store.put(f"/admin/policies/{NS}", json.dumps(policies).encode(), found.version)
    # The store notifies on the loop, soon after the write.
    assert await eventually(lambda: allowed(service, "app", Op.PRODUCE), timeout=5)


class _CountingStore(MemoryMetadataStore):
    """Counts reads and holds each one until ``release`` is set, so callers overlap."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.reads = 0
        self.release = asyncio.Event()

    async def get(self, path: str) -> GetResult | None:
        self.reads += 1
        await self.release.wait()
        return await super().get(path)


async def test_callers_that_miss_the_cache_together_share_one_read() -> None:
    store = _CountingStore(f"authz-{uuid.uuid4().hex}")
    await store.put(f"/admin/policies/{NS}", b'{"a": 1}')
    cache = PermissionStore(store).cache
    path = f"/admin/policies/{NS}"
    waiters = [asyncio.ensure_future(cache.get(path)) for _ in range(50)]
    await asyncio.sleep(0)  # every waiter has missed the cache and joined the read
    waiters[0].cancel()  # one caller giving up does not cancel the others' read
    store.release.set()
    results = await asyncio.gather(*waiters[1:])
    assert results == [{"a": 1}] * 49
    assert store.reads == 1
    assert await cache.get(path) == {"a": 1} and store.reads == 1  # cached now


@pytest.mark.parametrize("body", [["fly"], "produce", [None], {"a": 1}])
def test_bad_action_lists_are_refused(body: object) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_actions(body)


async def test_a_stream_whose_right_went_while_it_opened_is_ended_without_another_change(
    service: AuthorizationService,
) -> None:
    """The revoke landed after the stream's first check and before its watch was on: the
    check the watch makes when it starts ends the stream; no later change is needed."""
    _current.set(CallContext("peer", role="stranger"))
    broker = SimpleNamespace(authorization=service)
    ended = asyncio.Event()
    with ended_when_revoked(broker, TOPIC, Op.PRODUCE, lambda _: ended.set()):  # type: ignore[arg-type]
        await asyncio.wait_for(ended.wait(), 10)
