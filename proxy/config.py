"""Typed proxy settings whose names are Pulsar's proxy.conf property names.

Where a setting means the same as the broker's, it has the broker's name (grpcServicePort,
authenticationProviders, tokenSecretKey, tlsCertificateFilePath, ...); the proxy's own
are Pulsar proxy.conf's (brokerServiceURL, tlsEnabledWithBroker, ...). Loaded by the broker's
machinery (broker/config.py's ``load_settings``): defaults, the file, ``PULSAR_PREFIX_*``
variables, ``--set`` flags; an unknown property is an error with a "did you mean" hint.

The broker's security code (authentication providers, token keys, TLS files, the broker
client's credentials) reads its settings as a ``ServiceConfiguration``: :func:`broker_view`
gives it the proxy's settings of the same names in that form, so nothing is parsed twice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from pulsar_grpc.broker.config import (
    ConfigError,
    ServiceConfiguration,
    SettingsRule,
    load_settings,
)
from pulsar_grpc.broker.metadata.factory import StoreKind, parse_metadata_store_url
from pulsar_grpc.broker.security.settings import ClientAuthenticationSettings
from pulsar_grpc.broker.security.tokens import config_problems as token_config_problems
from pulsar_grpc.broker.web.broker_client import config_problems as broker_client_problems
from pulsar_grpc.client._channels import parse_service_url

__all__ = ["ConfigError", "ProxyConfiguration", "broker_view", "load_proxy_config"]


@dataclass
class ProxyConfiguration(ClientAuthenticationSettings):
    """Proxy settings; defaults suit a proxy next to a local cluster."""

    # --- where the brokers are ---
    # Pulsar's names. With metadataStoreUrl (zk:...), the live brokers are read from their load
    # reports (/loadbalance/brokers); without it, brokerServiceURL (grpc://host:port) and/or
    # brokerServiceURLTLS (grpc+ssl://host:port) is the one broker address (or a gateway).
    metadataStoreUrl: str = ""
    metadataStoreSessionTimeoutMillis: int = 30000
    brokerServiceURL: str | None = None
    brokerServiceURLTLS: str | None = None
    # How many HTTP/2 connections the proxy keeps to each broker; the client streams forwarded
    # to a broker are spread over them (Pulsar's client name for the same idea).
    connectionsPerBroker: int = 4
    # Redirects a lookup follows inside the proxy before it gives up (Pulsar's name).
    maxLookupRedirects: int = 3
    # Lookups, partition metadata and namespace listings in flight at once; more are refused
    # with TooManyRequests (retryable), as Pulsar's proxy does.
    maxConcurrentLookupRequests: int = 50000

    # --- its own network ---
    bindAddress: str = "0.0.0.0"
    # The host clients are told to connect to (lookup answers); None: the machine's name, or
    # bindAddress when that is a specific address.
    advertisedAddress: str | None = None
    grpcServicePort: int | None = 6650
    grpcServicePortTls: int | None = None
    # /metrics and /status.html; None: no web port.
    webServicePort: int | None = 8081
    # As the broker's: clients' connections are pinged this often (and dropped when silent).
    keepAliveIntervalSeconds: int = 30
    # The brokers' maxMessageSize: the proxy passes messages up to it (plus framing) both ways.
    maxMessageSize: int = 5 * 1024 * 1024
    # As the broker's (ours): new calls that may wait for the proxy to take them.
    grpcMaxPendingCalls: int = 100_000

    # --- clients' authentication at the proxy: ClientAuthenticationSettings' fields, the
    # broker's names and meaning. SCRAM needs metadataStoreUrl (role tokens are signed with the
    # cluster's keys, so one is good at every proxy and broker); a client's stream is ended
    # when its credentials expire (the broker checks the proxy's own credentials, so the proxy
    # checks the client's); the TLS files are the proxy's own certificate toward clients.

    # --- toward the brokers (Pulsar proxy.conf's names) ---
    # TLS to the brokers (their grpc+ssl addresses), trusting brokerClientTrustCertsFilePath.
    tlsEnabledWithBroker: bool = False
    brokerClientTrustCertsFilePath: str | None = None
    # The proxy's own credentials at the brokers: a role in their proxyRoles (token, basic or
    # tls, as a client's authPlugin and authParams).
    brokerClientAuthenticationPlugin: str | None = None
    brokerClientAuthenticationParameters: str = ""


_SHARED = tuple(
    f.name
    for f in dataclasses.fields(ProxyConfiguration)
    if f.name in {g.name for g in dataclasses.fields(ServiceConfiguration)}
)


def broker_view(config: ProxyConfiguration) -> ServiceConfiguration:
    """The proxy's settings that share the broker's names, as the broker's settings type: what
    the authentication providers, token keys, TLS files and broker-client code read."""
    return ServiceConfiguration(**{name: getattr(config, name) for name in _SHARED})


# --- validation ----------------------------------------------------------------------------


def _check_brokers(config: ProxyConfiguration) -> Iterator[tuple[str, str]]:
    try:
        store = parse_metadata_store_url(config.metadataStoreUrl)
    except ValueError as e:
        yield "metadataStoreUrl", f"{config.metadataStoreUrl!r} {e}"
        return
    for name, want_tls in (("brokerServiceURL", False), ("brokerServiceURLTLS", True)):
        url = getattr(config, name)
        if url is None:
            continue
        try:
            _, tls = parse_service_url(url)
        except ValueError as e:
            yield name, str(e)
            continue
        if tls is not want_tls:
            scheme = "grpc+ssl" if want_tls else "grpc"
            yield name, f"{url!r}: expected a {scheme}:// URL"
    if store.kind is StoreKind.EMBEDDED:
        if config.metadataStoreUrl.strip():
            yield "metadataStoreUrl", "the proxy reads a cluster's store: zk:host:port[/chroot]"
        elif not config.brokerServiceURL and not config.brokerServiceURLTLS:
            yield (
                "metadataStoreUrl",
                "required (zk:host:port[/chroot]) unless brokerServiceURL or brokerServiceURLTLS "
                "names the brokers",
            )
    if config.tlsEnabledWithBroker and store.kind is StoreKind.EMBEDDED:
        if not config.brokerServiceURLTLS:
            yield "brokerServiceURLTLS", "required when tlsEnabledWithBroker=true"


def _check_ports(config: ProxyConfiguration) -> Iterator[tuple[str, str]]:
    ports = ("grpcServicePort", "grpcServicePortTls", "webServicePort")
    seen: dict[int, str] = {}
    for name in ports:
        port = getattr(config, name)
        if port is None:
            continue
        if not 0 <= port <= 65535:
            yield name, f"{port} is not a port number (0..65535)"
        elif port:
            if port in seen:
                yield name, f"{port} is already used by {seen[port]}"
            seen.setdefault(port, name)
    if config.grpcServicePort is None and config.grpcServicePortTls is None:
        yield "grpcServicePort", "None with no grpcServicePortTls: the proxy would serve nothing"


def _check_tls(config: ProxyConfiguration) -> Iterator[tuple[str, str]]:
    if config.grpcServicePortTls is not None:
        for name in ("tlsCertificateFilePath", "tlsKeyFilePath"):
            if not getattr(config, name):
                yield name, "required when grpcServicePortTls is set"
    if config.tlsRequireTrustedClientCertOnConnect and not config.tlsTrustCertsFilePath:
        yield "tlsTrustCertsFilePath", "required when tlsRequireTrustedClientCertOnConnect=true"


def _check_minimums(config: ProxyConfiguration) -> Iterator[tuple[str, str]]:
    for name in (
        "connectionsPerBroker",
        "maxConcurrentLookupRequests",
        "keepAliveIntervalSeconds",
        "maxMessageSize",
        "grpcMaxPendingCalls",
        "metadataStoreSessionTimeoutMillis",
        "authenticationRefreshCheckSeconds",
    ):
        if getattr(config, name) < 1:
            yield name, f"{getattr(config, name)} is less than the minimum 1"
    if config.maxLookupRedirects < 0:
        yield "maxLookupRedirects", f"{config.maxLookupRedirects} is less than the minimum 0"


def _check_security(config: ProxyConfiguration) -> Iterator[tuple[str, str]]:
    """The broker's own checks of the same properties, and what the proxy cannot do: SCRAM
    without the cluster's metadata store (its role tokens are signed with the keys kept there).
    The broker's checks refuse SCRAM and OAuth2 as the proxy's own credentials, as the
    broker's (broker/web/broker_client.py)."""
    try:
        clustered = parse_metadata_store_url(config.metadataStoreUrl).kind is not StoreKind.EMBEDDED
    except ValueError:
        clustered = False  # _check_brokers names the bad URL
    if "scram" in config.authenticationProviders and not clustered:
        yield (
            "authenticationProviders",
            "scram at the proxy needs metadataStoreUrl (its role tokens are signed with the "
            "cluster's keys, kept in the metadata store)",
        )
    view = broker_view(config)
    yield from token_config_problems(view)
    yield from broker_client_problems(view)


RULES: list[SettingsRule[ProxyConfiguration]] = [
    _check_brokers,
    _check_ports,
    _check_tls,
    _check_minimums,
    _check_security,
]


def load_proxy_config(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, str]
) -> ProxyConfiguration:
    """Defaults, then ``path`` (a proxy.conf), then ``PULSAR_PREFIX_*`` in ``env``, then
    ``overrides``; :class:`ConfigError` lists every problem."""
    return load_settings(ProxyConfiguration, RULES, path, env, overrides)
