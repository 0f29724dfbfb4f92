"""Network faults between a broker and its stores, in a three-broker cluster on ZooKeeper and
PostgreSQL: nothing receipted is lost, and the clients move on.

Each member reaches ZooKeeper and PostgreSQL through fault proxies of its own
(``cluster_factory(proxied=True)``). SDK producers send without pause to a partitioned topic
whose partitions every broker owns (tests/cluster_load.under_load); an ``audit`` subscription,
created before the first send, is read only at the end. Then one broker's link to a store
fails, as a real deployment's does, and at the end every message that got a receipt is
delivered to the audit subscription.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from tests.cluster import (
    SESSION_TIMEOUT_MS,
    Cluster,
    cluster_factory,
)
from tests.cluster_load import Scene, under_load
from tests.postgres import postgres_server, postgres_url
from tests.zookeeper import zk_chroot, zookeeper

__all__ = ["cluster_factory", "postgres_server", "postgres_url", "zk_chroot", "zookeeper"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("fault", ["reset", "silent"])
async def test_a_postgres_cut_then_kill_9_while_cut_loses_no_receipted_message(
    cluster_factory: Callable[..., Cluster], fault: str
) -> None:
    """The owner of some partitions loses PostgreSQL for 12 s (``reset``: its connections are
    reset and new ones refused, so commits fail at once; ``silent``: nothing answers, so
    commits time out), gets it back, loses it again and is killed with kill -9 while cut. The
    new owners deliver every message any broker receipted.

    While the store is gone no new ledger can start (ledger ids come from the store): once an
    add failed, the managed ledger must refuse adds rather than write past the hole."""
    recovered_s = 0.0

    async def faults(scene: Scene) -> None:
        nonlocal recovered_s
        postgres = scene.links.postgres
        cut = postgres.refuse if fault == "reset" else postgres.blackhole
        cut()
        await asyncio.sleep(12)  # the fault's length: past the store's 10 s deadline
        postgres.heal()
        await scene.receipts_grow()
        cut()
        await asyncio.sleep(2)  # sends reach the victim and stay unanswered
        scene.victim.process.kill9()
        killed_at = time.monotonic()
        await scene.receipts_grow()
        recovered_s = time.monotonic() - killed_at

    load = (await under_load(cluster_factory(proxied=True), "pgcut", faults)).load
    print(
        f"\n{len(load.receipts)} receipted, {len(load.failures)} sends failed; the victim's "
        f"partitions took receipts again {recovered_s:.1f} s after the kill "
        f"(session timeout {SESSION_TIMEOUT_MS / 1000:g} s)"
    )


@pytest.mark.timeout(240)
async def test_rollovers_under_store_resets_then_kill_9_lose_no_receipted_message(
    cluster_factory: Callable[..., Cluster],
) -> None:
    """Ledgers of 20 entries, so that rollovers (a new ledger id from PostgreSQL, the ledger
    list written to ZooKeeper) keep happening while the owner's links are reset again and
    again: ZooKeeper's connection (kazoo reconnects within the session), PostgreSQL's for a
    second, both at once; then kill -9 with PostgreSQL refused. Nothing receipted is lost,
    whichever write of a rollover a reset interrupted."""

    async def faults(scene: Scene) -> None:
        links = scene.links
        for _ in range(3):
            links.zookeeper.cut()
            await scene.receipts_grow(50)
            links.postgres.refuse()
            await asyncio.sleep(1)
            links.postgres.heal()
            await scene.receipts_grow(50)
            links.zookeeper.cut()
            links.postgres.cut()
            await scene.receipts_grow(50)
        links.postgres.refuse()
        await asyncio.sleep(1)
        scene.victim.process.kill9()
        await scene.receipts_grow(100)

    cluster = cluster_factory(proxied=True, managedLedgerMaxEntriesPerLedger="20")
    load = (await under_load(cluster, "rollovers", faults)).load
    print(f"\n{len(load.receipts)} receipted, {len(load.failures)} sends failed")
