"""The broker's settings as one typed dataclass, whose field names are Pulsar's broker.conf
property names (Pulsar's ServiceConfiguration).

It stands apart from broker/config.py, which reads and checks it, so the modules whose own
checks config.py runs (listeners, tokens, the broker client, the partition limits) can name the
type without importing what imports them: the fields at the bottom, the loading above them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pulsar_grpc.broker.security.settings import ClientAuthenticationSettings


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

    # --- backlog quotas (broker/topics/backlog_quota.py) --- Pulsar's names and defaults.
    # The check runs every backlogQuotaCheckIntervalInSeconds when backlogQuotaCheckEnabled;
    # the default quota (where neither the topic nor its namespace sets one): -1 = no limit;
    # backlogQuotaDefaultLimitGB, Pulsar's older property, wins when above 0.
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: int = 60
    backlogQuotaDefaultLimitBytes: int = -1
    backlogQuotaDefaultLimitGB: float = -1
    backlogQuotaDefaultLimitSecond: int = -1
    backlogQuotaDefaultRetentionPolicy: Literal[
        "producer_request_hold", "producer_exception", "consumer_backlog_eviction"
    ] = "producer_request_hold"
    # Accepted for Pulsar's configuration files: the age of the oldest backlog message is
    # always read from its entry here (one read per topic per check), which is Pulsar's
    # precise mode, so the time quota holds to the second either way.
    preciseTimeBasedBacklogQuotaCheck: bool = False

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
