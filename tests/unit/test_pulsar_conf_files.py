"""Pulsar's own configuration files (tests/data, see its README for where each came from) load:
every property they set is either used or named once as ignored, never refused (issue 26)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_grpc.broker.config import (
    IGNORED_PULSAR_PROPERTIES,
    PROPERTY_NAMES,
    LoadedConfig,
    read_config,
)

DATA = Path(__file__).resolve().parents[1] / "data"
FILES = [
    "pulsar-standalone.conf",
    "pulsar-broker.conf",
    "pulsar-client-python-standalone.conf",
    "pulsar-client-python-standalone-ssl.conf",
]


def properties(path: Path) -> dict[str, str]:
    """The file's ``name=value`` lines, as Java's Properties reads them (comments skipped)."""
    found: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, value = line.partition("=")
            found[name.strip()] = value.strip()
    return found


def load(name: str, tmp_path: Path) -> LoadedConfig:
    path = DATA / name
    overrides = {}
    if "tokenSecretKey=file:" in path.read_text(encoding="utf-8"):
        # The CI script makes this key first (bin/pulsar tokens create-secret-key): so here.
        key = tmp_path / "secret.key"
        key.write_bytes(bytes(range(32)))
        overrides["tokenSecretKey"] = f"file://{key}"
    return read_config(path, {}, overrides)


@pytest.mark.parametrize("name", FILES)
def test_every_property_is_used_or_named_as_ignored(name: str, tmp_path: Path) -> None:
    loaded = load(name, tmp_path)
    used = set(PROPERTY_NAMES)
    for prop, value in properties(DATA / name).items():
        assert prop in used or prop in IGNORED_PULSAR_PROPERTIES, prop
        if prop not in used and value:
            assert prop in loaded.ignored, prop
    assert set(loaded.ignored) <= IGNORED_PULSAR_PROPERTIES
    # One line names them all, each once.
    warning = loaded.ignored_warning()
    assert "\n" not in warning and len(loaded.ignored) == len(set(loaded.ignored))


def test_pulsar_client_pythons_ssl_standalone_conf(tmp_path: Path) -> None:
    loaded = load("pulsar-client-python-standalone-ssl.conf", tmp_path)
    # The binary protocol's TLS port and batch-index acks: Pulsar's, named as ignored.
    named = (
        "brokerServicePortTls",
        "acknowledgmentAtBatchIndexLevelEnabled",
        "loadBalancerPlacementStrategy",
        "clientLibraryVersionCheckAllowUnversioned",
    )
    for name in named:
        assert name in loaded.ignored_warning(), name
    # What this broker has is used, with the file's values.
    config = loaded.config
    assert config.webServicePortTls == 8443 and config.maxMessageSize == 1024000
    assert config.authenticationEnabled and config.authorizationEnabled
    assert config.anonymousUserRole == "anonymous"
    assert config.superUserRoles == ["localhost", "superUser", "admin"]
    assert "webServicePortTls" not in loaded.ignored


def test_pulsars_broker_conf_sets_nothing_this_broker_refuses(tmp_path: Path) -> None:
    loaded = load("pulsar-broker.conf", tmp_path)
    assert "bookkeeperEnableStickyReads" in loaded.ignored
    assert "delayedDeliveryEnabled" in loaded.ignored  # a value this broker cannot honour: said
    assert loaded.config.clusterName == "standalone"  # clusterName= is unset, as in Pulsar
