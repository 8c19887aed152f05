"""The package's shape: layers whose imports only point down, package faces, no import loops.

The import graph is read from the source with the standard library's `ast`: every `import`
and `from ... import` of an escher module, wherever it stands in a file (a lazy import inside
a function, or one under ``if TYPE_CHECKING:``, is still a dependency). Every module under
escher/ is read, whatever modules exist, so the rules hold for code added later.

The rules (docs/architecture.md explains them; its table of layers is read here, so the page
and the test cannot disagree):

* a package imports only packages of lower layers (never its own layer's siblings);
* nothing inside escher imports the package face ``escher`` (escher/__init__.py);
* a private module (``_name``, at any depth) is imported only from inside the top-level
  package that holds it (``escher.x._y`` and ``escher.x.sub._z`` only from ``escher.x...``;
  ``escher._y`` only from the face), and private names only from within one's own package;
* no import loops, between packages or between modules.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "escher"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
FACE = "escher"

#: Modules the rules do not apply to, each with its reason (the list is meant to stay short).
#: Sample programs are user code shipped as files (`escher plan app.py:main`): they import
#: `escher` as any user program does, and no module of the library imports them.
EXEMPT_PREFIXES: dict[str, str] = {
    "escher.samples.": "sample programs: user code shipped as files, run by path, never imported",
}


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


@dataclass(frozen=True)
class Import:
    """One import of an escher module: who, where, and what it names.

    Attributes:
        importer: The importing module (``escher.cli.verify``).
        path: Its file.
        line: The import's line.
        target: The escher module imported (``from escher import api`` imports
            ``escher.api``; ``from escher.verify import verify`` imports ``escher.verify``).
        names: The names taken from `target` (empty for ``import x``).
    """

    importer: str
    path: Path
    line: int
    target: str
    names: tuple[str, ...] = ()

    def where(self) -> str:
        """``path:line``, from the repository root."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def imports() -> list[Import]:
    """Every import of an escher module by a module of escher/, in file order."""
    known = _modules()
    found: list[Import] = []
    for name, path in known.items():
        is_package = path.name == "__init__.py"
        base = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _resolve(alias.name, known)
                    if alias.name.split(".")[0] == "escher" and target:
                        found.append(Import(name, path, node.lineno, target))
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    module = ".".join([*anchor, *([node.module] if node.module else [])])
                else:
                    module = node.module or ""
                if module.split(".")[0] != "escher":
                    continue
                plain: list[str] = []
                for alias in node.names:  # `from escher import api` imports the module
                    if f"{module}.{alias.name}" in known:
                        found.append(Import(name, path, node.lineno, f"{module}.{alias.name}"))
                    else:
                        plain.append(alias.name)
                target = _resolve(module, known)
                if plain and target:
                    found.append(Import(name, path, node.lineno, target, tuple(plain)))
    return sorted(found, key=lambda i: (str(i.path), i.line))


def import_graph() -> dict[str, set[str]]:
    """Module -> the escher modules it imports (packages count as their __init__)."""
    graph: dict[str, set[str]] = {name: set() for name in _modules()}
    for imp in imports():
        if imp.target != imp.importer:
            graph[imp.importer].add(imp.target)
    return graph


def layers() -> list[tuple[str, ...]]:
    """The layers, lowest first, as docs/architecture.md's table between ``<!-- layers -->``
    and ``<!-- /layers -->`` lists them: each row's packages, in backticks."""
    text = ARCHITECTURE.read_text()
    block = re.search(r"<!-- layers -->(.*?)<!-- /layers -->", text, re.S)
    assert block, f"{ARCHITECTURE}: no <!-- layers --> ... <!-- /layers --> table"
    rows = [line.split("|") for line in block.group(1).splitlines() if line.startswith("|")]
    found = [tuple(re.findall(r"`([\w.]+)`", cells[2])) for cells in rows if len(cells) > 3]
    return [row for row in found if row]


def unit(module: str) -> str:
    """The top-level package (or top-level module) a module belongs to: ``escher.cli.verify``
    -> ``cli``; the face ``escher`` -> ``escher``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else FACE


def _exempt(module: str) -> bool:
    return any(module.startswith(prefix) for prefix in EXEMPT_PREFIXES)


def _owner_of_private(target: str) -> str | None:
    """The top-level package a private module is private to (``escher.verify._grouped`` and
    ``escher.verify.engines._smt`` -> ``escher.verify``; ``escher._x`` -> the face), or None
    for a public module. Inside a top-level package, its sub-packages share their privates."""
    parts = target.split(".")
    if not any(p.startswith("_") and not p.startswith("__") for p in parts[1:]):
        return None
    return FACE if parts[1].startswith("_") else ".".join(parts[:2])


def layer_violations() -> list[str]:
    """Every import that breaks a rule, as ``file:line: rule: what; what to do``."""
    order = {name: level for level, row in enumerate(layers()) for name in row}
    problems: list[str] = []
    unplaced: set[str] = set()
    for imp in imports():
        if _exempt(imp.importer):
            continue
        here, there = unit(imp.importer), unit(imp.target)
        for name in (here, there):
            if name not in order and name not in unplaced:
                unplaced.add(name)
                problems.append(
                    f"{imp.where()}: unplaced: 'escher.{name}' is in no layer of "
                    "docs/architecture.md; add it to the table of layers"
                )
        if imp.target == FACE and imp.importer != FACE:
            problems.append(
                f"{imp.where()}: face: {imp.importer} imports the package face 'escher' "
                f"({', '.join(imp.names) or 'import escher'}); import from the package that "
                "defines the name (escher.api, escher.core, ...)"
            )
        elif here != there and here in order and there in order:
            if order[there] > order[here]:
                rule = "up"
            elif order[there] == order[here]:
                rule = "sideways"
            else:
                rule = ""
            if rule:
                problems.append(
                    f"{imp.where()}: {rule}: {imp.importer} imports {imp.target}; layer "
                    f"{order[here] + 1} ({here}) may import only lower layers, and {there} is "
                    f"in layer {order[there] + 1} (docs/architecture.md)"
                )
        owner = _owner_of_private(imp.target)
        inside = owner is not None and (
            imp.importer == owner if owner == FACE else imp.importer.startswith(owner + ".")
        )
        if owner is not None and not inside and imp.importer != owner:
            problems.append(
                f"{imp.where()}: private: {imp.importer} imports {imp.target}, private to "
                f"{owner}; export what is needed from {owner}'s __init__ and import it from there"
            )
        foreign = owner is None and not (
            imp.importer == imp.target or imp.importer.startswith(imp.target + ".")
        )
        private_names = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if foreign and private_names and unit(imp.importer) != unit(imp.target):
            problems.append(
                f"{imp.where()}: private: {imp.importer} takes {', '.join(private_names)} "
                f"from {imp.target}; export a public name there and use it"
            )
    return problems


def package_graph() -> dict[str, set[str]]:
    """Top-level package -> the top-level packages it imports."""
    graph: dict[str, set[str]] = {}
    for imp in imports():
        if _exempt(imp.importer):
            continue
        graph.setdefault(unit(imp.importer), set())
        graph.setdefault(unit(imp.target), set())
        if unit(imp.importer) != unit(imp.target):
            graph[unit(imp.importer)].add(unit(imp.target))
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


def test_imports_point_down_the_layers() -> None:
    problems = layer_violations()
    assert not problems, "imports against docs/architecture.md:\n" + "\n".join(problems)


def test_no_import_loops_between_packages() -> None:
    loops = cycles(package_graph())
    assert not loops, "import loops between packages of escher/:\n" + "\n".join(
        " <-> ".join(loop) for loop in loops
    )


def test_every_package_is_in_one_layer() -> None:
    table = layers()
    listed = [name for row in table for name in row]
    assert len(listed) == len(set(listed)), f"a package is in two layers: {table}"
    present = {unit(name) for name in _modules() if not _exempt(name)}
    assert present <= set(listed), f"in no layer of docs/architecture.md: {present - set(listed)}"
    missing = set(listed) - present
    assert not missing, f"docs/architecture.md names packages that do not exist: {missing}"


def test_the_rules_catch_each_kind_of_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a small made-up tree: each rule fires once, with the file, the line and the rule."""
    files = {
        "escher/__init__.py": "from escher.cli import run\n",
        "escher/core/__init__.py": "",
        "escher/core/_x.py": "",
        "escher/core/a.py": "import os\n\ndef f():\n    from escher.cli import b\n",
        "escher/cli/__init__.py": "from escher.cli.b import run\n",
        "escher/cli/b.py": "from escher.core import _x\n\ndef run():\n    pass\n",
        "escher/cli/c.py": "import escher\n",
        "escher/tool/__init__.py": "from escher.core import a\n",
        "escher/samples/app.py": "import escher\n",
        "docs/architecture.md": "<!-- layers -->\n| L | P | W |\n|---|---|---|\n"
        "| 1 | `core` | x |\n| 2 | `cli` | y |\n| 3 | `escher` | z |\n<!-- /layers -->\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "escher")
    monkeypatch.setattr(sys.modules[__name__], "ARCHITECTURE", tmp_path / "docs/architecture.md")
    problems = layer_violations()
    assert [p.split(": ")[0:2] for p in problems] == [
        ["escher/cli/b.py:1", "private"],
        ["escher/cli/c.py:1", "face"],
        ["escher/core/a.py:4", "up"],
        ["escher/tool/__init__.py:1", "unplaced"],
    ], problems
    assert cycles(package_graph()) == [["cli", "core", "escher"]]


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
