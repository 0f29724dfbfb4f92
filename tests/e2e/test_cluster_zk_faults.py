"""ZooKeeper faults in a three-broker cluster on ZooKeeper and PostgreSQL: a broker cut off from
ZooKeeper past its session stops serving, its bundles are placed again on the next lookup, the
clients move, and nothing receipted is lost; a broker told to stop while a store is gone stops
within its shutdown timeout.

Each member reaches ZooKeeper and PostgreSQL through fault proxies of its own
(``cluster_factory(proxied=True)``). SDK producers send without pause to a 16-partition topic
whose partitions every broker owns, through a broker that stays healthy; an ``audit``
subscription, created before the first send, is read at the end: every message that got a
receipt is there. How long the victim's partitions went without receipts after the fault
ended is printed (pytest -s), not asserted: the machine is shared.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from datetime import datetime

import pytest

from tests.cluster import (
    SESSION_TIMEOUT_MS,
    Cluster,
    Member,
    cluster_factory,
)
from tests.cluster_load import Scene, leader_id, under_load
from tests.postgres import postgres_server, postgres_url
from tests.waiting import eventually
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]

SESSION_S = SESSION_TIMEOUT_MS / 1000
# Long past the session: ZooKeeper has expired the victim's session, and the victim has
# presumed it lost, before the link comes back.
BLACKHOLE_S = 3 * SESSION_S
RESUMED = 100  # receipts each of the victim's partitions must take after the fault
SHUTDOWN_TIMEOUT_MS = 8000


def logged_at(member: Member, pattern: str) -> list[datetime]:
    """When ``member`` logged a line matching ``pattern`` (the log's asctime)."""
    text = member.process.log.read_text(errors="replace")
    return [
        datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
        for m in re.finditer(rf"^(\S+ \S+) .*{pattern}", text, re.MULTILINE)
    ]


def blip(member: Member) -> int:
    """Reset ``member``'s ZooKeeper connections: it reconnects at once, within its session
    (as a loaded machine's late ping does). ZooKeeper drops a connection's watches with it."""
    assert member.links is not None
    before = len(logged_at(member, "session event: Reconnected"))
    member.links.zookeeper.cut()
    return before


def leader_of(members: list[Member]) -> Member:
    return next(m for m in members if m.broker_id == leader_id(members[0]))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("victim_role", ["follower", "leader"])
async def test_a_broker_cut_off_from_zookeeper_past_its_session_loses_no_receipted_message(
    cluster_factory: Callable[..., Cluster], victim_role: str
) -> None:
    """The victim (``follower``: the non-leader owning most partitions; ``leader``: the leader)
    is blackholed from ZooKeeper for three session timeouts under load, then healed. Just
    before, the other brokers' ZooKeeper connections are reset once (they reconnect within
    their sessions): what they had read must not outlive the watches that connection held.

    Its session expires, so its ownership nodes go: the next lookup of each of its bundles
    must place it on a live broker, and no lookup may answer a broker that then refuses the
    producer (the SDK would time out instead of moving). A partitioned leader's place is taken
    by another broker while it is away; healed, it follows: one leader, named alike by all."""
    healed_at = 0.0

    def choose(members: list[Member], owners: list[Member]) -> Member:
        leader = leader_of(members)
        if victim_role == "leader":
            return leader
        return max((m for m in members if m is not leader), key=owners.count)

    async def faults(scene: Scene) -> None:
        nonlocal healed_at
        for m in scene.survivors:
            before = blip(m)
            await eventually(
                lambda m=m, n=before: len(logged_at(m, "session event: Reconnected")) > n,
                timeout=30,
            )
        scene.links.zookeeper.blackhole()
        await asyncio.sleep(BLACKHOLE_S)  # the fault's length
        if victim_role == "leader":  # another broker leads while the old one is away
            await eventually(
                lambda: leader_id(scene.survivors[0]) != scene.victim.broker_id, timeout=30
            )
        scene.links.zookeeper.heal()
        healed_at = time.monotonic()
        await scene.each_resumed(healed_at, RESUMED)

    cluster = cluster_factory(proxied=True)
    scene = await under_load(cluster, f"zk{victim_role}", faults, choose, warm_up=200)
    members, victim, load = cluster.members, scene.victim, scene.load
    # One leader, the same on every broker, and not the healed one if it was the leader.
    await eventually(lambda: len({leader_id(m) for m in members}) == 1, timeout=30)
    if victim_role == "leader":
        assert leader_id(victim) != victim.broker_id
        new = next(m for m in members if m.broker_id == leader_id(victim))
        (stepped_down,) = logged_at(victim, "is no longer the leader")
        took_over = logged_at(new, "is the leader")[-1]
        assert stepped_down < took_over, "two brokers acted as leader at once"
    print(
        f"\n{victim_role} victim: {len(load.receipts)} receipted, {len(load.failures)} sends "
        f"failed; its partitions went without receipts "
        f"{load.blocked_after(scene.theirs, healed_at):.1f} s after the heal (longest gap "
        f"{load.longest_gap(scene.theirs):.1f} s, blackhole {BLACKHOLE_S:g} s, session timeout "
        f"{SESSION_S:g} s)"
    )


@pytest.mark.timeout(180)
@pytest.mark.parametrize(
    "store,fault", [("zookeeper", "blackhole"), ("zookeeper", "refuse"), ("postgres", "blackhole")]
)
async def test_a_broker_whose_store_is_gone_stops_within_its_shutdown_timeout(
    cluster_factory: Callable[..., Cluster], store: str, fault: str
) -> None:
    """The victim's link to one store fails (``blackhole``: nothing answers; ``refuse``: every
    connection is reset), then it gets SIGTERM while owning partitions under load: it must
    exit by itself, with 0, within brokerShutdownTimeoutMs, with one clear line for what it
    could not release and no traceback; the other brokers take its partitions, and nothing
    receipted is lost."""
    stopped_s = stopped_at = 0.0

    async def faults(scene: Scene) -> None:
        nonlocal stopped_s, stopped_at
        getattr(getattr(scene.links, store), fault)()
        await asyncio.sleep(1)  # sends reach the victim and stay unanswered
        started = time.monotonic()
        # Past the timeout, stop() sends SIGKILL: the exit code says which happened.
        code = await asyncio.to_thread(
            scene.victim.process.stop, grace_s=SHUTDOWN_TIMEOUT_MS / 1000 + 10
        )
        stopped_at = time.monotonic()
        stopped_s = stopped_at - started
        assert code == 0, f"the broker did not stop by itself (exit code {code})"
        await scene.each_resumed(stopped_at, RESUMED)

    cluster = cluster_factory(proxied=True, brokerShutdownTimeoutMs=str(SHUTDOWN_TIMEOUT_MS))
    scene = await under_load(cluster, f"stop{store}{fault}", faults, warm_up=200)
    victim, load = scene.victim, scene.load
    shutdown = victim.process.log.read_text(errors="replace").partition("shutting down")[2]
    assert "Traceback" not in shutdown
    warned = [line for line in shutdown.splitlines() if " WARNING " in line]
    print("\n".join(["", f"{victim.name}'s warnings while stopping:", *warned]))
    print(
        f"{store} {fault}: stopped in {stopped_s:.1f} s (timeout {SHUTDOWN_TIMEOUT_MS} ms); "
        f"{len(load.receipts)} receipted, {len(load.failures)} sends failed; its partitions "
        f"went without receipts {load.blocked_after(scene.theirs, stopped_at):.1f} s after it "
        "exited"
    )
