"""A pulsar-client program ported by its import line alone (issue 26).

tests/ported/orders_app.py is written for pulsar-client 3.x: blocking and asyncio clients,
Avro/JSON/string schemas, a partitioned topic under Key_Shared, a dead letter policy, readers
and seeks, end-to-end encryption, batching, acks and nacks, properties, event times and
partition keys. Here it runs against a real broker with only its ``import pulsar`` line
changed to the import docs/pulsar-client.md promises, and its report is checked.
"""

from __future__ import annotations

import ast
import types
from pathlib import Path
from typing import Any

import pulsar
import pulsar.asyncio
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import pulsar_grpc.client.compat
from tests.support import BrokerThread

APP = Path(__file__).with_name("orders_app.py")
PULSAR_IMPORT = "import pulsar.asyncio"
PORTED_IMPORT = "import pulsar_grpc.client.compat as pulsar"
BASE = "persistent://public/default/shop"


def ported_app() -> types.ModuleType:
    """orders_app.py with its one import line swapped, as a user ports it."""
    lines = APP.read_text().splitlines(keepends=True)
    imports = [n for n, line in enumerate(lines) if line.startswith(PULSAR_IMPORT)]
    assert len(imports) == 1, "the program imports pulsar on exactly one line"
    lines[imports[0]] = PORTED_IMPORT + "\n"
    module = types.ModuleType("orders_app")
    module.__file__ = str(APP)
    exec(compile("".join(lines), str(APP), "exec"), module.__dict__)
    return module


def pulsar_names_used() -> set[str]:
    """Every dotted ``pulsar.…`` name the program uses, read from its syntax tree."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(APP.read_text())):
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.insert(0, node.attr)
            node = node.value
        if chain and isinstance(node, ast.Name) and node.id == "pulsar":
            names.add(".".join(chain))
    return names


def resolve(module: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        module = getattr(module, part)
    return module


def rsa_keys(directory: Path) -> tuple[str, str]:
    """A fresh RSA key pair in the PEM files pulsar-client's CryptoKeyReader reads."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = directory / "rsa_private.pem"
    public = directory / "rsa_public.pem"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(public), str(private)


@pytest.mark.parametrize("name", sorted(pulsar_names_used()))
def test_each_name_the_program_uses_is_pulsar_clients_and_ours(name: str) -> None:
    """The unchanged program is right for pulsar-client (checked by introspection, as there
    is no Pulsar broker here) and finds each of its names under the ported import."""
    resolve(pulsar, name)
    resolve(pulsar_grpc.client.compat, name)


def test_the_ported_program_runs_against_a_broker(broker: BrokerThread, tmp_path: Path) -> None:
    assert broker.service is not None
    broker.run(broker.service.resources.create_partitioned_topic("public/default/shop-orders", 3))
    public, private = rsa_keys(tmp_path)

    report = ported_app().main(broker.service_url, BASE, public, private, orders=60)

    assert report["partitions"] == 3
    assert (report["orders_sent"], report["orders_billed"]) == (60, 60)
    assert report["partitions_written"] == 3  # twelve customers keyed over three partitions
    customers = sorted(ported_app().CUSTOMERS)
    assert report["customers_on_one_consumer"] == customers  # Key_Shared: a key, a consumer
    assert report["customers_in_order"] == customers
    assert report["consumers_used"] == 2

    payments = report["payments"]
    assert payments["settled"] == [0, 2, 3, 5]
    assert payments["attempts"] == {1: 3, 4: 3}  # the first delivery and two redeliveries
    assert sorted(d["order_id"] for d in payments["dead_lettered"]) == [1, 4]
    assert {d["real_topic"] for d in payments["dead_lettered"]} == {f"{BASE}-payments"}

    audit = report["audit"]
    assert audit["trail"] == [f"audit-{i}" for i in range(8)]
    assert audit["after_id_seek"] == ["audit-5", "audit-6", "audit-7"]  # after the id
    assert audit["after_time_seek"] == audit["expected_after_time_seek"]
    assert audit["after_time_seek"][-6:] == [f"audit-{i}" for i in range(2, 8)]

    notes = report["notifications"]
    assert notes["notes"] == [f"note-{i}" for i in range(10)]
    assert notes["event_times_kept"]
    assert notes["after_id_seek"] == "note-7"
    assert notes["after_time_seek"] == "note-0"
    assert notes["reader_first"] == "note-0"
