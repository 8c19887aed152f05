"""Could any set of live nodes ever hold a gang? (Node totals only: labels can be created.)"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from escher.core.resources import Resources

#: Placement search steps before a gang is assumed to fit (it then waits, as Ray does).
SEARCH_LIMIT = 20_000


def gang_unfit_reason(
    members: Sequence[Resources], nodes: Mapping[str, Resources], strategy: str
) -> str | None:
    """Why no assignment of `members` to `nodes` (by total) obeys `strategy`; None if one may.

    ``STRICT_PACK`` needs one node for all, ``STRICT_SPREAD`` a distinct node per member,
    ``PACK`` and ``SPREAD`` any assignment within the nodes' totals.
    """
    if not members:
        return None
    if strategy == "STRICT_PACK":
        need = Resources._trusted({})
        for member in members:
            need = need + member
        if any(need.fits_in(total) for total in nodes.values()):
            return None
        return f"no live node has the gang's whole request {need.to_dict()} (STRICT_PACK)"
    distinct = strategy == "STRICT_SPREAD"
    if distinct and len(members) > len(nodes):
        return f"STRICT_SPREAD needs {len(members)} nodes; {len(nodes)} are alive"
    order = sorted(range(len(members)), key=lambda i: -sum(members[i].values()))
    free = {node: dict(total.items()) for node, total in nodes.items()}
    budget = [SEARCH_LIMIT]
    if _place([members[i] for i in order], free, distinct, set(), budget) or budget[0] <= 0:
        return None
    spread = " on distinct nodes" if distinct else ""
    return f"the live nodes' totals cannot hold all {len(members)} members{spread}"


def _place(
    members: list[Resources],
    free: dict[str, dict[str, float]],
    distinct: bool,
    used: set[str],
    budget: list[int],
) -> bool:
    if not members:
        return True
    budget[0] -= 1
    if budget[0] <= 0:
        return False
    first, rest = members[0], members[1:]
    for node, left in free.items():
        if (distinct and node in used) or not all(
            left.get(k, 0.0) + 1e-9 >= q for k, q in first.items()
        ):
            continue
        for k, q in first.items():
            left[k] = left.get(k, 0.0) - q
        used.add(node)
        ok = _place(rest, free, distinct, used, budget)
        used.discard(node)
        for k, q in first.items():
            left[k] += q
        if ok or budget[0] <= 0:
            return ok
    return False
