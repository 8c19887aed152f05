"""The independent checker: does a placement respect a plan on a cluster? No Z3, no `_model`.

It re-derives everything from the `Plan` and the `ClusterState` directly, in floats, so a bug
in the encoder or the search cannot vouch for itself.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

from escher.core.cluster import ClusterState
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    Separated,
    SpreadAtMost,
)

__all__ = ["check_placement", "intent_violation"]

_EPS = 1e-6


def _capacities(
    plan: Plan, state: ClusterState
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(available, held) per alive node after applying the planned resources in order."""
    avail: dict[str, dict[str, float]] = {}
    held: dict[str, dict[str, float]] = {}
    total: dict[str, dict[str, float]] = {}
    for nid in sorted(state.nodes):
        node = state.nodes[nid]
        if node.alive:
            avail[nid] = dict(node.available)
            total[nid] = dict(node.total)
    for res in plan.resources:
        spec = res.node_spec
        if spec.node_id is not None:
            chosen = [spec.node_id] if spec.node_id in avail else []
        else:
            chosen = []
            for nid in avail:
                if spec.having is not None:
                    ok = all(avail[nid].get(k, 0.0) + 1e-9 >= v for k, v in spec.having.items())
                elif spec.labels is not None:
                    labels = state.nodes[nid].labels
                    ok = all(labels.get(k) == v for k, v in spec.labels.items())
                else:
                    ok = False
                if ok:
                    chosen.append(nid)
            if spec.num_nodes is not None:
                chosen = chosen[: spec.num_nodes]
        for nid in chosen:
            in_use = max(0.0, total[nid].get(res.label, 0.0) - avail[nid].get(res.label, 0.0))
            total[nid][res.label] = res.capacity
            avail[nid][res.label] = max(0.0, res.capacity - in_use)
    for nid in avail:
        held[nid] = {
            k: max(0.0, total[nid].get(k, 0.0) - avail[nid].get(k, 0.0)) for k in total[nid]
        }
    return avail, held


def intent_violation(
    intent: Intent, placement: Mapping[str, Sequence[str]], state: ClusterState
) -> str | None:
    """Why `placement` violates `intent`, or None if it satisfies it."""
    spots = [(t, i, n) for t in intent.tasks for i, n in enumerate(placement.get(t, ()))]
    if isinstance(intent, Colocated):
        nodes = {n for _, _, n in spots}
        if len(nodes) > 1:
            return f"{intent.describe()}: replicas on {len(nodes)} nodes {sorted(nodes)}"
    elif isinstance(intent, Separated | SpreadAtMost):
        limit = 1 if isinstance(intent, Separated) else intent.per_node
        per = Counter(n for _, _, n in spots)
        for n, k in sorted(per.items()):
            if k > limit:
                who = [f"{t}[{i}]" for t, i, m in spots if m == n]
                return f"{intent.describe()}: {', '.join(who)} share node {n!r}"
    elif isinstance(intent, PinnedTo):
        for t, i, n in spots:
            if n not in intent.nodes:
                return f"{intent.describe()}: {t}[{i}] runs on {n!r}"
    elif isinstance(intent, Gang):
        return None  # all-or-nothing is a launch property; fitting together is a capacity check
    return None


def check_placement(
    plan: Plan,
    state: ClusterState,
    placement: Mapping[str, Sequence[str]],
    *,
    intents: bool = True,
) -> list[str]:
    """Every way `placement` breaks `plan` on `state` (empty list: it is valid).

    Args:
        plan: The plan.
        state: The cluster snapshot (alive nodes, their *available* resources).
        placement: Task name -> the node id of each replica.
        intents: Also require every declared intent (gangs always count as groups that must
            fit together).
    """
    errors: list[str] = []
    avail, held = _capacities(plan, state)
    tasks = {t.name: t for t in plan.tasks}
    for name in placement:
        if name not in tasks:
            errors.append(f"placement names unknown task {name!r}")
    for t in plan.tasks:
        nodes = list(placement.get(t.name, ()))
        if len(nodes) != t.count:
            errors.append(f"task {t.name!r}: {len(nodes)} replicas placed, needs {t.count}")
        for n in nodes:
            if n not in avail:
                errors.append(f"task {t.name!r}: no alive node {n!r}")
    if errors:
        return errors

    # Capacities with task creations.
    cap: dict[str, dict[str, float]] = {n: dict(a) for n, a in avail.items()}
    made: dict[str, dict[str, float]] = defaultdict(dict)
    for t in plan.tasks:
        for n in placement[t.name]:
            for c in t.creates:
                made[n][c.label] = max(made[n].get(c.label, 0.0), c.capacity)
    for n, labels in made.items():
        for label, made_cap in labels.items():
            cap[n][label] = max(0.0, made_cap - held[n].get(label, 0.0))

    gangs = [set(i.tasks) for i in plan.intents if isinstance(i, Gang)]
    groups: list[tuple[str, set[str]]] = [
        ("concurrent tasks", {t.name for t in plan.tasks if t.concurrent})
    ]
    groups += [(f"gang {sorted(g)}", g) for g in gangs]
    in_group = set().union(*(g for _, g in groups))
    for label, members in groups:
        load: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for name in members:
            t = tasks[name]
            for n in placement[name]:
                for r, q in t.resources.items():
                    load[n][r] += q
        for n, vec in sorted(load.items()):
            for r, q in sorted(vec.items()):
                if q > cap[n].get(r, 0.0) + _EPS:
                    errors.append(
                        f"node {n!r}: {label} need {q:g} {r}, it has {cap[n].get(r, 0.0):g}"
                    )
    for t in plan.tasks:
        if t.name in in_group:
            continue
        for i, n in enumerate(placement[t.name]):
            for r, q in t.resources.items():
                if q > cap[n].get(r, 0.0) + _EPS:
                    errors.append(
                        f"task {t.name!r}[{i}] needs {q:g} {r} on {n!r}, "
                        f"which has {cap[n].get(r, 0.0):g}"
                    )
    if intents:
        for intent in plan.intents:
            why = intent_violation(intent, placement, state)
            if why:
                errors.append(why)
    return errors
