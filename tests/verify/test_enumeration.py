"""Agreement with exhaustive enumeration on thousands of small random instances."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.nodespec import NodeSpec
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.verify import IntentStatus, Verdict, check_placement, intent_subplan, verify
from tests.verify._oracle import (
    assert_minimal_conflict,
    cap_statement_nodes,
    feasible,
    intent_outcome,
    sub_instance,
)

NODE_SHAPES = [{"CPU": 2}, {"CPU": 4}, {"CPU": 2, "GPU": 1}, {"CPU": 4, "GPU": 2}, {"CPU": 1}]


@st.composite
def instances(draw: st.DrawFn) -> tuple[Plan, ClusterState]:
    n_nodes = draw(st.integers(1, 3))
    nodes = []
    for i in range(n_nodes):
        total = dict(draw(st.sampled_from(NODE_SHAPES)))
        avail = dict(total)
        if draw(st.booleans()):
            avail["CPU"] = max(0, total["CPU"] - draw(st.integers(0, 2)))
        nodes.append(
            {
                "id": f"n{i}",
                "total": total,
                "available": avail,
                "labels": {"zone": draw(st.sampled_from("ab"))},
            }
        )
    state = ClusterState.from_dict({"nodes": nodes})
    plan = Plan()
    specs = [
        {"CPU": 1},
        {"GPU": 1},
        "n0",
        NodeSpec.with_labels({"zone": "a"}),
        NodeSpec.with_available({"CPU": 1}, num_nodes=2),
        NodeSpec.with_labels({"zone": "b"}, num_nodes=1),
    ]
    for _ in range(draw(st.integers(0, 2))):  # a second one overrides the first where both go
        spec = draw(st.sampled_from(specs))
        plan.add_resource("anti", draw(st.integers(1, 2)), spec, source="AntiAffinity")
    replicas = 0
    n_tasks = draw(st.integers(1, 3))
    for j in range(n_tasks):
        count = draw(st.integers(1, 2 if replicas < 3 else 1))
        replicas += count
        req: dict[str, float] = {"CPU": draw(st.sampled_from([0, 0.5, 1, 2, 3]))}
        if draw(st.integers(0, 3)) == 0:
            req["GPU"] = 1
        if plan.resources and draw(st.booleans()):
            req["anti"] = 1
        creates = None
        if j == 0 and draw(st.integers(0, 3)) == 0:
            creates = {"grp": draw(st.integers(1, 3))}
        elif j > 0 and draw(st.integers(0, 4)) == 0:
            req["grp"] = 1
        plan.add_task(
            f"t{j}",
            req,
            count=count,
            creates=creates,
            concurrent=draw(st.integers(0, 3)) > 0,
            source=f"esl-{j}",
        )
        if replicas >= 4:
            break
    names = [t.name for t in plan.tasks]
    if draw(st.integers(0, 3)) == 0:  # an escher-defined grouping, maybe leaving a node out
        plan.add_topology(
            "rack",
            {
                f"n{i}": draw(st.sampled_from(["r1", "r2"]))
                for i in range(n_nodes)
                if i or draw(st.booleans())
            },
        )
    for _ in range(draw(st.integers(0, 2))):
        tasks = tuple(sorted(set(draw(st.lists(st.sampled_from(names), min_size=1, max_size=2)))))
        plan.add_intent(draw(_intent(tasks)))
    return plan, state


@st.composite
def _intent(draw: st.DrawFn, tasks: tuple[str, ...]) -> Intent:
    kind = draw(st.sampled_from(["col", "sep", "spread", "pin", "gang", "even"]))
    key = draw(st.sampled_from([None, None, "zone", "rack"]))
    weight = draw(st.sampled_from([0.0, 0.0, 0.0, 2.0]))
    if kind == "col":
        return Colocated(tasks, source="CoLocation", topology_key=key, weight=weight)
    if kind == "sep":
        return Separated(tasks, source="AntiAffinity", topology_key=key, weight=weight)
    if kind == "spread":
        per = draw(st.integers(1, 2))
        return SpreadAtMost(
            tasks, source="LoadBalance", per_node=per, topology_key=key, weight=weight
        )
    if kind == "even":
        return SpreadEvenly(
            tasks,
            source="Spread",
            topology_key=key,
            max_skew=draw(st.integers(1, 2)),
            weight=weight,
        )
    if kind == "pin":
        return PinnedTo(tasks, source="DataLocality", nodes=("n0",), weight=weight)
    return Gang(tasks, source="Gang")


SETTINGS = settings(
    max_examples=1500, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)


@SETTINGS
@given(instances())
def test_verdict_agrees_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    plan, state = inst
    result = verify(plan, state, timeout=30, check_intents=False)
    expected = feasible(plan, state)
    assert result.status is (Verdict.FEASIBLE if expected else Verdict.INFEASIBLE), result.render()
    if expected:
        assert result.witness is not None
        assert check_placement(plan, state, result.witness) == []
    else:
        assert result.explanation is not None and result.explanation.minimal
        assert_minimal_conflict(plan, state, result.explanation.ids)


@settings(
    max_examples=700, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(instances())
def test_intent_results_agree_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    plan, state = inst
    result = verify(plan, state, timeout=30)
    assert len(result.intents) == sum(1 for i in plan.intents if not i.preferred)
    assert len(result.preferences) == (
        sum(1 for i in plan.intents if i.preferred) if result.feasible else 0
    )
    for r in result.intents:
        expected = intent_outcome(plan, state, r.intent)
        if r.intent.kind == "gang" and expected != "vacuous":
            expected = "proven"
        assert r.status.value == expected, (r, result.render())
        if r.status is IntentStatus.VIOLATED:
            assert r.counterexample is not None
            sub = intent_subplan(plan, r.intent)
            assert check_placement(sub, state, r.counterexample, intents=False) == []


@settings(
    max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(instances())
def test_z3_encodings_alone_agree_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    """Without pre-checks and greedy search, the Z3 encodings alone decide correctly."""
    import time

    from escher.verify.check._witness import to_witness as _to_witness
    from escher.verify.engines._engine import decide

    plan, state = inst
    d = decide(plan, state, deadline=time.monotonic() + 300, fast=False)  # ms; load-proof
    expected = feasible(plan, state)
    assert d.status == ("feasible" if expected else "infeasible"), d
    if expected:
        assert d.placement is not None
        assert check_placement(plan, state, _to_witness(d.problem, d.placement)) == []
    else:
        assert d.method.startswith("z3")
        sub, sub_state = sub_instance(plan, state, d.core, cap_statement_nodes(plan, state))
        assert not feasible(sub, sub_state), "the unsat core alone must be infeasible"
