"""Stage 1 of `build`: per resource, the integer unit that makes every quantity exact."""

from __future__ import annotations

import math

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.core.resources import EPSILON
from escher.verify.model._facts import PlanFacts


def _decimals(x: float) -> int:
    """The fewest decimals (at most 9) that write `x` exactly (up to float noise)."""
    if x == 0:
        return 0
    for k in range(10):
        v = x * 10**k
        if round(v) and abs(v - round(v)) <= 1e-9 * abs(v):
            return k
    return 9


def _state_digits(state: ClusterState) -> dict[str, int]:
    """Per resource name, the decimals the alive nodes' quantities need (cached per state)."""
    for known, digits in _state_memo:
        if known is state:
            return digits
    digits = {}
    for node in state.nodes.values():
        if node.alive:
            for vec in (node.available, node.total):
                for name, q in vec.items():
                    if digits.get(name, 0) < 9:
                        digits[name] = max(digits.get(name, 0), _decimals(q))
    _state_memo.insert(0, (state, digits))
    del _state_memo[4:]
    return digits


_state_memo: list[tuple[ClusterState, dict[str, int]]] = []


def scales(plan: Plan, state: ClusterState, rnames: list[str], facts: PlanFacts) -> list[int]:
    """Per resource, the power of ten (at most 1e9) that makes its quantities integers."""
    wanted = set(rnames)
    nodes = _state_digits(state)
    digits = {r: nodes.get(r, 0) for r in rnames}

    def see(name: str, q: float) -> None:
        if name in wanted and digits[name] < 9:
            digits[name] = max(digits[name], _decimals(q))

    for req in facts.requests:
        for name, q in req.items():
            see(name, q)
    for c in facts.creations:
        see(c.label, c.capacity)
    for res in plan.resources:
        see(res.label, res.capacity)
    return [10 ** digits[r] for r in rnames]


def to_units(q: float, scale: int) -> int:
    """A quantity in integer units of 1/`scale`."""
    return round(q * scale)


def cap_units(q: float, scale: int) -> int:
    """A capacity in integer units, with `EPSILON`'s tolerance (as `Resources.fits_in`)."""
    return round(q * scale) + math.floor(EPSILON * scale + 1e-12)
