"""Intents the resource model settles without a solver (`explain/_structural.py`): proven
where the argument holds, left to the scenarios (and agreeing with enumeration) where not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from escher.core.cluster import ClusterState
from escher.core.plan import Colocated, Plan, Separated
from escher.verify import IntentStatus, verify
from escher.verify.explain._structural import settled_by_creation
from tests.verify._oracle import intent_outcome

ROOT = Path(__file__).resolve().parents[2]


def _state(n: int = 3, extra: dict[str, float] | None = None) -> ClusterState:
    nodes = [{"id": f"n{i}", "total": {"CPU": 8}} for i in range(n)]
    nodes[0]["total"].update(extra or {})
    return ClusterState.from_dict({"nodes": nodes})


def _group(
    first_count: int = 1,
    members: int = 2,
    cpu: float = 1,
    fallbacks: tuple[dict[str, float], ...] = (),
) -> Plan:
    """A CoLocation as the ESL writes it: one task creates the label, the members request it."""
    plan = Plan()
    plan.add_task("first", {"CPU": 1}, count=first_count, creates={"grp": members})
    plan.add_task("member", {"CPU": cpu, "grp": 1}, count=members, fallbacks=fallbacks)
    plan.add_intent(Colocated(("first", "member"), source="CoLocation('grp')"))
    return plan


def _only_result(plan: Plan, state: ClusterState) -> tuple[IntentStatus, str]:
    r = verify(plan, state, timeout=30).intents[0]
    assert r.status.value == intent_outcome(plan, state, r.intent)
    return r.status, r.detail


def test_one_creator_settles_the_group_and_names_the_label() -> None:
    status, detail = _only_result(_group(), _state())
    assert status is IntentStatus.PROVEN
    assert "'grp'" in detail and "'first'" in detail


@pytest.mark.parametrize(
    ("plan", "state"),
    [
        (_group(first_count=2), _state()),  # two creators: two nodes may hold the label
        (_group(), _state(extra={"grp": 4})),  # a node has the label already
        (_group(fallbacks=({"CPU": 1},)), _state()),  # a member may run without the label
    ],
    ids=["two-creators", "label-on-a-node", "fallback-without-label"],
)
def test_not_settled_where_the_argument_fails(plan: Plan, state: ClusterState) -> None:
    sub = plan  # the whole plan is the intent's sub-plan here
    labels = frozenset(r for n in state.nodes.values() for r in n.total)
    assert settled_by_creation(plan.intents[0], sub, labels) is None
    _only_result(plan, state)  # decided by the scenarios, as enumeration says


def test_a_planned_resource_of_the_label_is_another_source() -> None:
    plan = _group()
    plan.add_resource("grp", 1, {"CPU": 1})
    assert settled_by_creation(plan.intents[0], plan, frozenset({"CPU"})) is None
    _only_result(plan, _state())


def test_a_domain_key_or_another_intent_is_left_to_the_scenarios() -> None:
    plan = _group()
    keyed = Colocated(("first", "member"), topology_key="zone")
    assert settled_by_creation(keyed, plan, frozenset({"CPU"})) is None
    assert settled_by_creation(Separated(("member",)), plan, frozenset({"CPU"})) is None


def test_a_vacuous_group_stays_vacuous() -> None:
    plan = _group(cpu=9)  # no node has 9 CPUs
    assert settled_by_creation(plan.intents[0], plan, frozenset({"CPU"})) is not None
    status, _ = _only_result(plan, _state())
    assert status is IntentStatus.VACUOUS


def test_many_groups_reworded_per_group_from_the_cache() -> None:
    plan = Plan()
    for g in range(3):
        plan.add_task(f"f{g}", {"CPU": 1}, creates={f"grp{g}": 2})
        plan.add_task(f"m{g}", {"CPU": 1, f"grp{g}": 1}, count=2)
        plan.add_intent(Colocated((f"f{g}", f"m{g}")))
    result = verify(plan, _state(), timeout=30)
    for g, r in enumerate(result.intents):
        assert r.status is IntentStatus.PROVEN
        assert f"'grp{g}'" in r.detail and f"'f{g}'" in r.detail


def test_colocation_proofs_load_no_z3(tmp_path: Path) -> None:
    """The CoLocation of the bench's families is proven with the solver never imported."""
    plan, cluster = tmp_path / "plan.json", tmp_path / "cluster.json"
    plan.write_text(json.dumps(_group(members=3).to_dict()))
    cluster.write_text(
        json.dumps({"nodes": [{"id": f"n{i}", "total": {"CPU": 8}} for i in range(4)]})
    )
    code = (
        "import sys, json\nfrom escher.cli import main\n"
        f"sys.argv = ['escher', 'verify', {str(plan)!r}, '--cluster', {str(cluster)!r}, "
        "'--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print(json.dumps('z3' in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert json.loads(lines[-1]) is False
    data = json.loads("\n".join(lines[:-1]))
    assert [i["status"] for i in data["intents"]] == ["proven"]
