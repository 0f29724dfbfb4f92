"""No import circles in the SDK (client/ and schema/), imports under ``if TYPE_CHECKING:`` and
inside functions counted (issue 27).

A circle makes the import order matter (a module sees a half-initialised other one) and makes
its modules one unit: none can be read, tested or moved without the rest. The SDK had three
(errors, message, compression and crypto; authentication and its plugins; the partition
consumer and its crypto failure handling); a new one fails here, naming its modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("client", "schema")


def module_files(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Module name (``client._errors``; a package by its folder's name) -> file."""
    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
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


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
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


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def test_the_sdk_has_no_import_circles() -> None:
    assert circles(import_graph(ROOT, PACKAGES)) == []


def test_a_type_only_import_that_closes_a_circle_is_caught(tmp_path: Path) -> None:
    """The check itself: a circle closed under ``if TYPE_CHECKING:`` and a relative import."""
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "__init__.py").write_text("from . import _a\n")
    (tmp_path / "client" / "_a.py").write_text("from ._b import B\n")
    (tmp_path / "client" / "_b.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from pulsar_grpc.client._a import A\n"
    )
    assert circles(import_graph(tmp_path, ("client",))) == [["client._a", "client._b"]]
