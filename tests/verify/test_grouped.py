"""A plan file written one entry per task is decided on its groups (`load_grouped`) and
answered in the terms of the file: agreement with enumeration on the plan as written."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError
from escher.core.plan import Plan
from escher.verify import Verdict, VerificationResult, _verify, check_placement, verify
from escher.verify._verify import Verifier
from escher.verify.model._statement import task_statement
from escher.verify.read._grouped import Grouping, load_grouped
from tests.verify._oracle import assert_minimal_conflict, feasible
from tests.verify.test_enumeration import instances


def _one_entry_per_task(plan: Plan) -> dict[str, Any]:
    """`plan` as a file with each task no intent names written one entry per replica."""
    data = plan.to_dict()
    named = {n for i in plan.intents for n in i.tasks}
    entries = []
    for raw in data["tasks"]:
        if raw["name"] in named or raw["creates"]:
            entries.append(raw)
            continue
        for k in range(raw["count"]):
            entries.append({**raw, "name": f"{raw['name']}-{k}", "count": 1, "source": f"l{k}"})
    return {**data, "tasks": entries}


def _run(grouped: Grouping, state: ClusterState) -> VerificationResult:
    run = Verifier._grouped(grouped, state, time.monotonic() + 30, None)
    run.verdict()
    run.explain()
    for _ in run.intents():
        pass
    return run.result()


def _written(tmp: Path, inst: tuple[Plan, ClusterState]) -> tuple[Path, Plan, ClusterState]:
    plan, state = inst
    path = tmp / "plan.json"
    path.write_text(json.dumps(_one_entry_per_task(plan)))
    return path, Plan.load(path), state


@settings(
    max_examples=500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(instances())
def test_grouped_verdicts_agree_with_enumeration_of_the_plan_as_written(
    tmp_path_factory: Any, inst: tuple[Plan, ClusterState]
) -> None:
    path, written, state = _written(tmp_path_factory.mktemp("g"), inst)
    result = _run(load_grouped(path), state)
    expected = feasible(written, state)
    assert result.status is (Verdict.FEASIBLE if expected else Verdict.INFEASIBLE), result.render()
    if expected:
        assert result.witness is not None
        assert set(result.witness) == {t.name for t in written.tasks}
        assert check_placement(written, state, result.witness) == []
        return
    assert result.explanation is not None and result.explanation.minimal
    assert_minimal_conflict(written, state, result.explanation.ids)
    _assert_worded_as_written(result, written)
    # The intents are answered as for the plan as written.
    alone = verify(written, state, timeout=30)
    assert [r.status for r in result.intents] == [r.status for r in alone.intents]


def test_entries_of_one_shape_are_decided_as_one_task(tmp_path: Path) -> None:
    entries = [{"name": f"t{i}", "resources": {"CPU": 1}, "source": f"l{i}"} for i in range(9)]
    entries.append({"name": "solo", "resources": {"CPU": 1}})  # named by an intent: alone
    intents = [{"kind": "separated", "tasks": ["solo"], "source": "AntiAffinity"}]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tasks": entries, "intents": intents}))
    grouped = load_grouped(path)
    assert [(t.name, t.count) for t in grouped.plan.tasks] == [("t0", 9), ("solo", 1)]
    assert grouped.members == {"t0": ([f"t{i}" for i in range(9)], 1)}
    state = ClusterState.from_dict({"nodes": [{"id": "n0", "total": {"CPU": 10}}]})
    result = _run(grouped, state)
    assert result.status is Verdict.FEASIBLE and result.witness is not None
    assert result.witness == {**{f"t{i}": ["n0"] for i in range(9)}, "solo": ["n0"]}


def _assert_worded_as_written(result: VerificationResult, written: Plan) -> None:
    """Each task statement of the explanation is the one of the task as written."""
    assert result.explanation is not None
    as_written = {f"task:{t.name}": task_statement(t) for t in written.tasks}
    for st in result.explanation.statements:
        assert st.kind != "task" or st == as_written[st.id]


def test_an_infeasible_grouped_plan_is_explained_by_its_entries(tmp_path: Path) -> None:
    entries = [{"name": f"t{i}", "resources": {"CPU": 1}, "source": f"l{i}"} for i in range(3)]
    entries += [{"name": f"t{i}", "resources": {"CPU": 1}} for i in (3, 4)]  # no source
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tasks": entries}))
    state = ClusterState.from_dict({"nodes": [{"id": "n0", "total": {"CPU": 4}}]})
    grouped = load_grouped(path)
    assert grouped.members  # decided in groups
    result = _run(grouped, state)
    assert result.status is Verdict.INFEASIBLE and result.explanation is not None
    assert result.explanation.minimal
    tasks = {s.id for s in result.explanation.statements if s.kind == "task"}
    assert tasks == {f"task:t{i}" for i in range(5)}  # all five are needed, each by name
    _assert_worded_as_written(result, Plan.load(path))
    assert "written" not in vars(grouped)  # worded without building the plan as written


def test_from_file_reads_groups_and_says_what_is_wrong_with_a_bad_file(tmp_path: Path) -> None:
    entries = [{"name": f"t{i}", "resources": {"CPU": 1}} for i in range(3)]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tasks": entries}))
    state = ClusterState.from_dict({"nodes": [{"id": "n0", "total": {"CPU": 2}}]})
    run = Verifier.from_file(path, state, deadline=time.monotonic() + 30)
    assert run.verdict().status is Verdict.INFEASIBLE
    assert run.result().stats["replicas"] == 3
    path.write_text(json.dumps({"tasks": [*entries, {"name": "t0", "resources": {"CPU": 1}}]}))
    with pytest.raises(
        PlanFormatError, match=r"tasks\[3\]: the plan already has a task named 't0'"
    ):
        Verifier.from_file(path, state, deadline=time.monotonic() + 30)


def test_a_group_set_not_proven_minimal_names_every_entry_of_its_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shrinking the groups stopped at its limit: the groups' entries are not searched."""
    entries = [{"name": f"t{i}", "resources": {"CPU": 1}} for i in range(6)]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"tasks": entries}))
    state = ClusterState.from_dict({"nodes": [{"id": "n0", "total": {"CPU": 4}}]})
    grouped = load_grouped(path)
    monkeypatch.setattr(_verify, "minimise", lambda plan, state, core, **_: (core, False))
    searched: list[Any] = []
    monkeypatch.setattr(Grouping, "fewest_entries", lambda *a, **k: searched.append(a))
    result = _run(grouped, state)
    assert result.explanation is not None and not result.explanation.minimal
    assert searched == []
    tasks = {s.id for s in result.explanation.statements if s.kind == "task"}
    assert tasks == {f"task:t{i}" for i in range(6)}
