"""No import cycle among the broker's modules (issue 27).

A cycle makes its modules one unit: none can be read, tested or replaced without the others,
and an import-time one breaks at the first reordering. Type-only imports (under
``if TYPE_CHECKING:``) count, since they tie the modules' meanings just as much; a package and
a module inside it do not, as importing the child runs the parent anyway.

An owner and what it owns (a topic and its subscriptions, a subscription and its consumers)
meet through a narrow port instead: a ``typing.Protocol`` in the owned module naming what it
uses of its owner. To list the cycles, should one appear:
``python -m tests.unit.test_import_cycles``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

from tests.unit.test_layering import ROOT, imported_modules


def module_name(path: Path) -> str:
    """``broker/web/app.py`` -> ``broker.web.app``; a package is named by its folder."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: str) -> dict[str, set[str]]:
    """Each module of ``package`` -> the modules of it that it imports, without the edges
    between a package and what it contains."""
    paths = {module_name(p): p for p in (ROOT / package).rglob("*.py")}

    def related(a: str, b: str) -> bool:
        return a == b or a.startswith(b + ".") or b.startswith(a + ".")

    graph = {}
    for name, path in paths.items():
        inside = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        imported = imported_modules(path.read_text(), tuple(inside))
        graph[name] = {m for m in imported if m in paths and not related(name, m)}
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[frozenset[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = {stack.pop()}
            while node not in component:
                component.add(stack.pop())
            if len(component) > 1:
                found.append(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_the_broker() -> None:
    assert [sorted(c) for c in cycles(import_graph("broker"))] == []


@pytest.mark.parametrize(
    "graph",
    [
        {"a": {"b"}, "b": {"a"}},
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}},
    ],
)
def test_a_cycle_is_found(graph: dict[str, set[str]]) -> None:
    assert [sorted(c) for c in cycles(graph)] == [sorted({"a", "b"} | set(graph["b"]))]


def test_a_type_only_import_counts_and_a_parent_package_does_not(tmp_path: Path) -> None:
    """The lines the graph is built from: an import under TYPE_CHECKING is an edge, an import
    of the package a module sits in is not."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from pulsar_grpc.broker import errors\n"
        "if TYPE_CHECKING:\n"
        "    from pulsar_grpc.broker.service import BrokerService\n"
    )
    assert {"broker.service", "broker"} <= imported_modules(source, ("broker", "web"))
    graph = import_graph("broker")
    assert "broker.cluster.load_report" in graph["broker.web.broker_stats_admin"]
    assert "broker.cluster" not in graph["broker.cluster.load_report"]  # it imports broker_id


if __name__ == "__main__":
    found = cycles(import_graph("broker"))
    print(f"{len(found)} import cycles in broker/ (modules in each: {[len(c) for c in found]})")
    for component in found:
        print("  " + ", ".join(sorted(component)))
