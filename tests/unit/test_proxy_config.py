"""The proxy's settings (Pulsar proxy.conf names, the broker's loader and its messages) and its
broker directory: which URLs it may forward to."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from pulsar_grpc.broker.config import ConfigError
from pulsar_grpc.broker.errors import InvalidArgumentError
from pulsar_grpc.broker.metadata.memory import MemoryMetadataStore
from pulsar_grpc.cli.main import main
from pulsar_grpc.proxy.brokers import RECHECK_S, BrokerDirectory
from pulsar_grpc.proxy.config import broker_view, load_proxy_config

BROKER = {"brokerServiceURL": "grpc://b:6650"}


def problems(**values: str) -> str:
    with pytest.raises(ConfigError) as refused:
        load_proxy_config(None, {}, values)
    return str(refused.value)


def test_a_proxy_conf_file_then_env_then_flags(tmp_path: Path) -> None:
    conf = tmp_path / "proxy.conf"
    conf.write_text("# Pulsar's names\nbrokerServiceURL=grpc://b:6650\ngrpcServicePort=7000\n")
    config = load_proxy_config(
        conf, {"PULSAR_PREFIX_grpcServicePort": "7001"}, {"webServicePort": "9000"}
    )
    assert (config.grpcServicePort, config.webServicePort) == (7001, 9000)
    assert config.brokerServiceURL == "grpc://b:6650"


def test_a_misspelt_property_gets_a_did_you_mean() -> None:
    message = problems(**BROKER, brokerServiceUrl="grpc://x:1", tlsEnabledWithBrokers="true")
    assert "unknown property 'brokerServiceUrl' (did you mean brokerServiceURL?)" in message
    assert "did you mean tlsEnabledWithBroker?" in message


def test_the_brokers_must_be_named() -> None:
    assert "metadataStoreUrl: required" in problems()
    assert "expected a grpc+ssl:// URL" in problems(brokerServiceURLTLS="grpc://b:6651")
    assert "expected a grpc:// URL" in problems(brokerServiceURL="grpc+ssl://b:6651")
    assert "invalid service URL" in problems(brokerServiceURL="pulsar://b:6650")
    assert "brokerServiceURLTLS: required when tlsEnabledWithBroker" in problems(
        **BROKER, tlsEnabledWithBroker="true"
    )
    assert load_proxy_config(None, {}, {"metadataStoreUrl": "zk:zk1:2181/pulsar"})


def test_tls_and_security_problems_are_named() -> None:
    assert "tlsCertificateFilePath: required when grpcServicePortTls" in problems(
        **BROKER, grpcServicePortTls="0"
    )
    assert "scram at the proxy needs metadataStoreUrl" in problems(
        **BROKER, authenticationEnabled="true", authenticationProviders="scram"
    )
    # With the cluster's store (where the role-token keys are), SCRAM is the broker's.
    scram_at_proxy = {
        "metadataStoreUrl": "zk:zk1:2181/pulsar",
        "authenticationEnabled": "true",
        "authenticationProviders": "scram",
        "scramAuthConf": "data:;base64,",
    }
    assert load_proxy_config(None, {}, scram_at_proxy).scramAuthConf == "data:;base64,"
    assert "scram is not supported for the broker's own credentials (nor a proxy's)" in problems(
        **BROKER,
        brokerClientAuthenticationPlugin="scram",
        brokerClientAuthenticationParameters="userId:u,password:p",
    )
    assert "brokerClientAuthenticationPlugin" in problems(
        **BROKER, brokerClientAuthenticationPlugin="kerberos"
    )
    assert "tokenSecretKey" in problems(**BROKER, tokenSecretKey="data:;base64,!!")


def test_the_brokers_security_code_reads_the_proxys_settings_of_the_same_names() -> None:
    config = load_proxy_config(
        None,
        {},
        {**BROKER, "authenticationEnabled": "true", "authenticationProviders": "token,tls"},
    )
    view = broker_view(config)
    assert view.authenticationEnabled and view.authenticationProviders == ["token", "tls"]
    assert view.grpcServicePort == config.grpcServicePort


def report(*urls: str, listeners: dict[str, dict[str, str]] | None = None) -> bytes:
    data: dict[str, object] = {"pulsarServiceUrl": urls[0], "advertisedListeners": listeners or {}}
    if len(urls) > 1:
        data["pulsarServiceUrlTls"] = urls[1]
    return json.dumps(data).encode()


async def test_only_live_brokers_urls_are_forwarded_to() -> None:
    store = MemoryMetadataStore(f"proxy-{uuid.uuid4().hex}")
    external = {"external": {"brokerServiceUrl": "grpc://public-b1:6650"}}
    b1 = report("grpc://b1:6650", "grpc+ssl://b1:6651", listeners=external)
    await store.put("/loadbalance/brokers/b1:8080", b1)
    directory = BrokerDirectory(store, [], tls=False)
    for url in ("grpc://b1:6650", "grpc+ssl://b1:6651", "grpc://public-b1:6650"):
        assert await directory.check(url) == url
    assert await directory.service_url() == "grpc://b1:6650"
    with pytest.raises(InvalidArgumentError, match="is not a broker of this cluster"):
        await directory.check("grpc://evil:6650")
    directory.learn("grpc://evil:6650")  # only without a store does a lookup teach a broker
    with pytest.raises(InvalidArgumentError):
        await directory.check("grpc://evil:6650")
    # A broker joining is found at once by the first call naming it.
    await store.put("/loadbalance/brokers/b2:8080", report("grpc://b2:6650"))
    await asyncio.sleep(RECHECK_S)  # the miss just before read the list
    assert await directory.check("grpc://b2:6650") == "grpc://b2:6650"
    await store.close()


async def test_without_a_store_the_configured_and_answered_brokers() -> None:
    directory = BrokerDirectory(None, ["grpc://gateway:6650"], tls=False)
    assert await directory.service_url() == "grpc://gateway:6650"
    assert await directory.check("grpc://gateway:6650") == "grpc://gateway:6650"
    with pytest.raises(InvalidArgumentError):
        await directory.check("grpc://b7:6650")
    directory.learn("grpc://b7:6650")  # a broker answered it to the proxy's own lookup
    assert await directory.check("grpc://b7:6650") == "grpc://b7:6650"


def test_the_proxy_command_refuses_a_bad_configuration_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main(["proxy", "--set", "brokerServicUrl=grpc://b:6650"]) == 2
    error = capsys.readouterr().err
    assert "pulsar-grpc proxy: invalid configuration" in error
    assert "did you mean brokerServiceURL?" in error
    assert main(["proxy", "--config", str(tmp_path / "missing.conf")]) == 2
    assert "no such file" in capsys.readouterr().err
