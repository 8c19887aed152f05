"""The layout of `escher/verify/`: sub-packages in pipeline order, each used by the others
only through its public face, and no module importing the `escher` package itself."""

from __future__ import annotations

import ast
from pathlib import Path

import escher.verify

ROOT = Path(escher.verify.__file__).parent

#: The sub-packages in order: each may import only those before it (and itself).
LAYERS = ["model", "check", "engines", "read", "explain", "repair"]


def _imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names]
    return out


def _modules() -> list[tuple[str, Path]]:
    return [
        (p.relative_to(ROOT).parts[0], p)
        for p in sorted(ROOT.rglob("*.py"))
        if len(p.relative_to(ROOT).parts) > 1
    ]


def test_every_module_sits_in_a_known_sub_package() -> None:
    assert {sub for sub, _ in _modules()} == set(LAYERS)


def test_sub_packages_import_down_the_pipeline_through_public_faces() -> None:
    wrong = []
    for sub, path in _modules():
        for name in _imports(path):
            parts = name.split(".")
            if parts[:2] != ["escher", "verify"] or len(parts) < 3 or parts[2] not in LAYERS:
                continue
            other = parts[2]
            if other == sub:
                continue
            if LAYERS.index(other) > LAYERS.index(sub):
                wrong.append(f"{path.relative_to(ROOT)}: {name} (up the pipeline)")
            elif len(parts) > 4 or parts[3].startswith("_"):
                wrong.append(f"{path.relative_to(ROOT)}: {name} (a private module)")
    assert wrong == []


def test_no_module_imports_the_escher_package() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in sorted(ROOT.rglob("*.py"))
        if p.name != "_cli.py" and "escher" in _imports(p)
    ]
    assert offenders == []
