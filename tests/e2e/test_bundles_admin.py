"""Bundle admin on a standalone broker (it owns every bundle: an unload closes the topics,
which load again on the next request; a split rewrites the policies) and `pulsar-grpc admin`,
the CLI verbs, against a running broker."""

from __future__ import annotations

import json

import aiohttp

from pulsar_grpc.broker.naming import DEFAULT_NAMESPACE, NamespaceBundles, TopicName
from pulsar_grpc.client import Client
from tests.e2e.steady_load import SteadyLoad
from tests.e2e.test_cli import cli
from tests.support import BrokerThread
from tests.waiting import eventually

NS = "/admin/v2/namespaces/public/default"
FIRST = NamespaceBundles.with_count(DEFAULT_NAMESPACE, 4).bundles[0]


def broker_id(broker: BrokerThread) -> str:
    return broker.http_url.removeprefix("http://")


async def test_standalone_unload_split_and_reads(broker: BrokerThread) -> None:
    assert broker.service is not None
    topic = next(
        f"persistent://public/default/s-{i}"
        for i in range(1000)
        if FIRST.includes(TopicName.get(f"persistent://public/default/s-{i}"))
    )
    async with aiohttp.ClientSession() as http, Client(broker.service_url) as client:
        async with http.get(f"{broker.http_url}{NS}/bundles") as response:
            assert await response.json() == {
                "boundaries": [
                    "0x00000000",
                    "0x40000000",
                    "0x80000000",
                    "0xc0000000",
                    "0xffffffff",
                ],
                "numBundles": 4,
            }
        load = await SteadyLoad(client, [topic]).start()
        await load.receipts(50)
        [before] = broker.service.topics.loaded_topics()

        # Unload: the topic closes; the clients come back and it loads again.
        async with http.put(f"{broker.http_url}{NS}/{FIRST.range_str}/unload") as response:
            assert response.status == 204
        await eventually(
            lambda: [t for t in broker.service.topics.loaded_topics() if t is not before],  # type: ignore[union-attr]
            timeout=30,
        )
        await load.receipts(50)

        # Split: the policies change, the topic stays loaded.
        [loaded] = broker.service.topics.loaded_topics()
        async with http.put(f"{broker.http_url}{NS}/{FIRST.range_str}/split") as response:
            assert response.status == 204, await response.text()
        async with http.get(f"{broker.http_url}{NS}/bundles") as response:
            assert (await response.json())["boundaries"][:3] == [
                "0x00000000",
                "0x20000000",
                "0x40000000",
            ]
        assert broker.service.topics.loaded_topics() == [loaded]
        await load.receipts(50)
        await load.finish()

        async with http.get(f"{broker.http_url}/admin/v2/brokers/standalone") as response:
            assert await response.json() == [broker_id(broker)]
        owned_path = f"/admin/v2/brokers/standalone/{broker_id(broker)}/ownedNamespaces"
        async with http.get(broker.http_url + owned_path) as response:
            owned = await response.json()
        assert owned["public/default/0x00000000_0x20000000"]["is_active"] is True
        assert len([b for b in owned if b.startswith("public/default/")]) == 5
        for not_a_broker in ("127.0.0.1:99999", "no-port", "[::1:80"):
            path = f"/admin/v2/brokers/standalone/{not_a_broker}/ownedNamespaces"
            async with http.get(broker.http_url + path, allow_redirects=False) as response:
                assert response.status == 400, (not_a_broker, await response.text())
                assert (await response.json())["reason"].startswith("Invalid broker url")
        bundle_of = f"/lookup/v2/topic/{TopicName.get(topic).rest_path}/bundle"
        async with http.get(broker.http_url + bundle_of) as response:
            assert await response.text() in ("0x00000000_0x20000000", "0x20000000_0x40000000")


def test_cli_admin_verbs(broker: BrokerThread) -> None:
    admin = ("admin", "--admin-url", broker.http_url)
    shown = cli(*admin, "namespaces", "bundles", "public/default")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["numBundles"] == 4

    split = cli(
        *admin, "namespaces", "split-bundle", "public/default", "-b", FIRST.range_str,
        "--split-algorithm-name", "specified_positions_divide", "--split-boundaries", "0x1000",
        "-u",
    )  # fmt: skip
    assert split.returncode == 0, split.stderr
    assert split.stdout == f"split bundle {FIRST.range_str} of public/default\n"
    shown = cli(*admin, "namespaces", "bundles", "public/default")
    assert json.loads(shown.stdout)["boundaries"][:3] == ["0x00000000", "0x00001000", "0x40000000"]

    assert (
        cli(
            *admin, "namespaces", "unload", "public/default", "-b", "0x00000000_0x00001000"
        ).returncode
        == 0
    )
    unloaded = cli(*admin, "namespaces", "unload", "public/default")
    assert unloaded.returncode == 0 and unloaded.stdout == "unloaded public/default\n"

    listed = cli(*admin, "brokers", "list", "standalone")
    assert listed.stdout.split() == [broker_id(broker)]
    leader = cli(*admin, "brokers", "leader-broker")  # a standalone broker leads itself
    assert leader.returncode == 0, leader.stderr
    assert json.loads(leader.stdout) == {
        "brokerId": broker_id(broker),
        "serviceUrl": broker.http_url,
    }
    owned = cli(*admin, "brokers", "namespaces", "standalone", "--url", broker_id(broker))
    assert owned.returncode == 0, owned.stderr
    assert "public/default/0x00000000_0x00001000" in json.loads(owned.stdout)

    topic = TopicName.get("persistent://public/default/where")
    ranged = cli(*admin, "topics", "bundle-range", topic.full_name)
    assert ranged.returncode == 0, ranged.stderr
    bundles = NamespaceBundles.parse(DEFAULT_NAMESPACE, json.loads(shown.stdout)["boundaries"])
    assert ranged.stdout.strip() == bundles.bundle_for(topic).range_str

    # The broker's refusal: exit 1 with its reason; bad usage: exit 2.
    refused = cli(
        *admin, "namespaces", "split-bundle", "public/default", "-b", "0x00000000_0x30000000"
    )
    assert refused.returncode == 1
    assert "412 Invalid bundle range" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert cli(*admin, "namespaces", "split-bundle", "public/default").returncode == 2
    bad = cli(*admin, "namespaces", "unload", "public/default", "-b", "nonsense")
    assert bad.returncode == 2
    assert "invalid bundle range" in bad.stderr
