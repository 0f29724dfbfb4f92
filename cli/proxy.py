"""`pulsar-grpc proxy`: the PIP-1 proxy in front of a cluster's brokers, until SIGINT or SIGTERM.

    pulsar-grpc proxy --config proxy.conf [--set PROPERTY=VALUE ...]

proxy.conf uses Pulsar's property names (metadataStoreUrl or brokerServiceURL, grpcServicePort,
webServicePort, authenticationEnabled, tlsEnabledWithBroker, ...; proxy/config.py lists them);
``PULSAR_PREFIX_<property>`` variables and ``--set`` override the file. Exit codes: 2 invalid
configuration, 1 cannot start (a port taken, ZooKeeper unreachable).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from pulsar_grpc.broker.config import ConfigError, parse_set_flags
from pulsar_grpc.broker.errors import MetadataError
from pulsar_grpc.cli.serving import add_server_options, serve_until_signalled
from pulsar_grpc.cli.standalone import invalid_configuration


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "proxy",
        description="Run a proxy: clients connect only to it; it answers lookups with its own "
        "address and forwards each stream to the broker that owns the topic.",
    )
    add_server_options(p, "proxy.conf-style file (Pulsar names)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from pulsar_grpc.proxy import ProxyService, load_proxy_config

    try:
        if args.config is not None and not args.config.is_file():
            raise ConfigError([f"--config: {args.config}: no such file"])
        config = load_proxy_config(args.config, os.environ, parse_set_flags(args.overrides))
        proxy = ProxyService(config)
    except ConfigError as exc:
        print(invalid_configuration("proxy", exc), file=sys.stderr)
        return 2
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    def ready_line() -> str:
        own = proxy.own_address()
        return (
            f"pulsar-grpc proxy ready grpc={own.grpc_url or own.grpc_url_tls} "
            f"http={proxy.web_url or ''}"
        )

    try:
        serve_until_signalled(proxy, ready_line)
    except ConfigError as exc:
        print(invalid_configuration("proxy", exc), file=sys.stderr)
        return 2
    except (OSError, RuntimeError, MetadataError) as exc:
        print(f"pulsar-grpc proxy: cannot start: {exc}", file=sys.stderr)
        return 1
    return 0
