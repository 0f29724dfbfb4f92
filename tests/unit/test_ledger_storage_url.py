"""ledgerStorageUrl: which store a URL names, and the messages a bad one gets."""

from __future__ import annotations

import pytest

from pulsar_grpc.broker.config import ConfigError, load_config
from pulsar_grpc.broker.ledger.storage_url import LedgerStorageKind, parse_ledger_storage_url


def test_empty_is_the_embedded_store() -> None:
    assert parse_ledger_storage_url("").kind is LedgerStorageKind.EMBEDDED
    assert load_config(None, {}, {}).ledgerStorageUrl == ""


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("postgresql://pulsar@db.example:6543/ledgers", "db.example:6543/ledgers"),
        ("postgres://pulsar:pw@10.0.0.5/ledgers?sslmode=require", "10.0.0.5:5432/ledgers"),
    ],
)
def test_postgresql_urls_name_host_port_and_database_but_never_the_password(
    url: str, where: str
) -> None:
    storage = parse_ledger_storage_url(url)
    assert storage.kind is LedgerStorageKind.POSTGRESQL
    assert storage.dsn == url and storage.where == where


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("mysql://u@h/db", "is not a postgresql://user@host:port/database URL"),
        ("postgresql://u@h:70000/db", "has an invalid port"),
        ("postgresql:///db", "names no host"),
        ("postgresql://u@h", "names no database"),
        ("postgresql://u@h/a/b", "names no database"),
    ],
)
def test_a_bad_url_is_a_configuration_error_naming_the_property(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {"PULSAR_PREFIX_ledgerStorageUrl": url}, {})
    (line,) = caught.value.errors
    assert line.startswith("env PULSAR_PREFIX_ledgerStorageUrl: ledgerStorageUrl: ")
    assert problem in line


def test_the_password_of_a_bad_url_is_not_shown() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(None, {}, {"ledgerStorageUrl": "postgresql://u:s3cret@h:x/db"})
    assert "s3cret" not in str(caught.value) and "u:***@h:x" in str(caught.value)
