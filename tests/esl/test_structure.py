"""The ESL package's shape: no import cycle among its modules, no private name imported
across modules."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "escher" / "esl"


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(tree: ast.AST, here: str, is_package: bool) -> set[str]:
    """Every module name an `import` anywhere in `tree` names (function-level ones too)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = here.split(".")
                parent = parent[: len(parent) - node.level + (1 if is_package else 0)]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def test_no_import_cycle_among_esl_modules() -> None:
    mods = modules()
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text())
        for target in imported(tree, name, path.name == "__init__.py"):
            if target in mods and target != name:
                graph.add_edge(name, target)
    # a package's __init__ re-exporting its submodules is not a loop of the code
    packages = {n for n, p in mods.items() if p.name == "__init__.py"}
    code = graph.subgraph(n for n in graph if n not in packages)
    cycles = list(nx.simple_cycles(code))
    assert not cycles, f"import cycles: {cycles}"


def test_no_private_name_used_across_modules() -> None:
    problems = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("escher"):
                problems += [
                    f"{name}: imports {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and not alias.name.startswith("__")
                ]
    assert not problems, problems
