"""The layering the architecture depends on (ARCHITECTURE.md): checked on every import line.

protos <- client <- (spark, proxy); protos <- handler -> broker <- interceptors. The broker core
must stay protocol-neutral (PIP-59) so another transport can be added as one more handler.
"""

from __future__ import annotations

import ast
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
    "interceptors": {"handler", "client", "cli"},
    "handler": {"client", "cli"},
}


def imported_top_levels(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_import_across_layers(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_top_levels(path) & FORBIDDEN[package])
        for path in (ROOT / package).rglob("*.py")
    }
    assert {k: v for k, v in offenders.items() if v} == {}
