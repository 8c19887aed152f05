"""The pure part of `why`: one request against one cluster snapshot. No backend, no I/O.

A node can take a request when every requested resource is available there. For a request
no node can take, each node has a set of *blockers* (the requested resources it lacks), and
an explanation is a set of requirements that meets every node's blockers: a hitting set.
`minimal_hitting_set` returns one of the smallest it can find (exact for small sizes, then
greedy), always minimal: no element can be dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from escher.core.cluster import ClusterState, Node
from escher.core.resources import EPSILON, PREDEFINED_RESOURCES, Resources
from escher.esl import LabelNote
from escher.explain._result import (
    YOUR_REQUEST,
    Breakdown,
    Capacity,
    Conflict,
    NodeCheck,
    Requirement,
)

#: Exact search for a smallest hitting set tries at most this many combinations.
EXACT_BUDGET = 20_000


def physical_names(state: ClusterState) -> frozenset[str]:
    """Resources the nodes define themselves (plus the predefined names, CPU, GPU, ...)."""
    names: set[str] = set(PREDEFINED_RESOURCES)
    for node in state.nodes.values():
        names.update(name for name in node.total if name not in node.ephemeral)
    return frozenset(names)


def shortfalls(request: Resources, have: Mapping[str, float]) -> list[str]:
    """The names of `request` that `have` does not cover, in request order."""
    return [name for name, q in request.items() if have.get(name, 0.0) + EPSILON < q]


def minimal_hitting_set(sets: Sequence[frozenset[str]]) -> list[str]:
    """A minimal set of names that meets every set of `sets` (all non-empty).

    Smallest sizes are searched exactly while the number of combinations stays within
    `EXACT_BUDGET`; beyond that a greedy choice is pruned until no name can be dropped.
    Names are preferred by how many sets they meet, then by name (deterministic).
    """
    unique = list(dict.fromkeys(sets))
    if not unique:
        return []
    coverage: dict[str, int] = {}
    for group in unique:
        for name in group:
            coverage[name] = coverage.get(name, 0) + 1
    order = sorted(coverage, key=lambda n: (-coverage[n], n))
    tried = 0
    for size in range(1, len(order) + 1):
        for combo in itertools.combinations(order, size):
            tried += 1
            if tried > EXACT_BUDGET:
                return _greedy(unique, order)
            chosen = set(combo)
            if all(group & chosen for group in unique):
                return list(combo)
    return _greedy(unique, order)  # pragma: no cover - the full set always hits


def _greedy(unique: list[frozenset[str]], order: list[str]) -> list[str]:
    chosen: list[str] = []
    left = list(unique)
    while left:
        best = max(order, key=lambda n: (sum(1 for g in left if n in g), -order.index(n)))
        chosen.append(best)
        left = [g for g in left if best not in g]
    for name in list(reversed(chosen)):  # prune: drop what the others already cover
        rest = set(chosen) - {name}
        if all(group & rest for group in unique):
            chosen.remove(name)
    return chosen


def requirements(
    request: Resources, physical: frozenset[str], notes: Mapping[str, LabelNote]
) -> dict[str, Requirement]:
    """Each requested resource with the policy that asked for it (labels) or the user."""
    out: dict[str, Requirement] = {}
    for name, quantity in request.items():
        note = notes.get(name)
        label = name not in physical
        out[name] = Requirement(
            resource=name,
            quantity=quantity,
            source=note.source if note is not None else YOUR_REQUEST,
            label=label,
            meaning=note.meaning if note is not None else "",
        )
    return out


def _reason(req: Requirement, node: Node) -> str:
    owner = f" ({req.source})" if req.label and req.source != YOUR_REQUEST else ""
    if req.label and req.resource not in node.total:
        return f"lacks label {req.resource}{owner}"
    return f"Insufficient {req.resource}{owner}"


@dataclass
class Analysis:
    """One request against one snapshot.

    Attributes:
        requirements: Each requested resource and who asked for it.
        fits: Nodes that can take the request now.
        breakdown: Per node, what keeps it out.
        never: True if no alive node's node-defined resources could ever hold it.
        conflict: For a request no node takes now (or ever): the minimal conflict, over
            the resources that are not created later by a policy.
        waits_for: Labels created later by a policy that are all that keeps some node out.
    """

    requirements: dict[str, Requirement]
    fits: list[str] = field(default_factory=list)
    breakdown: Breakdown = field(default_factory=lambda: Breakdown(()))
    never: bool = False
    conflict: Conflict | None = None
    waits_for: list[str] = field(default_factory=list)


def _conflict(
    blockers: dict[str, list[str]],
    reqs: Mapping[str, Requirement],
    nodes: Mapping[str, Node],
    *,
    on_total: bool = False,
) -> Conflict:
    chosen = minimal_hitting_set([frozenset(b) for b in blockers.values()])
    rank = {name: i for i, name in enumerate(chosen)}
    capacities = []
    for node_id, names in blockers.items():
        name = min((n for n in names if n in rank), key=rank.__getitem__)
        node = nodes[node_id]
        total = node.total.get(name, 0.0)
        if on_total:
            total = node.physical.get(name, 0.0)
        available = total if on_total else node.available.get(name, 0.0)
        capacities.append(Capacity(node_id, name, reqs[name].quantity, total, available))
    return Conflict(tuple(reqs[n] for n in chosen), tuple(capacities))


def analyse(
    request: Resources, state: ClusterState, notes: Mapping[str, LabelNote] | None = None
) -> Analysis:
    """Check `request` against every node of `state`; explain what keeps it out.

    Args:
        request: The task's request.
        state: The snapshot.
        notes: Label -> what the policy that owns it says (`ESL.contribution`).
    """
    notes = notes or {}
    physical = physical_names(state)
    reqs = requirements(request, physical, notes)
    alive = {nid: state.nodes[nid] for nid in sorted(state.nodes) if state.nodes[nid].alive}
    checks = [NodeCheck(nid, ("node is not alive",)) for nid in sorted(state.nodes)]
    checks = [c for c in checks if c.node not in alive]
    blockers: dict[str, list[str]] = {}
    for nid, node in alive.items():
        lacking = shortfalls(request, node.available)
        checks.append(NodeCheck(nid, tuple(_reason(reqs[n], node) for n in lacking)))
        if lacking:
            blockers[nid] = lacking
    result = Analysis(reqs, [nid for nid in alive if nid not in blockers])
    result.breakdown = Breakdown(tuple(sorted(checks, key=lambda c: c.node)))
    if result.fits:
        return result
    hard = Resources({n: q for n, q in request.items() if n in physical})
    on_total = {nid: shortfalls(hard, node.physical) for nid, node in alive.items()}
    if all(on_total.values()):  # also true with no alive node at all
        result.never = True
        if on_total:
            result.conflict = _conflict(on_total, reqs, alive, on_total=True)
        return result
    later = {n for n in request if n in notes and notes[n].later}
    rest = {nid: [n for n in names if n not in later] for nid, names in blockers.items()}
    open_nodes = [nid for nid, names in rest.items() if not names]
    if open_nodes:
        result.waits_for = [n for n in request if any(n in blockers[v] for v in open_nodes)]
        return result
    result.conflict = _conflict(rest, reqs, alive)
    return result
