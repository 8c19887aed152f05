"""Repairs on generated infeasible plans, against the independent checker and brute force.

For every repair `find_repairs` returns: applied, the plan is feasible with the repair's
witness (the independent checker, `check_placement`, accepts it); removing any one of its
changes leaves the plan infeasible (exhaustive enumeration says so); and no cheaper set of
changes of the same kind makes the plan feasible (every one is enumerated, each decided by
enumerating placements: no verifier involved). A kind reported "none" has no repair among
small changes either.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.plan import Colocated, Plan, Separated, SpreadAtMost, SpreadEvenly
from escher.core.resources import Resources
from escher.verify import Verdict, apply_repair, check_placement, find_repairs, verify
from escher.verify.repair import KINDS, ChangeKind, Conflict, Draft
from escher.verify.repair._kinds import Base, Key, Mixed
from tests.verify._oracle import feasible


@st.composite
def instances(draw: st.DrawFn) -> tuple[Plan, ClusterState]:
    nodes = [
        {
            "id": f"n{i}",
            "total": {"CPU": draw(st.integers(1, 4)), "GPU": draw(st.integers(0, 2))},
            "labels": {"zone": draw(st.sampled_from("ab"))},
        }
        for i in range(draw(st.integers(1, 3)))
    ]
    plan = Plan()
    n_tasks = draw(st.integers(1, 2))
    for t in range(n_tasks):
        request = {"CPU": draw(st.integers(1, 3))}
        gpu = draw(st.integers(0, 2))
        if gpu:
            request["GPU"] = gpu
        plan.add_task(f"t{t}", request, count=draw(st.integers(1, 3)))
    names = [t.name for t in plan.tasks]
    intent = draw(st.sampled_from(["none", "separated", "spread", "colocated", "even", "label"]))
    if intent == "separated":
        plan.add_intent(Separated((names[0],), source=f"AntiAffinity({names[0]})"))
    elif intent == "spread":
        plan.add_intent(SpreadAtMost(tuple(names), source="LoadBalance", per_node=1))
    elif intent == "colocated" and len(names) == 2:
        plan.add_intent(Colocated(tuple(names), source="CoLocation"))
    elif intent == "even":
        plan.add_intent(SpreadEvenly((names[0],), source="Spread(zone)", topology_key="zone"))
    elif intent == "label":  # an ESL's anti-affinity: a label of capacity 1 on each node
        plan.add_resource("aa", 1, {"CPU": 1}, source="AntiAffinity()")
        first = plan.tasks[0]
        plan.tasks[0] = replace(first, resources=Resources({**first.resources, "aa": 1}))
        plan.add_intent(Separated((first.name,), source="AntiAffinity()"))
    return plan, ClusterState.from_dict({"nodes": nodes})


def all_keys(kind: ChangeKind, base: Base, plan: Plan) -> list[Key]:
    """Every key of `kind` on the plan (a conflict of every statement and resource)."""
    ids = {f"task:{t.name}" for t in plan.tasks} | {f"intent:{i}" for i in range(len(plan.intents))}
    ids |= {f"cap:{r}@any" for t in plan.tasks for r in t.resources}
    everything = Conflict(frozenset(ids), tuple(range(len(plan.intents))))
    keys = kind.keys(base, everything)
    if isinstance(kind, Mixed):
        return [(k.name, key) for k in kind.kinds.values() for key in all_keys(k, base, plan)]
    if kind.name == "node":  # every node, not only one of each class
        resources = sorted({r for t in plan.tasks for r in t.resources} - {"aa"})
        keys = [(n, r) for n in base.state.nodes for r in resources]
    return keys


def states(
    kind: ChangeKind, base: Base, keys: list[Key], bound: float, cap: int
) -> Iterator[dict[Key, int]]:
    """Every compatible set of levels (at most `cap` per key) costing less than `bound`."""

    def grow(i: int, chosen: dict[Key, int], spent: float) -> Iterator[dict[Key, int]]:
        if chosen:
            yield dict(chosen)
        for j in range(i, len(keys)):
            key = keys[j]
            if not kind.compatible(chosen, key):
                continue
            for level in range(1, min(kind.top(base, key), cap) + 1):
                cost = spent + kind.cost(base, key, level)
                if cost >= bound - 1e-9:
                    break
                chosen[key] = level
                yield from grow(j + 1, chosen, cost)
                del chosen[key]

    yield from grow(0, {}, 0.0)


def changed(kind: ChangeKind, base: Base, levels: dict[Key, int]) -> tuple[Plan, ClusterState]:
    draft = Draft(base.plan, base.state)
    for key, level in levels.items():
        kind.change(base, key, level).edit(draft)
    plan, state, _ = draft.build()
    return plan, state


@settings(
    max_examples=int(os.environ.get("REPAIR_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(instances())
def test_repairs_are_checked_minimal_and_cheapest(instance: tuple[Plan, ClusterState]) -> None:
    plan, state = instance
    result = verify(plan, state, check_intents=False)
    if result.status is not Verdict.INFEASIBLE:
        return
    assert not feasible(plan, state)
    found = find_repairs(plan, state, result, timeout=20, adjustable_requests=True)
    base = Base(plan, state, None)
    by_kind = {r.kind: r for r in found.repairs}
    assert len(by_kind) == len(found.repairs), "one repair per kind"
    assert [r.cost for r in found.repairs] == sorted(r.cost for r in found.repairs)
    for repair in found.repairs:
        fixed_plan, fixed_state = apply_repair(plan, state, repair)
        assert check_placement(fixed_plan, fixed_state, repair.witness) == [], repair.render()
        assert repair.minimal
        for i in range(len(repair.changes)):  # no change can be removed
            draft = Draft(plan, state)
            for j, change in enumerate(repair.changes):
                if j != i:
                    change.edit(draft)
            less_plan, less_state, _ = draft.build()
            assert not feasible(less_plan, less_state), (repair.render(), i)
    every: dict[str, ChangeKind] = {**KINDS, "mixed": Mixed(KINDS.values())}
    for name, kind in every.items():
        keys = all_keys(kind, base, plan)
        repair = by_kind.get(name)
        if repair is not None and repair.cheapest:
            for levels in states(kind, base, keys, repair.cost, cap=8):
                assert not feasible(*changed(kind, base, levels)), (repair.render(), levels)
        note = next((n for n in found.notes if n.startswith(f"{name}:")), "not searched: time")
        if repair is None and "time" not in note:  # "none", "no change ... touches"
            for levels in states(kind, base, keys, 3.5, cap=3):
                assert not feasible(*changed(kind, base, levels)), (name, levels)
    proven = [n for n in found.notes if ": proven cheapest" in n]
    assert len(proven) == sum(r.cheapest for r in found.repairs)
