"""The independent checker: does a placement respect a plan on a cluster? No Z3, no `_model`.

It re-derives everything from the `Plan` and the `ClusterState` directly, in floats, so a bug
in the encoder or the search cannot vouch for itself.
"""

from __future__ import annotations

import itertools
import operator
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from escher.core.resources import Resources

if TYPE_CHECKING:  # annotations only
    from escher.core.plan import PlannedResource, PlannedTask

__all__ = ["check_placement", "intent_violation"]

_name = operator.attrgetter("name")
_count = operator.attrgetter("count")
_concurrent = operator.attrgetter("concurrent")


def _capacities(
    plan: Plan, state: ClusterState
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(available, held) per alive node after applying the planned resources in order
    (nodes of a group share their dicts: read them, never change them).

    Nodes that start alike (availability, totals, labels) and were picked by the same
    planned resources so far share one entry: a resource picks or skips them together
    unless it names a node or a number of nodes.
    """
    alive = sorted(nid for nid, node in state.nodes.items() if node.alive)
    shared: dict[tuple[tuple[tuple[str, Any], ...], ...], list[str]] = {}
    for nid in alive:
        node = state.nodes[nid]
        key = tuple(tuple(sorted(v.items())) for v in (node.available, node.total, node.labels))
        shared.setdefault(key, []).append(nid)
    # A group: its nodes (in id order), their labels, availability and totals.
    groups = [
        (
            nids,
            state.nodes[nids[0]].labels,
            dict(state.nodes[nids[0]].available),
            dict(state.nodes[nids[0]].total),
        )
        for nids in shared.values()
    ]
    for res in plan.resources:
        groups = _apply(res, groups)
    avail: dict[str, dict[str, float]] = {}
    held: dict[str, dict[str, float]] = {}
    for nids, _labels, a, tot in groups:
        h = {k: max(0.0, tot.get(k, 0.0) - a.get(k, 0.0)) for k in tot}
        for nid in nids:
            avail[nid], held[nid] = a, h
    return {nid: avail[nid] for nid in alive}, {nid: held[nid] for nid in alive}


_Group = tuple[list[str], Mapping[str, str], dict[str, float], dict[str, float]]


def _picked(spec: NodeSpec, groups: list[_Group]) -> Sequence[set[str] | bool]:
    """Per group: True (all its nodes), False (none) or the nodes `spec` picks."""
    if spec.node_id is not None:
        return [{spec.node_id} if spec.node_id in nids else False for nids, *_ in groups]
    hit = [_selects(spec, labels, a) for _, labels, a, _ in groups]
    if spec.num_nodes is None:
        return hit
    first = set(
        sorted(n for g, ok in zip(groups, hit, strict=True) if ok for n in g[0])[: spec.num_nodes]
    )
    return [first & set(g[0]) if ok else False for g, ok in zip(groups, hit, strict=True)]


def _apply(res: PlannedResource, groups: list[_Group]) -> list[_Group]:
    """The groups after one planned resource (a group it picks in part is split)."""
    out: list[_Group] = []
    for (nids, labels, a, tot), picked in zip(groups, _picked(res.node_spec, groups), strict=True):
        if isinstance(picked, bool):
            mine, rest = (nids, []) if picked else ([], nids)
        else:
            mine = [n for n in nids if n in picked]
            rest = [n for n in nids if n not in picked]
        if rest:
            out.append((rest, labels, a, tot))
        if mine:
            a2, t2 = dict(a), dict(tot)
            in_use = max(0.0, tot.get(res.label, 0.0) - a.get(res.label, 0.0))
            t2[res.label] = res.capacity
            a2[res.label] = max(0.0, res.capacity - in_use)
            out.append((mine, labels, a2, t2))
    return out


def _selects(spec: NodeSpec, labels: Mapping[str, str], avail: Mapping[str, float]) -> bool:
    if spec.having is not None:
        return spec.having.fits_in(avail)
    if spec.labels is not None:
        return all(labels.get(k) == v for k, v in spec.labels.items())
    return False


def _domain(
    plan_topologies: Mapping[str, Mapping[str, str]], state: ClusterState, key: str, node: str
) -> str | None:
    n = state.nodes.get(node)
    if n is None:
        return None
    if key in plan_topologies:
        return plan_topologies[key].get(node)
    value = n.labels.get(key)
    return None if value is None else str(value)


def _all_domains(
    plan_topologies: Mapping[str, Mapping[str, str]], state: ClusterState, key: str | None
) -> set[str]:
    out: set[str] = set()
    for nid, n in state.nodes.items():
        if n.alive:
            d = nid if key is None else _domain(plan_topologies, state, key, nid)
            if d is not None:
                out.add(d)
    return out


def _where(key: str | None, d: object) -> str:
    return f"node {d!r}" if key is None else f"{key!r} domain {d!r}"


def _limit_violation(
    intent: Separated | SpreadAtMost, spots: list[tuple[str, int, str | None]], key: str | None
) -> str | None:
    limit = 1 if isinstance(intent, Separated) else intent.per_node
    per = Counter(d for _, _, d in spots)
    for d, k in sorted(per.items(), key=lambda x: str(x[0])):
        if k > limit:
            who = [f"{t}[{i}]" for t, i, m in spots if m == d]
            return f"{intent.describe()}: {', '.join(who)} share {_where(key, d)}"
    return None


def _even_violation(
    intent: SpreadEvenly, spots: list[tuple[str, int, str | None]], doms: set[str]
) -> str | None:
    counts = Counter(d for _, _, d in spots)
    if not doms:
        return None
    hi = max(doms, key=lambda d: (counts.get(d, 0), d))
    lo = min(doms, key=lambda d: (counts.get(d, 0), d))
    if counts.get(hi, 0) - counts.get(lo, 0) > intent.max_skew:
        return (
            f"{intent.describe()}: {counts.get(hi, 0)} in {hi!r} but {counts.get(lo, 0)} in {lo!r}"
        )
    return None


def intent_violation(
    intent: Intent,
    placement: Mapping[str, Sequence[str]],
    state: ClusterState,
    topologies: Mapping[str, Mapping[str, str]] | None = None,
) -> str | None:
    """Why `placement` violates `intent`, or None if it satisfies it.

    `topologies` are the plan's own groupings (`Plan.topologies`), which override node labels.
    A gang is never violated here: all-or-nothing is a launch property, and fitting together
    is a capacity check.
    """
    topo = topologies or {}
    key = getattr(intent, "topology_key", None)
    spots = [
        (t, i, n if key is None else _domain(topo, state, key, n))
        for t in intent.tasks
        for i, n in enumerate(placement.get(t, ()))
    ]
    if key is not None:
        for t, i, d in spots:
            if d is None:
                return (
                    f"{intent.describe()}: {t}[{i}] runs on {placement[t][i]!r}, "
                    f"in no {key!r} domain"
                )
    if isinstance(intent, Colocated):
        where = {d for _, _, d in spots}
        if len(where) > 1:
            unit = "nodes" if key is None else f"{key!r} domains"
            return f"{intent.describe()}: replicas in {len(where)} {unit} {sorted(map(str, where))}"
    elif isinstance(intent, Separated | SpreadAtMost):
        return _limit_violation(intent, spots, key)
    elif isinstance(intent, SpreadEvenly):
        return _even_violation(intent, spots, _all_domains(topo, state, key))
    elif isinstance(intent, PinnedTo):
        for t, i, node in spots:
            if node not in intent.nodes:
                return f"{intent.describe()}: {t}[{i}] runs on {node!r}"
    return None


def _count_errors(
    plan: Plan, placement: Mapping[str, Sequence[str]], alive: Mapping[str, object]
) -> list[str]:
    counts = dict(zip(map(_name, plan.tasks), map(_count, plan.tasks), strict=True))
    if placement.keys() == counts.keys():  # the usual case, in whole-list passes
        placed = list(map(placement.__getitem__, counts))
        used = set(itertools.chain.from_iterable(placed))
        if list(map(len, placed)) == list(counts.values()) and used.issubset(alive):
            return []
    errors = [f"placement names unknown task {n!r}" for n in placement if n not in counts]
    used = set()
    for name, count in counts.items():
        nodes = placement.get(name, ())
        if len(nodes) != count:
            errors.append(f"task {name!r}: {len(nodes)} replicas placed, needs {count}")
        used.update(nodes)
    if not used.issubset(alive):
        for name in counts:
            nodes = placement.get(name, ())
            errors.extend(f"task {name!r}: no alive node {n!r}" for n in nodes if n not in alive)
    return errors


def _with_creations(
    plan: Plan,
    placement: Mapping[str, Sequence[str]],
    avail: dict[str, dict[str, float]],
    held: dict[str, dict[str, float]],
) -> dict[str, dict[str, float]]:
    """Per node capacities once the tasks placed there created their labels."""
    cap: dict[str, dict[str, float]] = dict(avail)
    made: dict[str, dict[str, float]] = defaultdict(dict)
    for t in [t for t in plan.tasks if t.creates]:
        for n in placement[t.name]:
            for c in t.creates:
                made[n][c.label] = max(made[n].get(c.label, 0.0), c.capacity)
    for n, labels in made.items():
        cap[n] = dict(avail[n])  # its own copy: the group's dict is shared
        for label, made_cap in labels.items():
            cap[n][label] = max(0.0, made_cap - held[n].get(label, 0.0))
    return cap


def _loads(
    placement: Mapping[str, Sequence[str]], tasks: list[PlannedTask]
) -> dict[str, dict[str, float]]:
    """Per node, what `tasks` placed there request together (replicas with one request are
    counted first: a plan written one entry per task costs what replicas cost)."""
    by_request: dict[int, list[str]] = defaultdict(list)
    request: dict[int, Resources] = {}
    for t in tasks:
        key = id(t.resources)
        request[key] = t.resources
        by_request[key].extend(placement[t.name])
    load: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for key, nodes in by_request.items():
        items = list(request[key].items())
        for n, k in Counter(nodes).items():
            vec = load[n]
            for r, q in items:
                vec[r] += q * k
    return load


def _group_errors(
    plan: Plan, placement: Mapping[str, Sequence[str]], cap: dict[str, dict[str, float]]
) -> tuple[list[str], set[str]]:
    """Simultaneous groups (all concurrent tasks; each gang) over a node's capacity; and the
    names of the tasks in a gang."""
    gangs = [set(i.tasks) for i in plan.intents if isinstance(i, Gang) and not i.preferred]
    groups: list[tuple[str, list[PlannedTask]]] = [
        ("concurrent tasks", list(itertools.compress(plan.tasks, map(_concurrent, plan.tasks))))
    ]
    groups += [(f"gang {sorted(g)}", [plan.task(name) for name in g]) for g in gangs]
    errors: list[str] = []
    for label, members in groups:
        load = _loads(placement, members)
        for n, vec in sorted(load.items()):
            for r, q in sorted(Resources(vec).shortfall(cap[n]).items()):
                errors.append(
                    f"node {n!r}: {label} need {vec[r]:g} {r}, it has {cap[n].get(r, 0.0):g}"
                    f" ({q:g} short)"
                )
    return errors, set().union(*gangs)


def check_placement(
    plan: Plan,
    state: ClusterState,
    placement: Mapping[str, Sequence[str]],
    *,
    intents: bool = True,
) -> list[str]:
    """Every way `placement` breaks `plan` on `state` (empty list: it is valid).

    "Fits" is `Resources.fits_in` (one tolerance, `escher.core.resources.EPSILON`), as the
    backends' matchers use it.

    Args:
        plan: The plan.
        state: The cluster snapshot (alive nodes, their *available* resources).
        placement: Task name -> the node id of each replica.
        intents: Also require every declared intent that is not a preference (gangs always
            count as groups that must fit together).
    """
    avail, held = _capacities(plan, state)
    errors = _count_errors(plan, placement, avail)
    if errors:
        return errors
    cap = _with_creations(plan, placement, avail, held)
    errors, ganged = _group_errors(plan, placement, cap)
    for t in [t for t in plan.tasks if not t.concurrent]:
        if t.name in ganged:
            continue
        for i, n in enumerate(placement[t.name]):
            if not t.resources.fits_in(cap[n]):
                errors.append(
                    f"task {t.name!r}[{i}] needs {t.resources.to_dict()} on {n!r}, which has "
                    f"{ {r: cap[n].get(r, 0.0) for r in t.resources} }"
                )
    if intents:
        for intent in plan.intents:
            if intent.preferred:
                continue  # a preference never makes a placement invalid
            why = intent_violation(intent, placement, state, plan.topologies)
            if why:
                errors.append(why)
    return errors
