"""Start-up: ``import escher`` and the ``escher`` command import only what they use.

Each check runs a fresh interpreter and reads `sys.modules` afterwards, so it holds whatever
the test process imported before. Times are not asserted (the machine is shared); what is
imported is.
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest

import escher
from escher import api
from escher.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parents[1]

#: Imported by the verify path only when an engine, a proof or text output needs it.
HEAVY = (
    *("rich", "z3", "scipy", "numpy", "pysat"),
    *("escher.api", "escher.backends", "escher.esl", "escher.verify.repair"),
)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    )
    return set(json.loads(out.stdout.splitlines()[-1]))


def _loaded(modules: set[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def test_import_escher_loads_nothing_until_used() -> None:
    modules = _modules_after("import escher")
    assert not [m for m in modules if m.startswith("escher.")]
    used = _modules_after("import escher\nescher.Plan")
    assert "escher.core.plan" in used and not _loaded(used, "escher.api")


def _names_imported_for_type_checkers() -> dict[str, str]:
    """Public name -> module, from the imports under `TYPE_CHECKING` in escher/__init__.py."""
    tree = ast.parse(Path(escher.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.dump(n))
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
        if alias.name not in ("Backend", "WhyResult")  # only for `why`'s signature
    }


def test_every_public_name_resolves() -> None:
    assert set(api.__all__) <= set(escher.__all__)
    static = _names_imported_for_type_checkers()
    assert set(escher.__all__) - {"__version__", "why"} == set(static)  # mypy sees what runs
    for name, module in static.items():
        assert getattr(escher, name) is getattr(importlib.import_module(module), name), name
    for name in escher.__all__:
        assert getattr(escher, name) is not None, name
    assert set(escher.__all__) <= set(dir(escher))
    assert escher.launch is api.launch and escher.api is api
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        _ = escher.no_such_name


def test_verify_json_path_skips_text_output_and_backends(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    cluster = tmp_path / "cluster.json"
    plan.write_text(json.dumps({"tasks": [{"name": "t", "resources": {"CPU": 1}}]}))
    cluster.write_text(json.dumps({"nodes": [{"id": "n1", "total": {"CPU": 2}}]}))
    code = (
        "import sys\nfrom escher.cli import main\n"
        f"sys.argv = ['escher', 'verify', {str(plan)!r}, '--cluster', {str(cluster)!r}, "
        "'--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
    )
    modules = _modules_after(code)
    assert "escher.verify" in modules
    assert [h for h in HEAVY if _loaded(modules, h)] == []


def test_help_imports_no_command() -> None:
    code = (
        "import sys\nfrom escher.cli import main\nsys.argv = ['escher', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )
    modules = _modules_after(code)
    shared = {"escher.cli._group", "escher.cli.conventions"}
    assert not [m for m in modules if m.startswith("escher.cli.") and m not in shared]
    assert [m for m in ("rich", "escher.verify", "escher.backends") if _loaded(modules, m)] == []


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_listed_summary_is_the_commands_own(name: str) -> None:
    command = main.get_command(click.Context(main), name)
    assert command is not None
    entry = COMMANDS[name]
    if entry.listed_as_is():
        assert entry.summary == command.get_short_help_str(limit=1000)
