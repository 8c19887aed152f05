"""`escher why` and `escher what-if` from the command line: output, JSON and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli import main

WORKLOAD = {
    "plan": {
        "tasks": [
            {"name": "a", "resources": {"CPU": 1}, "count": 3},
            {"name": "huge", "resources": {"CPU": 99}},
        ]
    },
    "tasks": {"a": {"duration": 2, "interval": 1}, "huge": {"duration": 1}},
}


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return CliRunner()


def test_why_request_codes(runner: CliRunner) -> None:
    fits = runner.invoke(main, ["why", "--request", "CPU=1"])
    assert fits.exit_code == 0 and "placeable" in fits.output
    never = runner.invoke(main, ["why", "--request", '{"CPU": 64}', "--format", "json"])
    assert never.exit_code == 4
    data = json.loads(never.output)
    assert data["tasks"][0]["verdict"] == "never" and data["exit_code"] == 4
    blocked = runner.invoke(main, ["why", "--request", "CPU=1,fast-disk=1"])
    assert blocked.exit_code == 2 and "lacks label fast-disk" in blocked.output
    nothing = runner.invoke(main, ["why"])
    assert nothing.exit_code == 0 and "no pending tasks" in nothing.output


def test_why_bad_input(runner: CliRunner) -> None:
    assert runner.invoke(main, ["why", "--request", "CPU"]).exit_code == 3
    assert runner.invoke(main, ["why", "no-such-task"]).exit_code == 3
    assert runner.invoke(main, ["why", "t1", "--request", "CPU=1"]).exit_code == 3


def test_what_if_compares_policies(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(WORKLOAD))
    result = runner.invoke(
        main, ["what-if", str(path), "--policy", "fifo", "--policy", "drf", "--format", "json"]
    )
    assert result.exit_code == 1, result.output  # 'huge' never runs
    reports = json.loads(result.output)["reports"]
    assert [r["policy"] for r in reports] == ["fifo", "drf"]
    assert all(r["never_placed"] == 1 and r["makespan"] == 4 for r in reports)
    text = runner.invoke(main, ["what-if", str(path), "--per-task"])
    assert "never placed" in text.output and "tasks under backend" in text.output


def test_what_if_from_a_cluster_file(runner: CliRunner, tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.json"
    cluster.write_text(json.dumps({"nodes": [{"id": "x", "total": {"CPU": 100}}]}))
    path = tmp_path / "w.json"
    path.write_text(json.dumps(WORKLOAD))
    result = runner.invoke(main, ["what-if", str(path), "--cluster", str(cluster)])
    assert result.exit_code == 0, result.output
    bad = runner.invoke(main, ["what-if", str(tmp_path / "missing.json")])
    assert bad.exit_code == 3
