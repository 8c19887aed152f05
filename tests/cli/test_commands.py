"""What `escher backends` and `escher state` print, in text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.backends import register_backend
from escher.cli import main


@pytest.fixture(autouse=True)
def _here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ESCHER_BACKEND", raising=False)
    monkeypatch.delenv("ESCHER_CONFIG", raising=False)
    (tmp_path / "escher.toml").write_text(
        "[memory]\nnodes = { a = { CPU = 2 }, b = { GPU = 1 } }\n"
    )


@pytest.fixture
def missing_backend() -> object:
    import escher.backends._registry as registry

    register_backend(
        "phantom",
        "escher.backends.memory:MemoryBackend",
        "pip install 'escher-sched[phantom]'",
        requires=("escher_no_such_module",),
    )
    yield
    registry._entries.pop("phantom", None)


def test_backends_text_keeps_brackets_and_tells_availability(missing_backend: object) -> None:
    # wide enough that the name cell does not wrap, whatever terminal the run has
    result = CliRunner(env={"COLUMNS": "200"}).invoke(main, ["backends"])
    assert result.exit_code == 0, result.output
    assert "memory (configured)" in result.stdout
    row = next(line for line in result.stdout.splitlines() if line.startswith("│ phantom"))
    assert "not available" in row
    hint = next(line for line in result.stdout.splitlines() if line.startswith("phantom: "))
    assert hint.endswith("Install it with: pip install 'escher-sched[phantom]'")
    assert "configured backend: memory" in result.stdout


def test_backends_json(missing_backend: object) -> None:
    result = CliRunner().invoke(main, ["backends", "--format", "json"])
    data = json.loads(result.stdout)
    rows = {row["name"]: row for row in data["backends"]}
    assert rows["memory"]["available"] and rows["memory"]["configured"]
    assert (
        "nodes" in rows["memory"]["options"] and "VIRTUAL_CLOCK" in rows["memory"]["capabilities"]
    )
    assert not rows["phantom"]["available"] and "escher_no_such_module" in rows["phantom"]["reason"]
    assert rows["kubernetes"]["aliases"] == ["k8s"]
    assert data["configured"]["backend"] == "memory" and data["configured"]["sources"]


def test_backends_connect_shows_the_configured_backends_facts() -> None:
    result = CliRunner().invoke(main, ["backends", "--connect", "--format", "json"])
    assert result.exit_code == 0, result.stderr
    assert isinstance(json.loads(result.stdout)["configured"]["facts"], dict)


def test_state_text_json_and_deprecated_flag() -> None:
    text = CliRunner().invoke(main, ["state"])
    assert text.exit_code == 0 and "GPU=1" in text.stdout
    data = json.loads(CliRunner().invoke(main, ["state", "--format", "json"]).stdout)
    assert sorted(n["id"] for n in data["nodes"]) == ["a", "b"]
    old = CliRunner().invoke(main, ["state", "--json"])
    assert json.loads(old.stdout) == {**data, "time": json.loads(old.stdout)["time"]}
    assert "deprecated" in old.stderr


def test_state_bad_backend_and_bad_config() -> None:
    result = CliRunner().invoke(main, ["state", "--backend", "memroy"])
    assert result.exit_code == 3 and "Did you mean 'memory'" in result.stderr
    assert result.stdout == "" and "Traceback" not in result.output
    Path("escher.toml").write_text('[memory]\nvirtual_clock = "false"\n')
    result = CliRunner().invoke(main, ["state"])
    assert result.exit_code == 3 and "virtual_clock = false" in result.stderr
