"""From a problem's placement to the user's terms, and the independent check of a witness."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify._check import check_placement
from escher.verify._problem import Problem

#: Per item: the node index of each of its `mult` copies.
Placement = list[list[int]]


def to_witness(p: Problem, placement: Placement) -> dict[str, list[str]]:
    """Task name -> the node id of each replica (units dealt back to their tasks)."""
    per_unit: dict[str, list[str]] = {}
    for it, spots in zip(p.items, placement, strict=True):
        for n in spots:
            node = p.node_ids[n]
            for unit, reps in it.members:
                per_unit.setdefault(unit, []).extend([node] * reps)
    out: dict[str, list[str]] = {}
    for unit, nodes in per_unit.items():
        pos = 0
        for task, count in p.units.get(unit, [(unit, len(nodes))]):
            got = nodes[pos : pos + count]
            if task in out:  # split into several units
                out[task].extend(got)
            else:
                out[task] = got
            pos += count
    return {k: sorted(v) if len(v) > 1 else v for k, v in sorted(out.items())}


def witness_problems(
    plan: Plan, state: ClusterState, witness: Mapping[str, Sequence[str]], *, intents: bool = True
) -> list[str]:
    """What the independent checker finds wrong with `witness` (empty: accepted)."""
    return check_placement(plan, state, witness, intents=intents)
