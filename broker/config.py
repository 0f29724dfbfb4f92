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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from pulsar_grpc.broker.cluster import is_cluster_store
from pulsar_grpc.broker.ledger.storage_url import parse_ledger_storage_url
from pulsar_grpc.broker.listeners import GRPC_SCHEMES, LISTENER_RULES, extra_bind_addresses
from pulsar_grpc.broker.metadata.factory import parse_metadata_store_url
from pulsar_grpc.broker.partition_limits import PARTITIONS_CEILING, max_partitions
from pulsar_grpc.broker.pulsar_properties import PULSAR_PROPERTIES
from pulsar_grpc.broker.security.settings import ClientAuthenticationSettings
from pulsar_grpc.broker.security.tokens import config_problems as token_config_problems
from pulsar_grpc.broker.web.broker_client import config_problems as broker_client_problems

ENV_PREFIX = "PULSAR_PREFIX_"

log = logging.getLogger(__name__)


@dataclass
class ServiceConfiguration(ClientAuthenticationSettings):
    """Broker settings; defaults suit ``standalone`` on one machine."""

    # --- identity and network ---
    clusterName: str = "standalone"
    # Pulsar binds 0.0.0.0; standalone here stays on loopback unless told otherwise.
    bindAddress: str = "127.0.0.1"
    # Host name advertised to clients; None means the machine's host name.
    advertisedAddress: str | None = None
    # None disables the plain-text gRPC listener (PIP-59 handler port).
    grpcServicePort: int | None = 50051
    grpcServicePortTls: int | None = None
    # Ours: new gRPC calls that may wait for the broker to take them (a burst of streams
    # opened at once); past it gRPC core refuses them as CANCELLED (docs/protocol.md).
    grpcMaxPendingCalls: int = 100_000
    # Ours: connections a TLS front (broker/tls_front.py: a TLS listener with the TLS
    # provider and tlsRequireTrustedClientCertOnConnect=false) holds at once; a further one is
    # closed once its handshake is done (docs/protocol.md).
    grpcTlsFrontMaxConnections: int = 10_000
    webServicePort: int | None = 8080
    webServicePortTls: int | None = None
    messagingProtocols: list[str] = field(default_factory=lambda: ["grpc"])
    # PIP-95 listeners: "<name>:<scheme>://<host>:<port>,..." with schemes grpc, grpc+ssl,
    # http, https; empty means one listener from advertisedAddress and the ports above.
    # Parsed, validated and resolved by broker.listeners.
    advertisedListeners: str = ""
    # Defaults to the first listener.
    internalListenerName: str | None = None
    # "<listener>:<scheme>://<host>:<port>,...": extra bind addresses, each tied to a listener.
    bindAddresses: str = ""
    # PIP-338: the listener answering lookups that name none and came through a primary address.
    lookupListenerName: str | None = None
    # Pulsar's name: the broker pings each client connection this often and drops one that
    # does not answer within as long again, so a vanished client's consumers are removed and
    # their unacked messages go to the others.
    keepAliveIntervalSeconds: int = 30
    # Pulsar's name and default: the stats' rates (msgRateIn, msgThroughputOut...), the write
    # latency and entry size buckets and the pulsar_ml_* figures are those of the last interval
    # this long, computed once per interval for every topic (TopicStats and /metrics read them).
    statsUpdateFrequencyInSecs: int = 60

    # --- storage ---
    # Embedded metadata and ledger data for standalone (Pulsar standalone uses data/).
    dataDirectory: str = "./data"
    # Pulsar's name: where the metadata lives. Empty: the embedded store in dataDirectory;
    # zk:host:port[,host:port...][/chroot] for a cluster; memory:<name> (tests).
    metadataStoreUrl: str = ""
    # Pulsar's name and default: how long ZooKeeper keeps this broker's session (its
    # ephemeral ownership and load-report nodes) after it stops answering. A killed broker's
    # bundles go to the others only once it has passed; the server bounds it (2 to 20 ticks
    # unless configured otherwise).
    metadataStoreSessionTimeoutMillis: int = 30000
    # Pulsar's name and default: the longest a stop (SIGTERM) takes. Past it, what is not
    # closed yet is left (a store that does not answer: its nodes go with the session, its
    # unwritten entries had no receipt) and the broker exits all the same.
    brokerShutdownTimeoutMs: int = 60000
    # Where the entries live: empty is the embedded store in dataDirectory; a cluster's brokers
    # share a PostgreSQL database, postgresql://user[:password]@host[:port]/database.
    ledgerStorageUrl: str = ""
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerCacheSizeMB: int = 64
    # BookKeeper's name: True fsyncs an entry before the produce is acknowledged.
    journalSyncData: bool = False
    # Pulsar's convention: 0 keeps nothing once acknowledged, -1 keeps forever.
    defaultRetentionTimeInMinutes: int = 0
    defaultRetentionSizeInMB: int = 0

    # --- topics and namespaces ---
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: Literal["non-partitioned", "partitioned"] = "non-partitioned"
    defaultNumPartitions: int = 1
    # Pulsar's name and default (0: no limit of the operator's); never above this broker's
    # safety ceiling, broker/partition_limits.py's PARTITIONS_CEILING.
    maxNumPartitionsPerPartitionedTopic: int = 0
    # Pulsar's names and defaults: whether an admin's forced delete of a namespace (its topics
    # with it) or of a tenant (its namespaces with it) is allowed; refused 405 otherwise.
    forceDeleteNamespaceAllowed: bool = False
    forceDeleteTenantAllowed: bool = False
    defaultNumberOfNamespaceBundles: int = 4
    maxMessageSize: int = 5 * 1024 * 1024
    # Ours (Pulsar has no broker limit on messages per batch): a produced batch may hold at
    # most this many messages, well above Pulsar clients' batchingMaxMessages (1,000). Each
    # message costs the broker per-message work on delivery and acks; the bytes alone bound a
    # count too (each message takes at least 2 bytes), this bounds it by a number operators can
    # read. A batch over it is refused with INVALID_ARGUMENT (docs/protocol.md).
    maxMessagesPerBatch: int = 100_000
    brokerDeduplicationEnabled: bool = False
    # Pulsar's names and defaults: the deduplication state is snapshotted (and the ledgers
    # before it freed) every this many entries, every this many seconds (0: no timer) and at
    # topic close, each time only if an entry was stored since the last snapshot. (Pulsar's
    # timer also waits for brokerDeduplicationSnapshotIntervalSeconds since the last snapshot;
    # here each tick of the timer is that interval.)
    brokerDeduplicationEntriesInterval: int = 1000
    brokerDeduplicationSnapshotFrequencyInSeconds: int = 120

    # --- schemas (Pulsar's names and defaults) ---
    # The compatibility strategy of namespaces whose schema_compatibility_strategy is
    # UNDEFINED: what a topic's new schema must be compatible with (broker/schema/).
    schemaCompatibilityStrategy: Literal[
        "ALWAYS_INCOMPATIBLE",
        "ALWAYS_COMPATIBLE",
        "BACKWARD",
        "FORWARD",
        "FULL",
        "BACKWARD_TRANSITIVE",
        "FORWARD_TRANSITIVE",
        "FULL_TRANSITIVE",
    ] = "FULL"
    # A producer's new schema is registered (if compatible) unless a namespace says otherwise.
    isAllowAutoUpdateSchemaEnabled: bool = True
    # A producer without a schema is refused on a topic with one, in every namespace.
    isSchemaValidationEnforced: bool = False

    # --- load balancing (Pulsar's names and defaults) ---
    # A cluster member's load report (/loadbalance/brokers/<advertisedAddress>:<webServicePort>)
    # is checked every loadBalancerReportUpdateMinIntervalMillis and rewritten when its load
    # moved by more than loadBalancerReportUpdateThresholdPercentage percent since the last
    # write, or when loadBalancerReportUpdateMaxIntervalMinutes have passed since then.
    loadBalancerReportUpdateThresholdPercentage: int = 10
    loadBalancerReportUpdateMinIntervalMillis: int = 5000
    loadBalancerReportUpdateMaxIntervalMinutes: int = 15
    # The leader places an unowned bundle on the broker with the least message rate among
    # those whose largest resource usage (cpu, memory, bandwidth) is not over this percentage
    # (Pulsar's LeastLongTermMessageRate; all of them when every broker is over it).
    loadBalancerBrokerOverloadedThresholdPercentage: int = 85
    # A namespace is split into at most this many bundles (an admin split beyond it is refused).
    loadBalancerNamespaceMaximumBundles: int = 128
    # The leader's load shedding (Pulsar's ThresholdShedder), every
    # loadBalancerSheddingIntervalMinutes: a broker whose usage (the largest of its resources'
    # usage times the resource's weight, smoothed with loadBalancerHistoryResourcePercentage of
    # the previous value) is above the brokers' average by more than
    # loadBalancerBrokerThresholdShedderPercentage unloads its busiest bundles, worth the excess
    # plus 5% of its throughput, when that is at least
    # loadBalancerBundleUnloadMinThroughputThreshold MB/s; never its last bundle, nor a bundle
    # unloaded within loadBalancerSheddingGracePeriodMinutes. The interval and the grace period
    # take fractions of a minute here (Pulsar's are whole minutes).
    loadBalancerSheddingEnabled: bool = True
    loadBalancerSheddingIntervalMinutes: float = 1
    loadBalancerSheddingGracePeriodMinutes: float = 30
    loadBalancerBrokerThresholdShedderPercentage: int = 10
    loadBalancerHistoryResourcePercentage: float = 0.9
    loadBalancerBundleUnloadMinThroughputThreshold: float = 10
    loadBalancerCPUResourceWeight: float = 1.0
    loadBalancerMemoryResourceWeight: float = 1.0
    loadBalancerDirectMemoryResourceWeight: float = 1.0
    loadBalancerBandwithInResourceWeight: float = 1.0
    loadBalancerBandwithOutResourceWeight: float = 1.0
    # The leader's automatic bundle split (Pulsar's BundleSplitterTask), on the same interval:
    # a bundle with at least 2 topics and more than MaxTopics topics, MaxSessions producers and
    # consumers (0: no limit), MaxMsgRate messages/s in and out or MaxBandwidthMbytes MB/s in
    # and out is split with defaultNamespaceBundleSplitAlgorithm, while its namespace has
    # fewer than loadBalancerNamespaceMaximumBundles bundles; the halves are unloaded (placed
    # again) when loadBalancerAutoUnloadSplitBundlesEnabled.
    loadBalancerAutoBundleSplitEnabled: bool = True
    loadBalancerAutoUnloadSplitBundlesEnabled: bool = True
    loadBalancerNamespaceBundleMaxTopics: int = 1000
    loadBalancerNamespaceBundleMaxSessions: int = 1000
    loadBalancerNamespaceBundleMaxMsgRate: int = 30000
    loadBalancerNamespaceBundleMaxBandwidthMbytes: int = 100
    # How a bundle is split when the request names no algorithm: range_equally_divide (the
    # middle of its hash range), topic_count_equally_divide (half of its topics each side) or
    # specified_positions_divide (at the positions the request gives).
    defaultNamespaceBundleSplitAlgorithm: Literal[
        "range_equally_divide", "topic_count_equally_divide", "specified_positions_divide"
    ] = "range_equally_divide"

    # --- dispatch ---
    dispatcherMaxReadBatchSize: int = 100
    # Shared and Key_Shared only; 0 means no limit, as in Pulsar.
    maxUnackedMessagesPerConsumer: int = 50000
    # Pulsar's name and default: when a Failover subscription's active consumer changes, the
    # new one is sent the unacked messages only after this many milliseconds, so that acks the
    # previous one still had in flight land first and are not delivered again (0: at once).
    activeConsumerFailoverDelayTimeMillis: int = 1000

    # --- rate limits (broker/topics/rate_limit.py) --- Pulsar's names; 0 = no limit. Per
    # topic and per subscription these are the defaults where neither the topic's nor the
    # namespace's policy sets a rate; the broker-wide ones hold for all topics together.
    maxPublishRatePerTopicInMessages: int = 0
    maxPublishRatePerTopicInBytes: int = 0
    brokerPublisherThrottlingMaxMessageRate: int = 0
    brokerPublisherThrottlingMaxByteRate: int = 0
    dispatchThrottlingRatePerTopicInMsg: int = 0
    dispatchThrottlingRatePerTopicInByte: int = 0
    dispatchThrottlingRatePerSubscriptionInMsg: int = 0
    dispatchThrottlingRatePerSubscriptionInByte: int = 0
    dispatchThrottlingRateInMsg: int = 0
    dispatchThrottlingRateInByte: int = 0

    # --- security --- authentication: the fields of ClientAuthenticationSettings
    # (broker/security/settings.py, shared with the proxy) and:
    # /metrics asks for credentials only when authenticateMetricsEndpoint is true.
    authenticateMetricsEndpoint: bool = False

    # Authorization (broker/security/authorization.py), Pulsar's properties: permissions are
    # checked only with authorizationEnabled (which needs authenticationEnabled, as in Pulsar);
    # superUserRoles may do everything; proxyRoles may name the client they act for (PIP-1,
    # header x-pulsar-original-principal); authorizationAllowWildcardsMatching lets a granted
    # role of the form "prefix*" or "*suffix" match roles.
    authorizationEnabled: bool = False
    superUserRoles: list[str] = field(default_factory=list)
    proxyRoles: list[str] = field(default_factory=list)
    authorizationAllowWildcardsMatching: bool = False

    # The broker's own client, for its calls to the cluster's brokers' admin API (the
    # leader's unload and split, a namespace unload's fan-out, partitioned stats): Pulsar's
    # names (broker/web/broker_client.py). With authentication on, the plugin and parameters
    # are a super-user's credentials, as a client's authPlugin and authParams.
    brokerClientAuthenticationPlugin: str | None = None
    brokerClientAuthenticationParameters: str = ""
    brokerClientTlsEnabled: bool = False
    brokerClientTrustCertsFilePath: str | None = None


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
