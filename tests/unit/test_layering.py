"""The layering the architecture depends on (ARCHITECTURE.md): checked on every import line.

protos <- client <- (spark, proxy); protos <- handler -> broker <- interceptors; the proxy
also uses interceptors and the broker's security, metadata and cluster discovery. The broker core
must stay protocol-neutral (PIP-59) so another transport can be added as one more handler, and a
handler sees the broker only through broker.protocol's BrokerContext, never broker.service or
the parts it holds.

Modules are named inside the ``pulsar_grpc`` package (``broker.service``); a forbidden name also
forbids the modules under it, and ``grpc`` (a top-level library) is matched the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "broker": {
        "grpc",
        "grpc_health",
        "grpc_reflection",
        "handler",
        "interceptors",
        "client",
        "cli",
    },
    "client": {"broker", "handler", "interceptors", "cli"},
    # The SDK's schemas (pulsar_grpc.schema) stand on the protos alone: the client uses them.
    "schema": {"broker", "handler", "interceptors", "cli", "client"},
    "interceptors": {"handler", "client", "cli"},
    # A handler gets the broker as a BrokerContext (broker.protocol): never the service or
    # the parts behind it.
    "handler": {
        "client",
        "cli",
        "broker.service",
        "broker.resources",
        "broker.namespace_service",
        "broker.topics.registry",
        "broker.web",
    },
    # The proxy (PIP-1) stands on the client's pieces, the protos, the interceptors and the
    # broker's security, metadata and cluster discovery: never on what serves topics.
    "proxy": {
        "handler",
        "cli",
        "spark",
        "broker.service",
        "broker.resources",
        "broker.namespace_service",
        "broker.topics",
        "broker.ledger",
        "broker.schema",
        "broker.web",
    },
}
# Narrow exceptions to FORBIDDEN, each with its reason (a name here also allows what is under it).
ALLOWED = {
    # The broker's own client for other brokers (brokerClientAuthenticationPlugin/Parameters)
    # is made by the client's Authentication classes, as Pulsar's broker uses its client
    # library's AuthenticationFactory: one parser of plugin and params, not two.
    "broker": {"client._auth", "client._auth_params"},
    "proxy": {
        # A call the proxy refuses ends exactly as one a broker refused: one table from errors
        # to gRPC status and Pulsar code, not two.
        "handler.errors",
        # Clients meet the same message-size limit and keepalive at the proxy as at a broker.
        "handler.server_options",
        # The checks of the proxy's own broker credentials are the broker's, not a copy.
        "broker.web.broker_client",
    },
}
PACKAGE = "pulsar_grpc."


def imported_modules(source: str, package: tuple[str, ...]) -> set[str]:
    """Every module ``source`` (a module of ``package``, e.g. ("handler",)) imports, absolute,
    with the ``pulsar_grpc.`` prefix dropped. ``from X import y`` counts X and X.y, since y may
    be a submodule; relative imports are resolved against ``package``."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = [*package[: len(package) - node.level + 1]] if node.level else []
            module = ".".join([*parts, *([node.module] if node.module else [])])
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return {n.removeprefix(PACKAGE) for n in names}


def forbidden_in(
    modules: set[str], forbidden: Collection[str], allowed: Collection[str] = ()
) -> list[str]:
    def under(module: str, names: Collection[str]) -> bool:
        return any(module == n or module.startswith(n + ".") for n in names)

    return sorted(m for m in modules if under(m, forbidden) and not under(m, allowed))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_across_layers(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): forbidden_in(
            imported_modules(path.read_text(), path.relative_to(ROOT).parent.parts),
            FORBIDDEN[package],
            ALLOWED.get(package, ()),
        )
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize(
    "line",
    [
        "from pulsar_grpc.broker.service import BrokerService",
        "from pulsar_grpc.broker import service",
        "from ..broker import service",
        "from ..broker.service import BrokerService",
        "import pulsar_grpc.broker.service",
    ],
)
def test_a_handler_importing_the_broker_service_is_caught(line: str) -> None:
    """The check itself: however the import is spelled, it is found."""
    modules = imported_modules(line, ("handler",))
    assert "broker.service" in forbidden_in(modules, FORBIDDEN["handler"])


def test_the_narrow_interface_is_allowed() -> None:
    modules = imported_modules(
        "from pulsar_grpc.broker.protocol import BrokerContext", ("handler",)
    )
    assert forbidden_in(modules, FORBIDDEN["handler"]) == []


def test_the_broker_may_use_the_clients_authentication_and_nothing_else_of_it() -> None:
    allowed = imported_modules(
        "from pulsar_grpc.client._auth_params import authentication_from", ("broker", "web")
    )
    assert forbidden_in(allowed, FORBIDDEN["broker"], ALLOWED["broker"]) == []
    for line in ("from pulsar_grpc.client import Client", "from ...client import _client"):
        modules = imported_modules(line, ("broker", "web"))
        assert forbidden_in(modules, FORBIDDEN["broker"], ALLOWED["broker"]) != [], line


# The broker service is the composition root (issue 27): it builds the parts and hands each
# module the narrow port it needs (broker/service_parts.py), so nothing inside broker/ names it.
COMPOSITION_ROOT = ROOT / "broker" / "service.py"


def test_nothing_in_the_broker_imports_its_composition_root() -> None:
    offenders = {
        str(path.relative_to(ROOT)): forbidden_in(
            imported_modules(path.read_text(), path.relative_to(ROOT).parent.parts),
            {"broker.service"},
        )
        for path in (ROOT / "broker").rglob("*.py")
        if path != COMPOSITION_ROOT
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_a_port_module_is_not_the_composition_root() -> None:
    """broker.service_parts shares the root's name as a prefix, not its package."""
    modules = imported_modules(
        "from pulsar_grpc.broker.service_parts import HasTopics", ("broker", "web")
    )
    assert forbidden_in(modules, {"broker.service"}) == []
    modules = imported_modules("from ..service import BrokerService", ("broker", "web"))
    assert "broker.service" in forbidden_in(modules, {"broker.service"})
