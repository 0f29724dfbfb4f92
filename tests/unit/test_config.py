"""Loading and validating ServiceConfiguration from broker.conf, PULSAR_PREFIX_* and --set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pulsar_grpc.broker.config import (
    ENV_PREFIX,
    PROPERTY_NAMES,
    ConfigError,
    ServiceConfiguration,
    load_config,
    parse_set_flags,
    read_config,
    validate,
)


def write_conf(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(text, encoding="utf-8")
    return path


def load_errors(
    path: Path | None = None,
    env: dict[str, str] | None = None,
    overrides: dict[str, str] | None = None,
) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, env or {}, overrides or {})
    assert str(info.value) == "\n".join(info.value.errors)
    assert isinstance(info.value, ValueError)
    return info.value.errors


def test_defaults() -> None:
    config = load_config(None, {}, {})
    assert config == ServiceConfiguration()
    assert config.bindAddress == "127.0.0.1"
    assert config.grpcServicePort == 50051
    assert config.grpcServicePortTls is None
    assert config.webServicePort == 8080
    assert config.messagingProtocols == ["grpc"]
    assert config.dataDirectory == "./data"
    assert config.allowAutoTopicCreationType == "non-partitioned"
    assert config.maxMessageSize == 5242880
    assert config.defaultNumberOfNamespaceBundles == 4
    assert config.maxUnackedMessagesPerConsumer == 50000
    assert validate(config) == []


def test_property_names_are_pulsars() -> None:
    for name in ("clusterName", "advertisedListeners", "internalListenerName", "bindAddresses"):
        assert name in PROPERTY_NAMES
    assert (
        ServiceConfiguration().messagingProtocols is not ServiceConfiguration().messagingProtocols
    )


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("clusterName", "  prod-east  ", "prod-east"),
        ("advertisedAddress", "broker-1.example", "broker-1.example"),
        ("advertisedAddress", "", None),
        ("grpcServicePort", "6650", 6650),
        ("grpcServicePort", "0", 0),
        ("grpcServicePortTls", "", None),
        ("webServicePort", "", None),  # empty turns an optional listener off, as in Pulsar
        ("maxMessageSize", "+1024", 1024),
        ("maxMessageSize", "", 5242880),  # empty means default for non-optional properties
        ("allowAutoTopicCreation", "FALSE", False),
        ("journalSyncData", "True", True),
        ("allowAutoTopicCreationType", "partitioned", "partitioned"),
        ("messagingProtocols", "grpc, kafka ,", ["grpc", "kafka"]),
        ("messagingProtocols", "", ["grpc"]),
        ("maxUnackedMessagesPerConsumer", "0", 0),
        ("defaultRetentionTimeInMinutes", "-1", -1),
        ("internalListenerName", "internal", "internal"),
    ],
)
def test_values_parsed_by_type(name: str, raw: str, value: Any) -> None:
    config = load_config(None, {}, {name: raw})
    assert getattr(config, name) == value


def test_file_format(tmp_path: Path) -> None:
    path = write_conf(
        tmp_path,
        "# broker settings\n"
        "\n"
        "   clusterName = test-cluster  \n"
        "grpcServicePort=6650\n"
        "  # indented comment\n"
        "advertisedListeners=internal:grpc://a:6650,external:grpc://b:6650\n"
        "webServicePort=\n"
        "maxMessageSize=\n"
        "brokerDeduplicationEnabled=true\n",
    )
    config = load_config(path, {}, {})
    assert config.clusterName == "test-cluster"
    assert config.grpcServicePort == 6650
    assert config.advertisedListeners == "internal:grpc://a:6650,external:grpc://b:6650"
    assert config.webServicePort is None
    assert config.maxMessageSize == 5242880
    assert config.brokerDeduplicationEnabled is True


def test_precedence_file_then_env_then_overrides(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "grpcServicePort=1000\nclusterName=file\nwebServicePort=2000\n")
    env = {
        f"{ENV_PREFIX}grpcServicePort": "1001",
        f"{ENV_PREFIX}clusterName": "env",
        "PATH": "/usr/bin",  # unrelated variables are ignored
        "PULSAR_MEM": "-Xmx1g",
    }
    config = load_config(path, env, {"grpcServicePort": "1002"})
    assert config.grpcServicePort == 1002
    assert config.clusterName == "env"
    assert config.webServicePort == 2000


def test_empty_later_value_resets_to_default(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "maxMessageSize=1024\n")
    config = load_config(path, {f"{ENV_PREFIX}maxMessageSize": ""}, {})
    assert config.maxMessageSize == 5242880


@pytest.mark.parametrize(
    ("name", "raw", "error"),
    [
        (
            "grpcServicePort",
            "abc",
            "--set grpcServicePort: grpcServicePort: 'abc' is not an integer",
        ),
        ("grpcServicePort", "1_000", "'1_000' is not an integer"),
        ("grpcServicePort", "6650.0", "'6650.0' is not an integer"),
        ("authenticationEnabled", "yes", "'yes' is not a boolean (true or false)"),
        (
            "allowAutoTopicCreationType",
            "Partitioned",
            "'Partitioned' is not one of non-partitioned, partitioned",
        ),
        ("grpcServicePort", "70000", "grpcServicePort: 70000 is not a port number (0..65535)"),
        ("webServicePort", "-1", "webServicePort: -1 is not a port number (0..65535)"),
        ("maxMessageSize", "0", "maxMessageSize: 0 is less than the minimum 1"),
        ("defaultNumberOfNamespaceBundles", "0", "0 is less than the minimum 1"),
        ("defaultNumPartitions", "0", "0 is less than the minimum 1"),
        ("dispatcherMaxReadBatchSize", "0", "0 is less than the minimum 1"),
        ("defaultRetentionSizeInMB", "-2", "-2 is less than the minimum -1"),
        ("maxUnackedMessagesPerConsumer", "-1", "-1 is less than the minimum 0"),
        ("brokerDeduplicationEntriesInterval", "0", "0 is less than the minimum 1"),
        ("brokerDeduplicationSnapshotFrequencyInSeconds", "-1", "-1 is less than the minimum 0"),
        ("messagingProtocols", ",", "messagingProtocols: must not be empty"),
        ("clusterName", " ", None),  # empty -> default, which is valid
        ("webServicePort", "50051", "webServicePort: 50051 is already used by grpcServicePort"),
        (
            "grpcServicePort",
            "",
            "grpcServicePort: None disables gRPC, but messagingProtocols includes grpc",
        ),
    ],
)
def test_invalid_values(name: str, raw: str, error: str | None) -> None:
    if error is None:
        load_config(None, {}, {name: raw})
        return
    errors = load_errors(overrides={name: raw})
    assert len(errors) == 1
    assert errors[0].startswith(f"--set {name}: {name}: ")
    assert error in errors[0]


def test_error_names_file_and_line(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "# comment\nclusterName=x\n\ngrpcServicePort=abc\n")
    assert load_errors(path) == [f"{path}:4: grpcServicePort: 'abc' is not an integer"]


def test_error_names_env_var() -> None:
    errors = load_errors(env={f"{ENV_PREFIX}maxMessageSize": "big"})
    assert errors == [f"env {ENV_PREFIX}maxMessageSize: maxMessageSize: 'big' is not an integer"]


def test_malformed_line(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "clusterName\n=value\n")
    assert load_errors(path) == [
        f"{path}:1: expected <property>=<value>, got 'clusterName'",
        f"{path}:2: expected <property>=<value>, got '=value'",
    ]


def test_unreadable_file(tmp_path: Path) -> None:
    errors = load_errors(tmp_path / "missing.conf")
    assert len(errors) == 1
    assert errors[0].startswith(f"{tmp_path / 'missing.conf'}: cannot read")


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("grpcServicePrt", " (did you mean grpcServicePort?)"),
        ("grpcserviceport", " (did you mean grpcServicePort?)"),
        ("maxMesageSize", " (did you mean maxMessageSize?)"),
        ("webServicePortTsl", " (did you mean webServicePortTls?)"),
        (
            "transactionCoordinatorEnable",
            " (did you mean transactionCoordinatorEnabled, which is ignored?)",
        ),
        ("zzz", ""),
    ],
)
def test_unknown_property_suggests(name: str, hint: str) -> None:
    assert load_errors(overrides={name: "1"}) == [f"--set {name}: unknown property {name!r}{hint}"]


def test_pulsars_properties_of_features_it_lacks_are_ignored_and_named() -> None:
    loaded = read_config(
        None,
        {f"{ENV_PREFIX}brokerServicePort": "6650"},
        {
            "bookkeeperClientTimeoutInSeconds": "30",
            "metadataStoreConfigPath": "",
            "clusterName": "c",
        },
    )
    assert loaded.config.clusterName == "c"
    # Empty is unset (as in Pulsar): nothing to warn of.
    assert loaded.ignored == ("brokerServicePort", "bookkeeperClientTimeoutInSeconds")
    warning = loaded.ignored_warning()
    assert warning.startswith("ignoring 2 Pulsar properties of features this broker does not")
    assert warning.endswith(": brokerServicePort, bookkeeperClientTimeoutInSeconds")


def test_all_errors_reported_together(tmp_path: Path) -> None:
    path = write_conf(tmp_path, "grpcServicePort=abc\nmaxMessageSize=0\nclusterNam=x\n")
    errors = load_errors(
        path,
        env={f"{ENV_PREFIX}webServicePort": "99999"},
        overrides={"allowAutoTopicCreation": "maybe"},
    )
    assert errors == [
        f"{path}:1: grpcServicePort: 'abc' is not an integer",
        f"{path}:3: unknown property 'clusterNam' (did you mean clusterName?)",
        "--set allowAutoTopicCreation: allowAutoTopicCreation: 'maybe' is not a boolean "
        "(true or false)",
        f"env {ENV_PREFIX}webServicePort: webServicePort: 99999 is not a port number (0..65535)",
        f"{path}:2: maxMessageSize: 0 is less than the minimum 1",
    ]


def test_bad_value_is_reported_even_when_overridden(tmp_path: Path) -> None:
    """The file stays wrong; only the overriding value is checked by the rules."""
    path = write_conf(tmp_path, "grpcServicePort=abc\n")
    assert load_errors(path, overrides={"grpcServicePort": "70000"}) == [
        f"{path}:1: grpcServicePort: 'abc' is not an integer",
        "--set grpcServicePort: grpcServicePort: 70000 is not a port number (0..65535)",
    ]


@pytest.mark.parametrize(
    ("overrides", "errors"),
    [
        (
            {"grpcServicePortTls": "6651"},
            [
                "tlsCertificateFilePath: required when grpcServicePortTls is set",
                "tlsKeyFilePath: required when grpcServicePortTls is set",
            ],
        ),
        (
            {"webServicePortTls": "0", "tlsCertificateFilePath": "c.pem"},
            ["tlsKeyFilePath: required when webServicePortTls is set"],
        ),
        (
            {"tlsRequireTrustedClientCertOnConnect": "true"},
            ["tlsTrustCertsFilePath: required when tlsRequireTrustedClientCertOnConnect=true"],
        ),
        (
            {
                "grpcServicePortTls": "6651",
                "tlsCertificateFilePath": "c.pem",
                "tlsKeyFilePath": "k.pem",
                "tlsTrustCertsFilePath": "ca.pem",
                "tlsRequireTrustedClientCertOnConnect": "true",
            },
            [],
        ),
    ],
)
def test_tls_rules(overrides: dict[str, str], errors: list[str]) -> None:
    if not errors:
        load_config(None, {}, overrides)
        return
    assert load_errors(overrides=overrides) == errors


def test_ephemeral_ports_never_clash() -> None:
    config = load_config(None, {}, {"grpcServicePort": "0", "webServicePort": "0"})
    assert (config.grpcServicePort, config.webServicePort) == (0, 0)


def test_validate_programmatic_config() -> None:
    config = ServiceConfiguration(grpcServicePort=-5, messagingProtocols=[])
    assert validate(config) == [
        "grpcServicePort: -5 is not a port number (0..65535)",
        "messagingProtocols: must not be empty",
    ]


@pytest.mark.parametrize(
    ("flags", "result"),
    [
        ([], {}),
        (["grpcServicePort=6650"], {"grpcServicePort": "6650"}),
        (["advertisedListeners=a:pulsar://h:1=x"], {"advertisedListeners": "a:pulsar://h:1=x"}),
        (["webServicePort="], {"webServicePort": ""}),
    ],
)
def test_parse_set_flags(flags: list[str], result: dict[str, str]) -> None:
    assert parse_set_flags(flags) == result


def test_parse_set_flags_errors() -> None:
    with pytest.raises(ConfigError) as info:
        parse_set_flags(["grpcServicePort", "=1"])
    assert info.value.errors == [
        "--set 'grpcServicePort': expected <property>=<value>",
        "--set '=1': expected <property>=<value>",
    ]
