"""``import pulsar_grpc.client.compat as pulsar`` offers pulsar-client's names (issue 26).

Each name docs/pulsar-client.md says works (or works differently) resolves under the alias
module to the SDK's counterpart, so a pulsar-client program ports by its import line; each
name the table says is absent is absent there too, never a stand-in.
"""

from __future__ import annotations

from typing import Any

import pytest

import pulsar_grpc.client.compat as compat
from tests.unit.pulsar_client_api import ours
from tests.unit.test_pulsar_client_table import _table


def under_compat(name: str) -> Any:
    value: Any = compat
    for part in name.split("."):
        value = getattr(value, part, None)
    return value


@pytest.mark.parametrize("name", sorted(_table()))
def test_each_row_is_under_the_alias_module_as_the_table_says(name: str) -> None:
    status, _ = _table()[name]
    found = under_compat(name)
    if status == "absent":
        assert found is None, f"{name} is absent in the SDK but the alias module has it"
        return
    assert found is not None, f"{name} {status} but `pulsar.{name}` is missing under the alias"
    if ours(name) is not None:
        assert found == ours(name), f"`pulsar.{name}` is not the SDK's {name}"


# The SDK's names that pulsar-client does not have: not under the alias module.
SDK_ONLY = {
    "AuthenticationSCRAM",
    "DeadLetterPolicy",
    "EncryptionKeyInfo",
    "HandleState",
    "KeyReader",
    "LookupResult",
    "MessageListener",
    "SyncClient",
    "SyncConsumer",
    "SyncProducer",
    "SyncReader",
    "TopicMessageId",
    "authentication_from",
    "error_from_rpc",
}


def test_every_name_the_sdk_exports_for_pulsar_client_is_under_the_alias() -> None:
    """The alias module lists its names by hand: a name the SDK gains must be added there."""
    import pulsar_grpc.client as sdk

    missing = sorted(n for n in sdk.__all__ if n not in SDK_ONLY and not hasattr(compat, n))
    assert missing == []
