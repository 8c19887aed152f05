"""`escher bench`: checks for matplotlib first, writes into the current directory by default."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli import main


def test_writes_into_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["bench", "gandiva", "--quick", "--no-plot"])
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "gandiva.json").is_file() and not (tmp_path / "docs").exists()
    assert "36.3" in result.stdout  # the paper's number beside ours


def test_needs_matplotlib_before_running(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    result = CliRunner().invoke(main, ["bench", "alphazero", "--format", "json"])
    assert result.exit_code == 69
    error = json.loads(result.stderr)["error"]
    assert "escher-sched[plot]" in error["message"] and "--no-plot" in error["message"]
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_unknown_workload_suggests(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "wordcnt"])
    assert result.exit_code == 3 and "Did you mean 'wordcount'?" in result.stderr
