"""Promises a per-node limit makes across co-located groups: groups that cannot share a node.

A limit of `k` tasks per node (an `AntiAffinity(per_node=k)`, a `LoadBalance`) shared by
co-located groups of sizes `a` and `b` with ``a + b > k`` keeps the two groups on different
nodes. That promise is stated as a `Separated` intent over one single-replica task of each
group, so the verifier proves it by name.
"""

from __future__ import annotations

import itertools

from escher.core.plan import Colocated, Intent, Plan, Separated, SpreadAtMost


def separate_groups(plan: Plan) -> list[Intent]:
    """The `Separated` intents the plan's per-node limits imply for its co-located groups."""
    groups = [
        intent
        for intent in plan.intents
        if isinstance(intent, Colocated) and intent.topology_key is None and not intent.preferred
    ]
    found: list[Intent] = []
    if len(groups) < 2:
        return found
    count = {t.name: t.count for t in plan.tasks}
    for limit_intent in plan.intents:
        limit = _limit(limit_intent)
        if limit is None:
            continue
        covered = set(limit_intent.tasks)
        inside = _distinct([g for g in groups if set(g.tasks) <= covered])
        sizes = [sum(count[t] for t in g.tasks) for g in inside]
        reps = [next((t for t in g.tasks if count[t] == 1), None) for g in inside]
        members = [
            (g, size, rep)
            for g, size, rep in zip(inside, sizes, reps, strict=True)
            if rep is not None
        ]
        apart = [
            (a, b)
            for a, b in itertools.combinations(members, 2)
            if a[1] + b[1] > limit and not set(a[0].tasks) & set(b[0].tasks)
        ]
        if not apart:
            continue
        pairs = len(members) * (len(members) - 1) // 2
        if len(apart) == pairs:  # every two groups: one intent over all of them
            found.append(_apart(limit_intent, [m[0] for m in members], [m[2] for m in members]))
        else:
            found.extend(_apart(limit_intent, [a[0], b[0]], [a[2], b[2]]) for a, b in apart)
    return found


def _limit(intent: Intent) -> int | None:
    if intent.preferred or getattr(intent, "topology_key", None) is not None:
        return None
    if isinstance(intent, SpreadAtMost):
        return intent.per_node
    if isinstance(intent, Separated):
        return 1
    return None


def _distinct(groups: list[Colocated]) -> list[Colocated]:
    seen: set[tuple[str, ...]] = set()
    out = []
    for group in groups:
        key = tuple(sorted(group.tasks))
        if key not in seen:
            seen.add(key)
            out.append(group)
    return out


def _apart(limit: Intent, groups: list[Colocated], reps: list[str | None]) -> Separated:
    names = ", ".join(g.source or ", ".join(g.tasks) for g in groups)
    return Separated(
        tuple(r for r in reps if r is not None),
        source=f"{limit.source}: groups never share a node ({names})",
    )
