"""Could a gang ever be held at once? Packing its members' requests into the nodes' capacities.

A gang waits while the cluster is busy, but one that no set of live nodes could ever hold
(even idle) must fail instead of waiting forever. Only node-defined resources count (CPU,
GPU, memory, ...): ephemeral labels can be created or grown later, so a request for them never
makes a gang impossible. The question is bin packing; gangs are small and nodes come in few
shapes, so an exhaustive search with symmetry pruning answers it exactly almost always, and
says "unknown" (keep waiting) when it runs out of budget.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from escher.core.resources import EPSILON, PREDEFINED_RESOURCES, Resources

#: Search steps before `gang_fit` gives up and answers "unknown".
DEFAULT_BUDGET = 20_000


@dataclass(frozen=True)
class Fit:
    """The answer of `gang_fit`.

    Attributes:
        possible: True (a packing exists), False (none can exist) or None (unknown: the
            search ran out of budget; treat the gang as possibly placeable).
        reason: Why not, in words, when `possible` is False.
    """

    possible: bool | None
    reason: str = ""


def node_defined(request: Resources, defined: Iterable[str]) -> Resources:
    """The part of `request` that nodes define (names some node defines, or predefined)."""
    names = set(defined) | PREDEFINED_RESOURCES
    return Resources._trusted({n: q for n, q in request.items() if n in names})


def gang_fit(
    requests: Sequence[Resources],
    capacities: Mapping[str, Mapping[str, float]],
    *,
    budget: int = DEFAULT_BUDGET,
) -> Fit:
    """Whether `requests` can all be held at once by nodes of `capacities` (when idle).

    Args:
        requests: Each member's request, node-defined part only (see `node_defined`).
        capacities: Node id -> node-defined totals of each live node.
        budget: Search steps before answering "unknown".

    Returns:
        A `Fit`; `Fit.reason` names the member or the resource that cannot fit.
    """
    members = [r for r in requests if r]
    if not members:
        return Fit(True) if capacities or not requests else Fit(False, "the cluster has no nodes")
    nodes = [dict(cap) for _, cap in sorted(capacities.items())]
    quick = _quick_checks(members, nodes)
    if quick is not None:
        return quick
    order = sorted(range(len(members)), key=lambda i: _size(members[i], nodes), reverse=True)
    search = _Search([members[i] for i in order], nodes, budget)
    found = search.place(0, 0)
    if found:
        return Fit(True)
    if search.steps > budget:
        return Fit(None)
    total = {name: sum(m.get(name, 0.0) for m in members) for name in _names(members)}
    return Fit(
        False,
        f"no way to place all {len(members)} members ({_show(total)} in all) on the "
        f"{len(nodes)} live nodes at once, even with nothing else running",
    )


def _quick_checks(members: list[Resources], nodes: list[dict[str, float]]) -> Fit | None:
    for index, member in enumerate(members):
        if not any(member.fits_in(node) for node in nodes):
            largest = {n: max((node.get(n, 0.0) for node in nodes), default=0.0) for n in member}
            return Fit(
                False,
                f"member {index} needs {_show(member)}, which no live node has "
                f"(the most any node has: {_show(largest)})",
            )
    for name in _names(members):
        need = sum(m.get(name, 0.0) for m in members)
        have = sum(node.get(name, 0.0) for node in nodes)
        if need > have + EPSILON:
            return Fit(
                False,
                f"the members need {need:g} {name} in all; the live nodes have {have:g}",
            )
    return None


def _names(members: list[Resources]) -> list[str]:
    return sorted({name for m in members for name in m})


def _show(values: Mapping[str, float]) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(values.items())) + "}"


def _size(member: Resources, nodes: list[dict[str, float]]) -> float:
    """The member's largest share of the largest capacity of each resource."""
    return max(q / max(max(node.get(n, 0.0) for node in nodes), EPSILON) for n, q in member.items())


class _Search:
    """Depth-first placement, biggest members first, trying each distinct node state once."""

    def __init__(self, members: list[Resources], nodes: list[dict[str, float]], budget: int):
        self.members = members
        self.free = nodes
        self.budget = budget
        self.steps = 0

    def place(self, index: int, first: int) -> bool:
        if index == len(self.members):
            return True
        self.steps += 1
        if self.steps > self.budget:
            return False
        member = self.members[index]
        same_as_previous = index > 0 and member == self.members[index - 1]
        tried: set[tuple[tuple[str, float], ...]] = set()
        for node_index in range(first if same_as_previous else 0, len(self.free)):
            node = self.free[node_index]
            if not member.fits_in(node):
                continue
            shape = tuple(sorted(node.items()))
            if shape in tried:
                continue  # an identical node was tried already: same outcome
            tried.add(shape)
            for name, quantity in member.items():
                node[name] -= quantity
            placed = self.place(index + 1, node_index)
            for name, quantity in member.items():
                node[name] += quantity
            if placed or self.steps > self.budget:
                return placed
        return False
