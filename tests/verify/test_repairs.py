"""Repairs: each kind of change on a plan that does not fit, the API, `escher verify --repairs`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from escher.cli.verify import verify as verify_cmd
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.plan import Colocated, Plan, Separated, SpreadEvenly
from escher.verify import (
    Verdict,
    apply_repair,
    check_placement,
    find_repairs,
    verify,
    with_repairs,
)


def cluster(nodes: dict[str, dict[str, float]], **labels: str) -> ClusterState:
    return ClusterState.from_dict(
        {"nodes": [{"id": k, "total": v, "labels": dict(labels)} for k, v in nodes.items()]}
    )


def web_plan() -> tuple[Plan, ClusterState]:
    """Four replicas, one per node, three nodes."""
    plan = Plan()
    plan.add_task("web", {"CPU": 1, "memory": 2}, count=4, source="Deployment web")
    plan.add_intent(Separated(("web",), source="AntiAffinity('web')"))
    nodes = {f"n{i}": {"CPU": 4, "memory": 8} for i in range(3)}
    return plan, cluster(nodes, pool="general")


def by_kind(plan: Plan, state: ClusterState, **options: object) -> dict[str, object]:
    found = find_repairs(plan, state, timeout=30, **options)  # type: ignore[arg-type]
    for repair in found.repairs:  # every repair is proven by its witness
        fixed, fixed_state = apply_repair(plan, state, repair)
        assert check_placement(fixed, fixed_state, repair.witness) == []
    return {r.kind: r.to_dict()["changes"] for r in found.repairs}


def test_a_deployment_that_does_not_fit_gets_three_kinds_of_repair() -> None:
    plan, state = web_plan()
    found = find_repairs(plan, state, timeout=30)
    assert [r.kind for r in found.repairs] == ["replicas", "intent", "nodes"]
    assert all(r.cost == 1 and r.cheapest and r.minimal for r in found.repairs)
    changes = [r.to_dict()["changes"] for r in found.repairs]
    assert changes[0] == [{"kind": "replicas", "target": "web", "from": 4, "to": 3}]
    assert changes[1] == [
        {
            "kind": "intent",
            "target": "AntiAffinity('web')",
            "from": "no two of (web) in one node",
            "to": "at most 2 of (web) per node",
        }
    ]
    assert changes[2] == [
        {"kind": "nodes", "target": "pool=general (CPU 4, memory 8)", "from": 3, "to": 4}
    ]
    assert "web: 4 -> 3 replicas" in found.render()


def test_a_request_shrinks_only_where_marked_adjustable() -> None:
    plan = Plan()
    plan.add_task("trainer", {"CPU": 2, "GPU": 4})
    state = cluster({"gpu-a": {"CPU": 8, "GPU": 2}, "gpu-b": {"CPU": 8, "GPU": 2}})
    assert "request" not in by_kind(plan, state)
    kinds = by_kind(plan, state, adjustable_requests=["trainer"])
    assert kinds["request"] == [
        {"kind": "request", "target": "trainer", "from": {"GPU": 4}, "to": {"GPU": 2}}
    ]
    assert kinds["node"] == [
        {"kind": "node", "target": "gpu-a", "from": {"GPU": 2}, "to": {"GPU": 4}}
    ]
    with pytest.raises(ValidationError, match="no task of the plan"):
        find_repairs(plan, state, adjustable_requests=["trainr"])


def test_a_spread_relaxes_its_skew() -> None:
    plan = Plan()
    plan.add_task("api", {"CPU": 1}, count=4)
    plan.add_intent(SpreadEvenly(("api",), source="Spread(zone)", topology_key="zone"))
    state = ClusterState.from_dict(
        {
            "nodes": [
                {"id": "a1", "total": {"CPU": 1}, "labels": {"zone": "a"}},
                {"id": "b1", "total": {"CPU": 4}, "labels": {"zone": "b"}},
            ]
        }
    )
    kinds = by_kind(plan, state)
    assert kinds["intent"][0]["to"].endswith("skew at most 2")  # type: ignore[index]
    assert kinds["nodes"][0]["target"] == "zone=a (CPU 1)"  # type: ignore[index]


def test_a_colocation_group_splits_in_two() -> None:
    plan = Plan()
    plan.add_task("ps", {"CPU": 1})
    plan.add_task("worker", {"CPU": 1}, count=2)
    plan.add_intent(Colocated(("ps", "worker"), source="CoLocation('ps')"))
    state = cluster({"n0": {"CPU": 2}, "n1": {"CPU": 2}})
    kinds = by_kind(plan, state)
    assert kinds["intent"][0]["to"] == ["(ps) in one node", "(worker) in one node"]  # type: ignore[index]
    assert kinds["replicas"][0]["to"] == 1  # type: ignore[index]
    assert kinds["node"][0]["to"] == {"CPU": 3}  # type: ignore[index]


def test_a_conflict_of_intents_alone_is_repaired_by_intents() -> None:
    plan = Plan()
    for name in "xyz":
        plan.add_task(name, {"CPU": 0.1})
    plan.add_intent(Colocated(("x", "y"), source="CoLocation(x, y)"))
    plan.add_intent(Colocated(("y", "z"), source="CoLocation(y, z)"))
    plan.add_intent(Separated(("x", "z"), source="AntiAffinity(x, z)"))
    state = cluster({f"n{i}": {"CPU": 4} for i in range(3)})
    found = find_repairs(plan, state, timeout=30)
    assert [r.kind for r in found.repairs] == ["intent"]
    assert any(n.startswith("nodes: none") for n in found.notes)


def test_verification_result_carries_the_repairs() -> None:
    plan, state = web_plan()
    result = verify(plan, state)
    assert result.repairs == () and result.to_dict()["repairs"] == []
    found = find_repairs(plan, state, result, timeout=30)
    both = with_repairs(result, found)
    assert both.repairs == found.repairs and both.repair_notes == found.notes
    data = both.to_dict()
    assert [set(r) for r in data["repairs"]] == [{"changes", "witness"}] * 3
    assert "web: 4 -> 3 replicas" in both.render()
    json.dumps(data)


def test_a_feasible_plan_needs_no_repair() -> None:
    plan, state = web_plan()
    plan.tasks[0] = plan.tasks[0].__class__("web", plan.tasks[0].resources, 3)
    found = find_repairs(plan, state, timeout=10)
    assert found.repairs == () and "feasible" in found.notes[0]


def test_bad_arguments_are_refused() -> None:
    plan, state = web_plan()
    with pytest.raises(ValidationError, match="needs a Plan"):
        find_repairs("plan", state)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="ClusterState"):
        find_repairs(plan, {})  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="timeout"):
        find_repairs(plan, state, timeout=0)
    with pytest.raises(ValidationError, match="unknown kind"):
        find_repairs(plan, state, kinds=["replica"])


def test_a_short_budget_says_what_it_cut_off() -> None:
    plan, state = web_plan()
    result = verify(plan, state)
    found = find_repairs(plan, state, result, timeout=1e-6)
    assert len(found.notes) == 5
    assert all("time" in n or "marked" in n for n in found.notes), found.notes


def files(tmp_path: Path) -> tuple[str, str]:
    plan, state = web_plan()
    p = tmp_path / "plan.json"
    c = tmp_path / "cluster.json"
    p.write_text(json.dumps(plan.to_dict()))
    c.write_text(json.dumps(state.to_dict()))
    return str(p), str(c)


def test_cli_prints_one_line_per_repair_cheapest_first(tmp_path: Path) -> None:
    plan, cluster_file = files(tmp_path)
    out = CliRunner().invoke(verify_cmd, [plan, "--cluster", cluster_file, "--repairs"])
    assert out.exit_code == 1, out.output
    lines = [line for line in out.output.splitlines() if line.startswith("repair ")]
    assert len(lines) == 3 and "web: 4 -> 3 replicas" in lines[0]


def test_cli_json_has_the_repairs_list(tmp_path: Path) -> None:
    plan, cluster_file = files(tmp_path)
    args = [plan, "--cluster", cluster_file, "--repairs", "--format", "json"]
    out = CliRunner().invoke(verify_cmd, [*args, "--adjustable", "web"])
    data = json.loads(out.stdout)
    assert data["status"] == Verdict.INFEASIBLE.value and out.exit_code == 1
    first = data["repairs"][0]
    assert set(first) == {"changes", "witness"} and first["witness"]["web"]
    assert first["changes"] == [{"kind": "replicas", "target": "web", "from": 4, "to": 3}]
    assert any(n.startswith("request:") for n in data["repair_notes"])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--adjustable", "web"], "only applies with --repairs"),
        (["--repairs", "--adjustable", "wbe"], "no task named"),
    ],
)
def test_cli_refuses_bad_repair_options(tmp_path: Path, extra: list[str], message: str) -> None:
    plan, cluster_file = files(tmp_path)
    out = CliRunner().invoke(verify_cmd, [plan, "--cluster", cluster_file, *extra])
    assert out.exit_code == 3 and message in out.output
    assert "Traceback" not in out.output


def test_two_conflicts_no_kind_alone_fixes_get_a_mixed_repair() -> None:
    plan, state = web_plan()
    plan.add_task("trainer", {"CPU": 2, "GPU": 4})
    state = cluster({f"n{i}": {"CPU": 4, "memory": 8, "GPU": 2} for i in range(3)})
    found = find_repairs(plan, state, timeout=30, adjustable_requests=["trainer"])
    assert [r.kind for r in found.repairs] == ["mixed"]
    (repair,) = found.repairs
    kinds = {c.kind for c in repair.changes}  # web 4 -> 3 or its separation relaxed: cost 1
    assert kinds in ({"intent", "request"}, {"replicas", "request"}) and repair.cost == 1.5
    assert repair.cheapest and repair.minimal
    fixed, fixed_state = apply_repair(plan, state, repair)
    assert check_placement(fixed, fixed_state, repair.witness) == []
    assert any(n.startswith("replicas: none") for n in found.notes)
