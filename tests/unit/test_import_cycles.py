"""No import cycle anywhere in the product's packages (issue 27).

A cycle makes its modules one unit: none can be read, tested or replaced without the others,
and an import-time one breaks at the first reordering. Every import counts: under
``if TYPE_CHECKING:`` (it ties the modules' meanings just as much) and inside functions (a
deferred import is still a dependency). A package and a module inside it do not, as
importing the child runs the parent anyway.

An owner and what it owns (a topic and its subscriptions, a subscription and its consumers)
meet through a narrow port instead: a ``typing.Protocol`` in the owned module naming what it
uses of its owner. To list the cycles, should one appear:
``python -m tests.unit.test_import_cycles``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (
    "broker",
    "handler",
    "interceptors",
    "client",
    "schema",
    "spark",
    "cli",
    "proxy",
    "inspector",
)


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name (``client._errors``; a package by its folder's name) -> file."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``name`` imports anywhere in its file: ``from X import y``
    counts X.y when that is a module, else X; an import from outside counts for nothing."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            candidates = [f"{module}.{alias.name}" for alias in node.names]
            candidates = [c if c in modules else module for c in candidates]
        else:
            continue
        for candidate in candidates:
            candidate = candidate.removeprefix("pulsar_grpc.")
            while candidate and candidate not in modules:  # a name defined in a module
                candidate = candidate.rpartition(".")[0]
            if candidate and candidate != name:
                found.add(candidate)
    return found


def _related(a: str, b: str) -> bool:
    """A package and a module inside it."""
    return a.startswith(b + ".") or b.startswith(a + ".")


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Each module -> the modules it imports, without the edges between a package and what
    it contains."""
    modules = module_files(root, packages)
    return {
        name: {m for m in imports_of(name, path, modules) if not _related(name, m)}
        for name, path in modules.items()
    }


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_any_package() -> None:
    graph = import_graph(ROOT, PACKAGES)
    assert {"broker.service", "client._client", "spark._options"} <= set(graph)
    assert cycles(graph) == []


@pytest.mark.parametrize(
    "graph",
    [
        {"a": {"b"}, "b": {"a"}},
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}},
    ],
)
def test_a_cycle_is_found(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == [sorted({"a", "b"} | set(graph["b"]))]


def test_type_only_and_deferred_imports_count_and_a_parent_package_does_not(
    tmp_path: Path,
) -> None:
    """The lines the graph is built from: a circle closed under ``if TYPE_CHECKING:`` or by an
    import inside a function is found; a module importing its own package is no circle."""
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "__init__.py").write_text("from . import _a\n")
    (tmp_path / "client" / "_a.py").write_text(
        "from ._b import B\nfrom pulsar_grpc import client\n"
    )
    (tmp_path / "client" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pulsar_grpc.client._a import A\n"
    )
    (tmp_path / "client" / "_c.py").write_text("from ._a import A\n")
    (tmp_path / "client" / "_d.py").write_text("def later():\n    from ._c import C\n")
    (tmp_path / "client" / "_a.py").write_text(
        (tmp_path / "client" / "_a.py").read_text() + "def f():\n    from ._d import later\n"
    )
    assert cycles(import_graph(tmp_path, ("client",))) == [
        ["client._a", "client._b", "client._c", "client._d"]
    ]
    (tmp_path / "client" / "_b.py").write_text("B = 1\n")
    (tmp_path / "client" / "_d.py").write_text("def later(): ...\n")
    assert cycles(import_graph(tmp_path, ("client",))) == []


if __name__ == "__main__":
    found = cycles(import_graph(ROOT, PACKAGES))
    print(f"{len(found)} import cycles (modules in each: {[len(c) for c in found]})")
    for component in found:
        print("  " + ", ".join(component))
