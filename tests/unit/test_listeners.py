"""Listeners, bind addresses and lookup-listener resolution (PIP-95, PIP-338)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration, load_config
from pulsar_grpc.broker.errors import InvalidArgumentError, ServiceNotReadyError
from pulsar_grpc.broker.listeners import (
    GRPC_SCHEMES,
    WEB_SCHEMES,
    BindAddress,
    Endpoint,
    Listener,
    ListenerConfig,
    choose_listener,
    parse_entries,
)
from pulsar_grpc.broker.lookup import BrokerData, lookup

TLS_FILES = {"tlsCertificateFilePath": "c.pem", "tlsKeyFilePath": "k.pem"}
TWO_LISTENERS = "internal:grpc://broker-1.cluster:6650,external:grpc://broker-1.example.com:6650"


def errors_of(overrides: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(None, {}, overrides)
    return info.value.errors


# One case per rule: the properties set, the property reported and a fragment of the problem.
INVALID = [
    pytest.param(
        {"advertisedListeners": "grpc://a:6650"},
        "advertisedListeners",
        "'grpc://a:6650' has no listener name (expected <name>:<scheme>://<host>:<port>)",
        id="no-listener-name",
    ),
    pytest.param(
        {"advertisedListeners": ":grpc://a:6650"},
        "advertisedListeners",
        "':grpc://a:6650' has no listener name",
        id="empty-listener-name",
    ),
    pytest.param(
        {"advertisedListeners": "ext.1:grpc://a:6650"},
        "advertisedListeners",
        "'ext.1:grpc://a:6650' has listener name 'ext.1'; a listener name may contain only "
        "ASCII letters, digits, '_' and '-'",
        id="bad-listener-name",
    ),
    pytest.param(
        {"advertisedListeners": "extérieur:grpc://a:6650"},
        "advertisedListeners",
        "has listener name 'extérieur'",
        id="non-ascii-listener-name",
    ),
    pytest.param(
        {"advertisedListeners": "ext:a:6650"},
        "advertisedListeners",
        "'ext:a:6650' has no <scheme>:// after the listener name",
        id="no-url",
    ),
    pytest.param(
        {"advertisedListeners": "ext:pulsar://a:6650"},
        "advertisedListeners",
        "'ext:pulsar://a:6650' has unsupported scheme 'pulsar' "
        "(expected one of grpc, grpc+ssl, http, https)",
        id="unsupported-scheme",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://a"},
        "advertisedListeners",
        "'ext:grpc://a' has a bad URL",
        id="no-port",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://a:6650/path"},
        "advertisedListeners",
        "'ext:grpc://a:6650/path' has a bad URL",
        id="path",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://::1:6650"},
        "advertisedListeners",
        "an IPv6 host in brackets",
        id="ipv6-without-brackets",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://[zz::1]:6650"},
        "advertisedListeners",
        "has host [zz::1], which is not an IPv6 address",
        id="bad-ipv6",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://a:70000"},
        "advertisedListeners",
        "'ext:grpc://a:70000' has port 70000, which is not a port number (0..65535)",
        id="port-out-of-range",
    ),
    pytest.param(
        {"bindAddresses": "internal:grpcs://0.0.0.0:6652"},
        "bindAddresses",
        "'internal:grpcs://0.0.0.0:6652' has unsupported scheme 'grpcs'",
        id="bind-malformed",
    ),
    pytest.param(
        {"advertisedListeners": "ext:grpc://a:6650,ext:grpc://b:6650"},
        "advertisedListeners",
        "listener 'ext' has two grpc URLs: 'ext:grpc://a:6650' and 'ext:grpc://b:6650'",
        id="two-urls-one-scheme",
    ),
    pytest.param(
        {"advertisedListeners": "int:grpc://a:6650,ext:grpc+ssl://a:6650"},
        "advertisedListeners",
        "a:6650 is advertised under two listeners: 'int:grpc://a:6650' and 'ext:grpc+ssl://a:6650'",
        id="host-port-under-two-listeners",
    ),
    pytest.param(
        {"advertisedListeners": TWO_LISTENERS, "internalListenerName": "cluster"},
        "internalListenerName",
        "'cluster' is not among the listeners (internal, external)",
        id="unknown-internal-listener",
    ),
    pytest.param(
        {"advertisedListeners": TWO_LISTENERS, "lookupListenerName": "public"},
        "lookupListenerName",
        "'public' is not among the listeners (internal, external)",
        id="unknown-lookup-listener",
    ),
    pytest.param(
        {"lookupListenerName": "external"},
        "lookupListenerName",
        "'external' is not among the listeners (internal)",
        id="lookup-listener-without-advertised-listeners",
    ),
    pytest.param(
        {"advertisedListeners": TWO_LISTENERS, "bindAddresses": "gateway:grpc://0.0.0.0:6652"},
        "bindAddresses",
        "'gateway:grpc://0.0.0.0:6652' is tied to listener 'gateway', which is not advertised "
        "(listeners: internal, external)",
        id="bind-listener-not-advertised",
    ),
    pytest.param(
        {
            "advertisedListeners": TWO_LISTENERS,
            "bindAddresses": "internal:grpc://127.0.0.1:6652,external:http://127.0.0.1:6652",
        },
        "bindAddresses",
        "127.0.0.1:6652 is bound twice: by bindAddresses entry 'internal:grpc://127.0.0.1:6652' "
        "and by bindAddresses entry 'external:http://127.0.0.1:6652'",
        id="bind-twice-two-schemes",
    ),
    pytest.param(
        {
            "advertisedListeners": TWO_LISTENERS,
            "bindAddresses": "internal:grpc://[::1]:6652,external:grpc://[0:0::1]:6652",
        },
        "bindAddresses",
        "[::1]:6652 is bound twice",
        id="bind-twice-two-listeners-ipv6-spellings",
    ),
    pytest.param(
        {"bindAddresses": "internal:grpc://127.0.0.1:50051"},
        "bindAddresses",
        "127.0.0.1:50051 is bound twice: by grpcServicePort (grpc://127.0.0.1:50051) and by "
        "bindAddresses entry 'internal:grpc://127.0.0.1:50051'",
        id="bind-clashes-with-primary",
    ),
    pytest.param(
        {"bindAddresses": "internal:grpc+ssl://0.0.0.0:6653", "tlsKeyFilePath": "k.pem"},
        "tlsCertificateFilePath",
        "required when bindAddresses entry 'internal:grpc+ssl://0.0.0.0:6653' is set",
        id="tls-bind-without-certificate",
    ),
    pytest.param(
        {"bindAddresses": "internal:https://0.0.0.0:8443", "tlsCertificateFilePath": "c.pem"},
        "tlsKeyFilePath",
        "required when bindAddresses entry 'internal:https://0.0.0.0:8443' is set",
        id="tls-bind-without-key",
    ),
    pytest.param(
        {"grpcServicePortTls": "6651", "tlsKeyFilePath": "k.pem"},
        "tlsCertificateFilePath",
        "required when grpcServicePortTls is set",
        id="tls-port-without-certificate",
    ),
]


@pytest.mark.parametrize(("overrides", "prop", "fragment"), INVALID)
def test_invalid(overrides: dict[str, str], prop: str, fragment: str) -> None:
    errors = errors_of(overrides)
    (error,) = errors
    # "--set <property>: <property>: ..." when the property was set, "<property>: ..." otherwise.
    assert error.startswith((f"{prop}: ", f"--set {prop}: {prop}: "))
    assert fragment in error


def test_errors_name_the_source_and_come_with_other_errors() -> None:
    errors = errors_of(
        {"maxMessageSize": "0", "advertisedListeners": "ext:pulsar://a:6650, :grpc://b:1"}
    )
    assert errors == [
        "--set maxMessageSize: maxMessageSize: 0 is less than the minimum 1",
        "--set advertisedListeners: advertisedListeners: 'ext:pulsar://a:6650' has unsupported "
        "scheme 'pulsar' (expected one of grpc, grpc+ssl, http, https)",
        "--set advertisedListeners: advertisedListeners: ':grpc://b:1' has no listener name "
        "(expected <name>:<scheme>://<host>:<port>)",
    ]


VALID = [
    pytest.param({"advertisedListeners": "public:grpc+ssl://gw.example.com:443"}, id="tls-only"),
    pytest.param(
        # A gateway terminates TLS in front of this plaintext broker (PIP-95).
        {"advertisedListeners": "internal:grpc://b1:6650,public:grpc+ssl://gw.example.com:443"},
        id="advertised-tls-without-local-tls",
    ),
    pytest.param(
        {
            "advertisedListeners": "ext:grpc://a:6650, ext:grpc://a:6650",
            "bindAddresses": "ext:grpc://0.0.0.0:6652,ext:grpc://0.0.0.0:6652",
        },
        id="exact-duplicates",
    ),
    pytest.param(
        {"advertisedListeners": " ,int:grpc://a:6650 ,, ext:http://b:8080,  "},
        id="whitespace-and-empty-entries",
    ),
    pytest.param(
        {"advertisedListeners": "int:grpc://a:6650,int:http://a:8080"},
        id="one-host-several-schemes-in-one-listener",
    ),
    pytest.param(
        {
            "advertisedListeners": "int:grpc://a:6650,ext:grpc://b:6650",
            "bindAddresses": "int:grpc://127.0.0.1:0,ext:grpc://127.0.0.1:0,ext:http://127.0.0.1:0",
        },
        id="port-0-never-clashes",
    ),
    pytest.param(
        {
            "grpcServicePort": "",
            "advertisedListeners": "int:grpc://a:6650",
            "bindAddresses": "int:grpc://0.0.0.0:6650",
        },
        id="grpc-only-through-bind-addresses",
    ),
    pytest.param(
        {"bindAddresses": "cluster:grpc+ssl://0.0.0.0:6651", "internalListenerName": "cluster"}
        | TLS_FILES,
        id="implicit-listener-named-by-internalListenerName",
    ),
    pytest.param(
        {"advertisedListeners": "int_1:GRPC://[::1]:6650,ext-2:grpc://Broker.Example.com:1"},
        id="names-with-underscore-and-hyphen-ipv6-and-case",
    ),
]


@pytest.mark.parametrize("overrides", VALID)
def test_valid(overrides: dict[str, str]) -> None:
    ListenerConfig.from_config(load_config(None, {}, overrides))


def test_parse_entries_normalizes() -> None:
    entries, problems = parse_entries(
        " a:GRPC://[0:0::1]:1 , b:http://Host.Example:2,,a:grpc://[::1]:1"
    )
    assert problems == []
    assert [str(e) for e in entries] == ["a:grpc://[::1]:1", "b:http://host.example:2"]


def test_listener_config_from_advertised_listeners() -> None:
    config = load_config(
        None,
        {},
        {
            "advertisedListeners": "internal:grpc://b1.cluster:6650,internal:http://b1.cluster:8080,"
            "external:grpc+ssl://b1.example.com:443,external:https://b1.example.com:8443",
            "bindAddresses": "external:grpc://0.0.0.0:6652, external:http://[::]:8081",
            "lookupListenerName": "external",
            "grpcServicePortTls": "6651",
        }
        | TLS_FILES,
    )
    listeners = ListenerConfig.from_config(config)
    assert list(listeners.listeners) == ["internal", "external"]
    internal, external = listeners.listeners.values()
    assert internal == Listener(
        "internal", {"grpc": Endpoint("b1.cluster", 6650), "http": Endpoint("b1.cluster", 8080)}
    )
    assert (internal.grpc_url, internal.grpc_url_tls) == ("grpc://b1.cluster:6650", None)
    assert (internal.http_url, internal.https_url) == ("http://b1.cluster:8080", None)
    assert (external.grpc_url, external.grpc_url_tls) == (None, "grpc+ssl://b1.example.com:443")
    assert (external.http_url, external.https_url) == (None, "https://b1.example.com:8443")
    assert listeners.internal_listener_name == "internal"
    assert listeners.internal_listener is internal
    assert listeners.lookup_listener_name == "external"
    assert listeners.bind_addresses == [
        BindAddress(None, "grpc", "127.0.0.1", 50051),
        BindAddress(None, "grpc+ssl", "127.0.0.1", 6651),
        BindAddress(None, "http", "127.0.0.1", 8080),
        BindAddress("external", "grpc", "0.0.0.0", 6652),
        BindAddress("external", "http", "::", 8081),
    ]
    assert [b.address for b in listeners.bind_addresses_for(WEB_SCHEMES)] == [
        "127.0.0.1:8080",
        "[::]:8081",
    ]
    grpc_binds = listeners.bind_addresses_for(GRPC_SCHEMES)
    assert [(str(b), b.tls) for b in grpc_binds] == [
        ("grpc://127.0.0.1:50051", False),
        ("grpc+ssl://127.0.0.1:6651", True),
        ("external:grpc://0.0.0.0:6652", False),
    ]


def test_implicit_internal_listener_advertises_the_primary_ports() -> None:
    config = ServiceConfiguration(
        webServicePortTls=8443, tlsCertificateFilePath="c.pem", tlsKeyFilePath="k.pem"
    )
    listeners = ListenerConfig.from_config(config)
    assert listeners.internal_listener_name == "internal"
    assert listeners.lookup_listener_name is None
    assert listeners.listeners == {
        "internal": Listener(
            "internal",
            {
                "grpc": Endpoint("127.0.0.1", 50051),
                "http": Endpoint("127.0.0.1", 8080),
                "https": Endpoint("127.0.0.1", 8443),
            },
        )
    }


def test_implicit_internal_listener_prefers_advertised_address() -> None:
    config = ServiceConfiguration(
        bindAddress="0.0.0.0", advertisedAddress="broker-1.example", webServicePort=None
    )
    (listener,) = ListenerConfig.from_config(config).listeners.values()
    assert (listener.grpc_url, listener.http_url) == ("grpc://broker-1.example:50051", None)


def test_implicit_internal_listener_never_advertises_a_wildcard() -> None:
    config = ServiceConfiguration(bindAddress="0.0.0.0")
    (listener,) = ListenerConfig.from_config(config).listeners.values()
    assert listener.urls["grpc"].host not in ("0.0.0.0", "")


def test_internal_listener_defaults_to_the_first() -> None:
    config = ServiceConfiguration(advertisedListeners="b:grpc://b:1,a:grpc://a:1")
    assert ListenerConfig.from_config(config).internal_listener_name == "b"


def test_from_config_refuses_an_invalid_configuration() -> None:
    config = ServiceConfiguration(advertisedListeners="a:grpc://a:1", lookupListenerName="z")
    with pytest.raises(ValueError, match=r"lookupListenerName: 'z' is not among the listeners"):
        ListenerConfig.from_config(config)


@pytest.fixture
def listeners() -> ListenerConfig:
    config = ServiceConfiguration(
        advertisedListeners="internal:grpc://b1.cluster:6650,"
        "external:grpc://b1.example.com:6650,public:grpc+ssl://gw.example.com:443",
        bindAddresses="external:grpc://127.0.0.2:6650",
    )
    return ListenerConfig.from_config(config)


@pytest.mark.parametrize(
    ("lookup_listener", "requested", "via", "chosen"),
    [
        pytest.param("public", "internal", "external", "internal", id="request-wins"),
        pytest.param("public", None, "external", "external", id="bind-address-next"),
        pytest.param("public", "", "external", "external", id="empty-request-is-none"),
        pytest.param("public", None, None, "public", id="lookup-listener-next"),
        pytest.param(None, None, None, "internal", id="internal-last"),
    ],
)
def test_choose_listener_precedence(
    listeners: ListenerConfig,
    lookup_listener: str | None,
    requested: str | None,
    via: str | None,
    chosen: str,
) -> None:
    config = replace(listeners, lookup_listener_name=lookup_listener)
    assert choose_listener(config, requested, via).name == chosen


def test_choose_listener_unknown_name(listeners: ListenerConfig) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        choose_listener(listeners, "dmz", "external")
    assert info.value.message == (
        "unknown listener name 'dmz'; this broker's listeners are internal, external, public"
    )


def test_a_lookup_for_a_listener_the_owner_lacks_is_a_clear_service_not_ready() -> None:
    """Brokers of one cluster configured with different listeners: the local broker knows the
    requested listener, the owner does not advertise it (Pulsar: ServiceNotReady)."""
    config = load_config(
        None,
        {},
        {
            "advertisedListeners": "internal:grpc://b1.cluster:6650,"
            "external:grpc://b1.example.com:6650",
        },
    )
    listeners = ListenerConfig.from_config(config)
    owner = BrokerData({"internal": Listener("internal", {"grpc": Endpoint("b2.cluster", 6650)})})
    assert lookup(listeners, owner, "internal", None).grpc_url == "grpc://b2.cluster:6650"
    with pytest.raises(ServiceNotReadyError, match=r"no listener 'external' .*has: internal"):
        lookup(listeners, owner, "external", None)
