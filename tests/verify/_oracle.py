"""Exhaustive enumeration: the reference answer for small instances (no Z3, no _model)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from escher.core.cluster import ClusterState, Node
from escher.core.plan import Intent, Plan
from escher.core.resources import MAX_CAPACITY, Resources
from escher.verify import check_placement, intent_subplan, intent_violation


def placements(plan: Plan, state: ClusterState) -> Iterator[dict[str, list[str]]]:
    """Every placement (up to replica order) of every replica onto an alive node."""
    nodes = sorted(n for n, node in state.nodes.items() if node.alive)
    per_task = [list(itertools.combinations_with_replacement(nodes, t.count)) for t in plan.tasks]
    for combo in itertools.product(*per_task):
        yield {t.name: list(c) for t, c in zip(plan.tasks, combo, strict=True)}


def feasible(plan: Plan, state: ClusterState) -> bool:
    return any(not check_placement(plan, state, p) for p in placements(plan, state))


def intent_outcome(plan: Plan, state: ClusterState, intent: Intent) -> str:
    """'vacuous' | 'violated' | 'proven' by enumeration: over every placement of the intent's
    policy structure (`intent_subplan`: its tasks, their label creators, their planned
    resources, gangs among them) that the resources allow."""
    sub = intent_subplan(plan, intent)
    any_ok = False
    for p in placements(sub, state):
        if check_placement(sub, state, p, intents=False):
            continue
        any_ok = True
        if intent_violation(intent, p, state, plan.topologies):
            return "violated"
    return "proven" if any_ok else "vacuous"


def sub_instance(
    plan: Plan, state: ClusterState, keep: frozenset[str], types: dict[str, list[str]]
) -> tuple[Plan, ClusterState]:
    """The plan and state that keep only statements `keep` (dropped capacity = unbounded).

    `types` maps capacity statement ids to the node ids they cover.
    """
    sub = Plan(topologies={k: dict(v) for k, v in plan.topologies.items()})
    names = set()
    # Fix each planned resource's node selection as on the original cluster, so unbounding a
    # capacity does not change which nodes a resource-vector spec picks.
    current = dict(state.nodes)
    for i, res in enumerate(plan.resources):
        chosen = res.node_spec.select(ClusterState(current))
        cap = res.capacity if f"res:{i}" in keep else MAX_CAPACITY
        for nid in chosen:
            sub.add_resource(res.label, cap, nid, source=res.source)
            n = current[nid]
            used = max(0.0, n.total.get(res.label, 0.0) - n.available.get(res.label, 0.0))
            total = dict(n.total)
            avail = dict(n.available)
            total[res.label] = res.capacity
            avail[res.label] = max(0.0, res.capacity - used)
            current[nid] = Node(nid, Resources(total), Resources(avail), n.labels, n.alive)
    for t in plan.tasks:
        if f"task:{t.name}" in keep:
            sub.add_task(
                t.name,
                t.resources,
                count=t.count,
                creates={c.label: c.capacity for c in t.creates},
                concurrent=t.concurrent,
                source=t.source,
            )
            names.add(t.name)
    for i, intent in enumerate(plan.intents):
        if f"intent:{i}" in keep:
            tasks = tuple(n for n in intent.tasks if n in names)
            if tasks:
                sub.intents.append(type(intent)(**{**intent.__dict__, "tasks": tasks}))
    nodes = dict(state.nodes)
    for sid, ids in types.items():
        if sid in keep:
            continue
        resource = sid[4:].split("@", 1)[0]
        for nid in ids:
            n = nodes[nid]
            nodes[nid] = Node(
                nid,
                n.total + {resource: MAX_CAPACITY - n.total.get(resource, 0)},
                n.available + {resource: MAX_CAPACITY - n.available.get(resource, 0)},
                n.labels,
                n.alive,
                n.ephemeral,
            )
    return sub, ClusterState(nodes)


def cap_statement_nodes(plan: Plan, state: ClusterState) -> dict[str, list[str]]:
    from escher.verify.model._model import build

    p = build(plan, state)
    out: dict[str, list[str]] = {}
    for t in p.types:
        for sid in t.capsrc:
            if sid.startswith("cap:"):
                out.setdefault(sid, []).extend(p.node_ids[n] for n in t.nodes)
    return out


def assert_minimal_conflict(plan: Plan, state: ClusterState, core: frozenset[str]) -> None:
    """`core` (statement ids of `plan`) is infeasible alone, and feasible without any one."""
    types = cap_statement_nodes(plan, state)
    sub, sub_state = sub_instance(plan, state, core, types)
    assert not feasible(sub, sub_state), "the explanation alone must be infeasible"
    for sid in core:
        sub, sub_state = sub_instance(plan, state, core - {sid}, types)
        assert feasible(sub, sub_state), f"not minimal: dropping {sid} stays infeasible"


__all__ = [
    "Resources",
    "assert_minimal_conflict",
    "cap_statement_nodes",
    "feasible",
    "intent_outcome",
    "placements",
    "sub_instance",
]
