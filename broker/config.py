"""Typed broker settings whose names are Pulsar's broker.conf property names.

Operators coming from Pulsar can reuse their ``broker.conf`` lines and the docker image's
``PULSAR_PREFIX_<property>`` environment variables, so the field names are Pulsar's (camelCase on
purpose). A property of Pulsar's standalone.conf or broker.conf that this broker has no use for
(BookKeeper, transactions, WebSocket, the binary protocol's ports, ...) is ignored, and named
once in a warning, so Pulsar's own file loads; any other unknown property is an error with a
"did you mean" hint: a silently ignored typo is worse than a refused start.

Sources, later ones winning: defaults, the file, ``PULSAR_PREFIX_*`` variables, ``--set`` flags.
Every problem found is reported at once, each naming the property, the value and its source.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pulsar_grpc.broker.cluster import is_cluster_store
from pulsar_grpc.broker.ledger.storage_url import parse_ledger_storage_url
from pulsar_grpc.broker.listeners import GRPC_SCHEMES, LISTENER_RULES, extra_bind_addresses
from pulsar_grpc.broker.metadata.factory import parse_metadata_store_url
from pulsar_grpc.broker.partition_limits import PARTITIONS_CEILING, max_partitions
from pulsar_grpc.broker.pulsar_properties import PULSAR_PROPERTIES
from pulsar_grpc.broker.security.tokens import config_problems as token_config_problems

# Re-exported: the settings are read, checked and named from here.
from pulsar_grpc.broker.service_configuration import ServiceConfiguration as ServiceConfiguration
from pulsar_grpc.broker.web.broker_client import config_problems as broker_client_problems

ENV_PREFIX = "PULSAR_PREFIX_"

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """Every problem found in one load, one line each, so an operator fixes them in one go."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = errors


PROPERTY_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ServiceConfiguration))
_INT = re.compile(r"[+-]?[0-9]+")
# Settings classes loaded here: the broker's, and others in its style (the proxy's).
S = TypeVar("S")


def _types(settings: type) -> dict[str, Any]:
    """The property types of a settings dataclass, by property name."""
    return get_type_hints(settings)


# --- parsing -------------------------------------------------------------------------------


class _BadValue(Exception):
    """A value that does not parse as its property's type; the text completes ``'<v>' ...``."""


def _optional_inner(tp: Any) -> Any | None:
    """``X`` for ``X | None``, else None."""
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(get_args(tp)) == 2:
            return args[0]
    return None


def _parse_scalar(tp: Any, raw: str) -> Any:
    if tp is str:
        return raw
    if tp is bool:
        if raw.lower() not in ("true", "false"):
            raise _BadValue("is not a boolean (true or false)")
        return raw.lower() == "true"
    if tp is int:
        if not _INT.fullmatch(raw):
            raise _BadValue("is not an integer")
        return int(raw)
    if tp is float:
        try:
            value = float(raw)
        except ValueError:
            raise _BadValue("is not a number") from None
        if not math.isfinite(value):
            raise _BadValue("is not a finite number")
        return value
    if get_origin(tp) is Literal:
        allowed = get_args(tp)
        if raw not in allowed:
            raise _BadValue(f"is not one of {', '.join(allowed)}")
        return raw
    if get_origin(tp) is list:
        (item_type,) = get_args(tp)
        return [_parse_scalar(item_type, item.strip()) for item in raw.split(",") if item.strip()]
    raise TypeError(f"unsupported property type {tp!r}")


def parse_value(name: str, raw: str, settings: type = ServiceConfiguration) -> Any:
    """The typed value of property ``name`` from its text, as broker.conf would give it.

    Empty text means None for optional properties (that is how ``grpcServicePort=`` turns a
    listener off, as in Pulsar) and the default for the others.
    """
    tp = _types(settings)[name]
    raw = raw.strip()
    inner = _optional_inner(tp)
    if raw == "":
        return None if inner is not None else getattr(settings(), name)
    return _parse_scalar(inner if inner is not None else tp, raw)


# Pulsar's properties this broker has no use for: accepted, and named in one warning.
IGNORED_PULSAR_PROPERTIES: frozenset[str] = PULSAR_PROPERTIES - set(PROPERTY_NAMES)


def _suggest(name: str, names: Iterable[str], ignorable: frozenset[str] = frozenset()) -> str:
    """A did-you-mean for an unknown name: the closest of ``names`` and the Pulsar properties
    these settings ignore (said so, lest the fix look like it would take effect)."""
    known = set(names)
    by_lower = {p.lower(): p for p in (*ignorable, *known)}
    close = [name.lower()] if name.lower() in by_lower else []
    close = close or difflib.get_close_matches(name.lower(), by_lower, n=1, cutoff=0.6)
    if not close:
        return ""
    match = by_lower[close[0]]
    return f" (did you mean {match}{', which is ignored' if match not in known else ''}?)"


# --- sources -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setting:
    name: str
    raw: str
    source: str  # "broker.conf:12", "env PULSAR_PREFIX_x", "--set x"


def _file_settings(path: Path) -> tuple[list[_Setting], list[str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [], [f"{path}: cannot read the configuration file: {e}"]
    settings: list[_Setting] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            errors.append(f"{path}:{number}: expected <property>=<value>, got {line!r}")
            continue
        settings.append(_Setting(key.strip(), value, f"{path}:{number}"))
    return settings, errors


def _env_settings(env: Mapping[str, str]) -> list[_Setting]:
    return [
        _Setting(key.removeprefix(ENV_PREFIX), value, f"env {key}")
        for key, value in sorted(env.items())
        if key.startswith(ENV_PREFIX)
    ]


def _override_settings(overrides: Mapping[str, str]) -> list[_Setting]:
    return [_Setting(name, value, f"--set {name}") for name, value in overrides.items()]


def parse_set_flags(flags: Iterable[str]) -> dict[str, str]:
    """``--set name=value`` flags to the ``overrides`` mapping :func:`load_config` takes."""
    overrides: dict[str, str] = {}
    errors: list[str] = []
    for flag in flags:
        name, sep, value = flag.partition("=")
        if not sep or not name.strip():
            errors.append(f"--set {flag!r}: expected <property>=<value>")
        else:
            overrides[name.strip()] = value
    if errors:
        raise ConfigError(errors)
    return overrides


# --- validation ----------------------------------------------------------------------------

# A rule yields (property, problem) pairs; the problem text follows "<property>: ".
Rule = Callable[[ServiceConfiguration], Iterator[tuple[str, str]]]
# The same for any settings class (the proxy's rules take its configuration).
SettingsRule = Callable[[S], Iterator[tuple[str, str]]]

_PORTS = ("grpcServicePort", "grpcServicePortTls", "webServicePort", "webServicePortTls")


def _check_ports_in_range(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    for name in _PORTS:
        port = getattr(config, name)
        if port is not None and not 0 <= port <= 65535:
            yield name, f"{port} is not a port number (0..65535)"


def _check_ports_distinct(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """Two listeners on one fixed port fail at bind time with a less helpful message."""
    seen: dict[int, str] = {}
    for name in _PORTS:
        port = getattr(config, name)
        if port:  # 0 asks for an ephemeral port: never a clash
            if port in seen:
                yield name, f"{port} is already used by {seen[port]}"
            seen.setdefault(port, name)


def _check_grpc_listener(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """PIP-95: unsetting the primary ports is fine when bindAddresses opens gRPC sockets."""
    if "grpc" in config.messagingProtocols and (
        config.grpcServicePort is None
        and config.grpcServicePortTls is None
        and not any(bind.scheme in GRPC_SCHEMES for bind in extra_bind_addresses(config))
    ):
        yield (
            "grpcServicePort",
            "None disables gRPC, but messagingProtocols includes grpc "
            "(and bindAddresses has no grpc or grpc+ssl entry)",
        )


_AT_LEAST: dict[str, float] = {
    "maxMessageSize": 1,
    "maxMessagesPerBatch": 1,
    "keepAliveIntervalSeconds": 1,
    "grpcMaxPendingCalls": 1,
    "grpcTlsFrontMaxConnections": 1,
    "statsUpdateFrequencyInSecs": 1,
    "backlogQuotaCheckIntervalInSeconds": 1,
    "authenticationRefreshCheckSeconds": 1,
    "defaultNumPartitions": 1,
    "maxNumPartitionsPerPartitionedTopic": 0,
    "defaultNumberOfNamespaceBundles": 1,
    "managedLedgerMaxEntriesPerLedger": 1,
    "managedLedgerMaxSizePerLedgerMbytes": 1,
    "managedLedgerCacheSizeMB": 0,
    "dispatcherMaxReadBatchSize": 1,
    "maxUnackedMessagesPerConsumer": 0,
    "activeConsumerFailoverDelayTimeMillis": 0,
    "maxPublishRatePerTopicInMessages": 0,
    "maxPublishRatePerTopicInBytes": 0,
    "brokerPublisherThrottlingMaxMessageRate": 0,
    "brokerPublisherThrottlingMaxByteRate": 0,
    "dispatchThrottlingRatePerTopicInMsg": 0,
    "dispatchThrottlingRatePerTopicInByte": 0,
    "dispatchThrottlingRatePerSubscriptionInMsg": 0,
    "dispatchThrottlingRatePerSubscriptionInByte": 0,
    "dispatchThrottlingRateInMsg": 0,
    "dispatchThrottlingRateInByte": 0,
    "inflightSaslContextExpiryMs": 1,
    "maxInflightSaslContext": 1,
    "scramRoleTokenExpirySeconds": 1,
    "brokerDeduplicationEntriesInterval": 1,
    "brokerDeduplicationSnapshotFrequencyInSeconds": 0,
    "defaultRetentionTimeInMinutes": -1,
    "defaultRetentionSizeInMB": -1,
    "loadBalancerReportUpdateThresholdPercentage": 0,
    "loadBalancerReportUpdateMinIntervalMillis": 1,
    "loadBalancerReportUpdateMaxIntervalMinutes": 1,
    "metadataStoreSessionTimeoutMillis": 1,
    "brokerShutdownTimeoutMs": 1,
    "loadBalancerBrokerOverloadedThresholdPercentage": 0,
    "loadBalancerNamespaceMaximumBundles": 1,
    "loadBalancerSheddingIntervalMinutes": 0.001,
    "loadBalancerSheddingGracePeriodMinutes": 0,
    "loadBalancerBrokerThresholdShedderPercentage": 0,
    "loadBalancerHistoryResourcePercentage": 0,
    "loadBalancerBundleUnloadMinThroughputThreshold": 0,
    "loadBalancerCPUResourceWeight": 0,
    "loadBalancerMemoryResourceWeight": 0,
    "loadBalancerDirectMemoryResourceWeight": 0,
    "loadBalancerBandwithInResourceWeight": 0,
    "loadBalancerBandwithOutResourceWeight": 0,
    "loadBalancerNamespaceBundleMaxTopics": 0,
    "loadBalancerNamespaceBundleMaxSessions": 0,
    "loadBalancerNamespaceBundleMaxMsgRate": 0,
    "loadBalancerNamespaceBundleMaxBandwidthMbytes": 0,
}


# Properties that have a maximum too: this broker's safety ceilings.
_AT_MOST: dict[str, float] = {
    "maxNumPartitionsPerPartitionedTopic": PARTITIONS_CEILING,
}


def parse_checked(name: str, raw: str) -> Any:
    """The typed value of property ``name`` from ``raw`` with the checks one value gets at load
    (its type, its minimum and maximum): a value changed at run time (broker/dynamic_config.py)
    is held to the same rules. ValueError says what is wrong."""
    try:
        value = parse_value(name, raw)
    except _BadValue as exc:
        raise ValueError(f"{name}: {raw.strip()[:40]!r} {exc}") from None
    problem = _out_of_bounds(name, value)
    if problem:
        raise ValueError(f"{name}: {problem}")
    return value


def _out_of_bounds(name: str, value: Any) -> str | None:
    minimum, maximum = _AT_LEAST.get(name), _AT_MOST.get(name)
    if minimum is not None and value < minimum:
        return f"{value} is less than the minimum {minimum}"
    if maximum is not None and value > maximum:
        return f"{value} is over the maximum {maximum}"
    return None


def _check_bounds(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    for name in {**_AT_LEAST, **_AT_MOST}:
        problem = _out_of_bounds(name, getattr(config, name))
        if problem:
            yield name, problem


def _check_partition_limits(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """Auto-creation (defaultNumPartitions) held to the limit a request is held to (its reason
    is in broker/partition_limits.py)."""
    limit = max_partitions(config)
    if config.defaultNumPartitions > limit:
        yield (
            "defaultNumPartitions",
            f"{config.defaultNumPartitions} is over the {limit} partitions a topic may have "
            "(maxNumPartitionsPerPartitionedTopic, or this broker's safety ceiling)",
        )


def _check_not_empty(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    for name in ("clusterName", "bindAddress", "dataDirectory", "messagingProtocols"):
        if not getattr(config, name):
            yield name, "must not be empty"


def _check_metadata_store_url(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    try:
        parse_metadata_store_url(config.metadataStoreUrl)
    except ValueError as e:
        yield "metadataStoreUrl", f"{config.metadataStoreUrl!r} {e}"


def _check_cluster_member(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """A cluster member is named by its web address (/loadbalance/brokers/<host>:<port>)."""
    try:
        shared = is_cluster_store(config.metadataStoreUrl)
    except ValueError:
        return  # _check_metadata_store_url reports it
    if shared and config.webServicePort is None and config.webServicePortTls is None:
        yield (
            "webServicePort",
            "a cluster member (metadataStoreUrl is a shared store) needs webServicePort or "
            "webServicePortTls: the broker's name in the cluster is <advertisedAddress>:<port>",
        )


def _check_tls_files(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """Every socket that terminates TLS needs the broker's certificate and key.

    Only sockets count: an advertised grpc+ssl or https URL may be terminated by a gateway in
    front of a plaintext socket (PIP-95 relaxed Pulsar's rule for exactly this).
    """
    tls_sockets = [
        p for p in ("grpcServicePortTls", "webServicePortTls") if getattr(config, p) is not None
    ] + [f"bindAddresses entry {str(bind)!r}" for bind in extra_bind_addresses(config) if bind.tls]
    if tls_sockets:
        for name in ("tlsCertificateFilePath", "tlsKeyFilePath"):
            if not getattr(config, name):
                yield name, f"required when {' and '.join(tls_sockets)} is set"
    if config.tlsRequireTrustedClientCertOnConnect and not config.tlsTrustCertsFilePath:
        yield "tlsTrustCertsFilePath", "required when tlsRequireTrustedClientCertOnConnect=true"


def _check_authorization(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    """Pulsar refuses to start in this case too: without authentication every caller is
    anonymous, so no permission could ever be checked."""
    if config.authorizationEnabled and not config.authenticationEnabled:
        yield (
            "authorizationEnabled",
            "requires authenticationEnabled=true (permissions are granted to authenticated roles)",
        )


def _check_ledger_storage_url(config: ServiceConfiguration) -> Iterator[tuple[str, str]]:
    try:
        parse_ledger_storage_url(config.ledgerStorageUrl)
    except ValueError as e:
        yield "ledgerStorageUrl", str(e)


# Small rules, one concern each; a new one is appended here.
RULES: list[Rule] = [
    _check_ports_in_range,
    _check_ports_distinct,
    _check_grpc_listener,
    _check_bounds,
    _check_partition_limits,
    _check_not_empty,
    _check_tls_files,
    _check_metadata_store_url,
    _check_cluster_member,
    _check_ledger_storage_url,
    _check_authorization,
    token_config_problems,
    broker_client_problems,
    *LISTENER_RULES,
]


def validate(
    config: S,
    sources: Mapping[str, str] | None = None,
    skip: Iterable[str] = (),
    rules: Sequence[SettingsRule[S]] | None = None,
) -> list[str]:
    """All problems of ``config``; each line names where the property was set, if known.

    ``skip`` names properties already reported as unparsable, whose default stands in for the
    value and would only yield confusing follow-up problems. ``rules``: the broker's RULES
    unless given.
    """
    sources = sources or {}
    skipped = set(skip)
    problems = []
    checks: Sequence[SettingsRule[Any]] = rules if rules is not None else RULES
    for rule in checks:
        for name, problem in rule(config):
            if name in skipped:
                continue
            where = sources.get(name)
            problems.append(f"{where}: {name}: {problem}" if where else f"{name}: {problem}")
    return problems


# --- loading -------------------------------------------------------------------------------


@dataclass(frozen=True)
class LoadedConfig:
    """A configuration and the Pulsar properties its sources set that it ignores."""

    config: ServiceConfiguration
    ignored: tuple[str, ...] = ()

    def ignored_warning(self) -> str:
        """One line naming every ignored property ('' when none was)."""
        if not self.ignored:
            return ""
        return (
            f"ignoring {len(self.ignored)} Pulsar properties of features this broker does not "
            f"have: {', '.join(self.ignored)}"
        )


def load_config(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, str]
) -> ServiceConfiguration:
    """:func:`read_config`'s configuration; the ignored Pulsar properties, if any, are logged
    as one warning."""
    loaded = read_config(path, env, overrides)
    if loaded.ignored:
        log.warning("%s", loaded.ignored_warning())
    return loaded.config


def read_config(
    path: Path | None, env: Mapping[str, str], overrides: Mapping[str, str]
) -> LoadedConfig:
    """Defaults, then ``path``, then ``PULSAR_PREFIX_*`` in ``env``, then ``overrides``.

    Raises :class:`ConfigError` listing every problem: unreadable or malformed lines, unknown
    properties, values of the wrong type, and failed validation rules. Properties of Pulsar's
    standalone.conf and broker.conf that this broker does not have are no problem: the result
    names them.
    """
    config, ignored = _read_settings(
        ServiceConfiguration,
        RULES,  # type: ignore[arg-type]
        path,
        env,
        overrides,
        IGNORED_PULSAR_PROPERTIES,
    )
    return LoadedConfig(config, ignored)


def load_settings(
    settings_type: type[S],
    rules: Sequence[SettingsRule[S]],
    path: Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, str],
) -> S:
    """:func:`load_config` for any settings dataclass in the broker's style (Pulsar property
    names, the same sources in the same order, every problem reported at once)."""
    return _read_settings(settings_type, rules, path, env, overrides, frozenset())[0]


def _read_settings(
    settings_type: type[S],
    rules: Sequence[SettingsRule[S]],
    path: Path | None,
    env: Mapping[str, str],
    overrides: Mapping[str, str],
    ignorable: frozenset[str],
) -> tuple[S, tuple[str, ...]]:
    """The settings, and the ``ignorable`` properties the sources set (ignored)."""
    types_ = _types(settings_type)
    settings: list[_Setting] = []
    errors: list[str] = []
    if path is not None:
        settings, errors = _file_settings(path)
    settings += _env_settings(env) + _override_settings(overrides)

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    unparsable: set[str] = set()
    ignored: dict[str, None] = {}  # in the order first set
    for setting in settings:
        if setting.name in ignorable:
            if setting.raw.strip():  # empty is unset, in Pulsar too: nothing to warn of
                ignored[setting.name] = None
            continue
        if setting.name not in types_:
            errors.append(
                f"{setting.source}: unknown property {setting.name!r}"
                f"{_suggest(setting.name, types_, ignorable)}"
            )
            continue
        try:
            values[setting.name] = parse_value(setting.name, setting.raw, settings_type)
        except _BadValue as e:
            errors.append(f"{setting.source}: {setting.name}: {setting.raw.strip()!r} {e}")
            unparsable.add(setting.name)
            values.pop(setting.name, None)
            continue
        unparsable.discard(setting.name)
        sources[setting.name] = setting.source

    config = settings_type(**values)
    errors += validate(config, sources, skip=unparsable, rules=rules)
    if errors:
        raise ConfigError(errors)
    return config, tuple(ignored)
