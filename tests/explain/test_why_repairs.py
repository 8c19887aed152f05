"""`escher why --repairs`: the cheapest changes that let a blocked task start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli import main
from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify import apply_repair, check_placement
from escher.verify.repair import find_task_repairs


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> CliRunner:
    monkeypatch.chdir(tmp_path)
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    return CliRunner()


def test_a_task_too_large_gets_a_grown_node_and_a_smaller_request(runner: CliRunner) -> None:
    args = ["why", "--request", "CPU=6", "--repairs", "--adjustable", "--format", "json"]
    out = runner.invoke(main, args)
    assert out.exit_code == 4, out.output
    task = json.loads(out.output)["tasks"][0]
    kinds = {r["changes"][0]["kind"]: r for r in task["repairs"]}
    assert set(kinds) == {"node", "request"}
    assert kinds["request"]["changes"] == [
        {"kind": "request", "target": "request", "from": {"CPU": 6}, "to": {"CPU": 4}}
    ]
    assert kinds["node"]["changes"][0]["to"] == {"CPU": 6}
    assert all(set(r) == {"changes", "witness"} for r in task["repairs"])
    assert len(task["repair_notes"]) == 3


def test_text_lists_the_repairs_under_the_task(runner: CliRunner) -> None:
    out = runner.invoke(main, ["why", "--request", "CPU=6", "--repairs"])
    assert out.exit_code == 4
    assert "repair 1: node node-1: CPU 4 -> 6 available" in out.output
    placeable = runner.invoke(main, ["why", "--request", "CPU=1", "--repairs"])
    assert placeable.exit_code == 0 and "repair" not in placeable.output


def test_adjustable_needs_repairs(runner: CliRunner) -> None:
    out = runner.invoke(main, ["why", "--request", "CPU=6", "--adjustable"])
    assert out.exit_code == 3 and "only applies with --repairs" in out.output


def test_task_repairs_are_checked_placements() -> None:
    state = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": 8, "GPU": 1}} for i in range(2)]}
    )
    found = find_task_repairs("trainer", {"CPU": 2, "GPU": 2}, state, timeout=10, adjustable=True)
    assert [r.kind for r in found.repairs] == ["request", "node"]
    plan = Plan()
    plan.add_task("trainer", {"CPU": 2, "GPU": 2})
    for repair in found.repairs:
        fixed_plan, fixed_state = apply_repair(plan, state, repair)
        assert check_placement(fixed_plan, fixed_state, repair.witness) == []
