"""From a problem's placement to the user's terms, and the independent check of a witness."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.check._check import check_placement
from escher.verify.model import Problem

#: Per item: the node index of each of its `mult` copies.
Placement = list[list[int]]


def _per_unit(p: Problem, placement: Placement) -> dict[str, list[str]]:
    """Unit -> the node id of each of its replicas (item copy by copy)."""
    per_unit: dict[str, list[str]] = {}
    node_of = p.node_ids.__getitem__
    for it, spots in zip(p.items, placement, strict=True):
        nodes = list(map(node_of, spots))
        for unit, reps in it.members:
            got = per_unit.setdefault(unit, [])
            if reps == 1:
                got += nodes
            else:
                for node in nodes:
                    got += [node] * reps
    return per_unit


def to_witness(p: Problem, placement: Placement) -> dict[str, list[str]]:
    """Task name -> the node id of each replica (units dealt back to their tasks), sorted
    by task name, each task's nodes sorted."""
    out: dict[str, list[str]] = {}
    several: set[str] = set()  # tasks with more than one replica
    for unit, nodes in _per_unit(p, placement).items():
        members = p.units.get(unit, [(unit, len(nodes))])
        if len(members) == len(nodes):  # one replica each (a plan of single entries)
            for (task, _), node in zip(members, nodes, strict=True):
                got = out.get(task)
                if got is None:
                    out[task] = [node]
                else:
                    got.append(node)
                    several.add(task)
            continue
        pos = 0
        for task, count in members:
            got = out.get(task)
            if got is None:
                out[task] = nodes[pos : pos + count]
            else:  # split into several units
                got += nodes[pos : pos + count]
            if count > 1 or got is not None:
                several.add(task)
            pos += count
    for task in several:
        out[task].sort()
    return dict(sorted(out.items()))


def witness_problems(
    plan: Plan, state: ClusterState, witness: Mapping[str, Sequence[str]], *, intents: bool = True
) -> list[str]:
    """What the independent checker finds wrong with `witness` (empty: accepted)."""
    return check_placement(plan, state, witness, intents=intents)
