"""The package's shape: no import cycles, and every module imports on its own.

The import graph is read from the source with the standard library's `ast` (every `import`
and `from ... import` of an escher module, wherever it appears in a file, counts as an edge:
a lazy import inside a function is still a dependency).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "escher"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(name: str, known: dict[str, Path]) -> str | None:
    """The escher module that `name` refers to (a module, or a package's __init__)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """Module -> the escher modules it imports (packages count as their __init__)."""
    known = _modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        base = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    module = ".".join([*anchor, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                targets = [f"{module}.{alias.name}" for alias in node.names] + [module]
            for target in targets:
                if target.split(".")[0] != "escher":
                    continue
                resolved = _resolve(target, known)
                if resolved and resolved != name:
                    graph[name].add(resolved)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _is_package_reexport(cycle: list[str], graph: dict[str, set[str]]) -> bool:
    """A package's __init__ importing its own submodules, which import siblings through
    the package's path, is not a design loop: drop package -> own-child edges and recheck."""
    members = set(cycle)
    trimmed = {
        m: {d for d in graph[m] if d in members and not d.startswith(m + ".")} for m in members
    }
    return not cycles(trimmed)


#: Loops still being taken apart. An entry that is no longer a loop fails the test: remove it.
KNOWN_CYCLES: list[set[str]] = []


def test_no_import_cycles() -> None:
    graph = import_graph()
    real = [c for c in cycles(graph) if not _is_package_reexport(c, graph)]
    unexpected = [c for c in real if not any(set(c) <= known for known in KNOWN_CYCLES)]
    assert not unexpected, "import cycles in escher/:\n" + "\n".join(
        " <-> ".join(c) for c in unexpected
    )
    stale = [k for k in KNOWN_CYCLES if not any(set(c) & k for c in real)]
    assert not stale, f"no longer cycles, remove from KNOWN_CYCLES: {stale}"


_IMPORT_ALONE = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "escher" or m.startswith("escher.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", "") or ""
        if missing.split(".")[0] == "escher" or not missing:
            failed.append(f"{name}: {exc!r}")
    except Exception as exc:
        if type(exc).__name__ == "BackendUnavailableError":  # its extra is not installed
            continue
        failed.append(f"{name}: {exc!r}")
print("\\n".join(failed))
"""


def test_every_module_imports_alone() -> None:
    """Each module imports in a clean interpreter state (no hidden import-order coupling).

    A module whose optional dependency is missing (an extra not installed) is skipped.
    """
    names = sorted(_modules())
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALONE, *names],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert not out.stdout.strip(), out.stdout


def test_the_graph_reader_sees_lazy_imports(tmp_path: Path) -> None:
    graph = import_graph()
    assert "escher.core.errors" in graph["escher.core.resources"]
    assert all(name.startswith("escher") for deps in graph.values() for name in deps)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"a"}, "c": set()}, [["a", "b"]]),
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ],
)
def test_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected
