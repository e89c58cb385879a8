"""The package layering holds: no import cycle between latsim's packages, and the lower layers
import nothing from the higher ones (checked on the source with ``ast``, imports inside
``if TYPE_CHECKING:`` excepted: they cost nothing at run time and exist for the type checker)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "latsim"

LOWER = {
    "catalog": {"sim", "engines", "oracle", "measure", "validate", "cli", "plan", "calibration", "report"},
    "workload": {"sim", "engines", "oracle", "costmodel", "measure", "validate", "cli", "plan", "calibration"},
    "costmodel": {"sim", "engines", "oracle", "measure", "validate", "cli", "plan", "calibration", "report"},
    "metrics": {"sim", "engines", "oracle", "measure", "validate", "cli", "plan", "calibration"},
    "sim": {"engines", "oracle", "measure", "validate", "cli", "plan", "calibration"},
    "engines": {"oracle", "measure", "validate", "cli", "plan", "calibration"},
}
"""Package -> the packages it must not import."""


def _package(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] != "latsim" or len(parts) < 2:
                continue
            if (ROOT / parts[1]).exists() or (ROOT / f"{parts[1]}.py").exists():
                found.add(parts[1])
    return found


def package_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        pkg = _package(path)
        graph.setdefault(pkg, set()).update(_imports(path) - {pkg})
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_cycle_between_packages() -> None:
    assert _cycle(package_graph()) is None, f"import cycle: {' -> '.join(_cycle(package_graph()) or [])}"


@pytest.mark.parametrize("package", sorted(LOWER))
def test_lower_layers_do_not_import_higher_ones(package: str) -> None:
    assert not package_graph()[package] & LOWER[package]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
