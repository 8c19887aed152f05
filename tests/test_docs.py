"""Every ```python block in docs/ runs, page by page, in one namespace per page; every `escher`
command line shown in the docs names a real command and its real options.

Blocks fenced ```python no-run are skipped (cluster-only snippets that another test runs).
A page with a block fenced ```python k8s needs the local control plane: its test carries
the ``k8s`` marker.
Each page starts with no active backend and ends with escher shut down.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

import escher

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.S | re.M)


def python_blocks(page: Path) -> list[str]:
    """The runnable python blocks of a page, in order."""
    return [code for flags, code in _BLOCK.findall(page.read_text()) if "no-run" not in flags]


def _param(page: Path) -> object:
    flags = [f.split() for f, _ in _BLOCK.findall(page.read_text())]
    marks = [pytest.mark.k8s] if any("k8s" in f and "no-run" not in f for f in flags) else []
    return pytest.param(page, marks=marks, id=str(page.relative_to(DOCS)))


PAGES = sorted(p for p in DOCS.rglob("*.md") if python_blocks(p))


@pytest.mark.parametrize("page", [_param(p) for p in PAGES])
def test_page_code_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # pages may write files; no config file is found here
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    try:
        for index, code in enumerate(python_blocks(page)):
            compiled = compile(code, f"{page.relative_to(DOCS)}[block {index + 1}]", "exec")
            exec(compiled, namespace)
    finally:
        escher.shutdown()


def test_docs_have_runnable_pages() -> None:
    assert any(p.name == "ephemeral-resources.md" for p in PAGES)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """The site builds with no warnings (broken links, missing pages)."""
    import shutil
    import subprocess

    if shutil.which("mkdocs") is None:
        pytest.skip("mkdocs-material is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        ["mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=DOCS.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


_SHELL_BLOCK = re.compile(r"^```(?:console|bash|shell|sh|text)[^\n]*\n(.*?)^```", re.S | re.M)
#: Commands the docs mistype to show the suggestion.
_MISTYPED_ON_PURPOSE = {"verfy"}
_INLINE = re.compile(r"(?<!`)`(escher [a-z][^`\n]*)`(?!`)")


def escher_command_lines() -> list[tuple[str, str]]:
    """(where, command) of every ``escher ...`` line in the shell blocks of the docs and README."""
    found = []
    for page in [DOCS.parent / "README.md", DOCS.parent / "CONTRIBUTING.md", *DOCS.rglob("*.md")]:
        text = page.read_text()
        for block in _SHELL_BLOCK.findall(text):
            for line in block.splitlines():
                command = line.strip().removeprefix("$ ")
                if command.startswith("escher "):
                    found.append((page.name, command))
        found += [(page.name, span) for span in _INLINE.findall(text)]
    return found


def test_every_documented_command_line_parses() -> None:
    """Each `escher` line in the docs and in `--help` names a real command and its options."""
    import shlex

    import click

    from escher.cli import main
    from escher.cli._group import UnavailableCommand

    context = click.Context(main, info_name="escher")
    lines = escher_command_lines()
    assert len(lines) > 20
    for name in main.list_commands(context):  # and the Examples of every --help
        examples = getattr(main.get_command(context, name), "examples", ())
        lines += [(f"escher {name} --help", example) for example in examples]
    for where, line in lines:
        words = shlex.split(line, comments=True)[1:]
        if not words or words[0].startswith("-") or not words[0].islower():
            continue  # the group's own options, or a placeholder (escher COMMAND --help)
        if words[0] in _MISTYPED_ON_PURPOSE:
            continue
        command = main.get_command(context, words[0])
        assert command is not None, f"{where}: {line!r}: no command {words[0]!r}"
        if isinstance(command, UnavailableCommand):
            continue  # its extra is not installed here
        options = {opt for param in command.params for opt in [*param.opts, *param.secondary_opts]}
        options.add("--help")
        for word in words[1:]:
            name = word.split("=", 1)[0]
            if name.startswith("-") and name != "-":
                assert name in options, f"{where}: {line!r}: escher {words[0]} has no {name}"
