"""`pulsar-grpc broker`: one member of a cluster, until SIGINT or SIGTERM.

The options are `standalone`'s; the difference is that a cluster member must share its metadata
with the other brokers, so a metadataStoreUrl naming a cluster store (zk:..., or memory:... in
tests) is required rather than the embedded default: a broker that silently ran alone on its
own embedded store would split the cluster.
"""

from __future__ import annotations

import argparse

from pulsar_grpc.broker.cluster import is_cluster_store
from pulsar_grpc.broker.config import ConfigError, ServiceConfiguration
from pulsar_grpc.cli.standalone import add_broker_options, run_broker


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "broker",
        description="Run one cluster member: metadata in the ZooKeeper metadataStoreUrl names, "
        "entries where ledgerStorageUrl says; the same options as standalone.",
    )
    add_broker_options(p)
    p.set_defaults(run=run)


def require_cluster_store(config: ServiceConfiguration) -> None:
    if not is_cluster_store(config.metadataStoreUrl):
        raise ConfigError(
            [
                "metadataStoreUrl: a cluster member needs a shared metadata store, "
                "zk:host:port[,host:port...][/chroot] (use `standalone` for one broker)"
            ]
        )


def run(args: argparse.Namespace) -> int:
    return run_broker(args, "broker", require_cluster_store)
