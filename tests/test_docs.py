"""Every ```python block in docs/ runs, page by page, in one namespace per page.

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
