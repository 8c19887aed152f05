"""Shrink a conflicting set of statements to a minimal one, within a deadline.

Deletion-based: a statement stays only if the rest is feasible without it. Tasks of one shape
(same request, creations, concurrency, in no intent) form a family: keeping the j
largest of a family is monotone in j, so a binary search finds how many are needed in
O(log n) decisions instead of n. Every decision gets a fair share of the time left; on the
deadline the set found so far is returned, marked not minimal.
"""

from __future__ import annotations

import time
from collections.abc import Hashable

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.engines import decide
from escher.verify.model import Mods


def _families(plan: Plan, core: set[str]) -> tuple[list[list[str]], list[str]]:
    """Interchangeable task statements (largest count first) and the other statements."""
    named = {n for i in plan.intents for n in i.tasks}
    fams: dict[Hashable, list[str]] = {}
    rest: list[str] = []
    for sid in sorted(core):
        name = sid[5:] if sid.startswith("task:") else None
        if name is None or name in named:
            rest.append(sid)
            continue
        t = plan.task(name)
        fams.setdefault((t.resources, t.creates, t.concurrent), []).append(sid)
    counts = {t.name: t.count for t in plan.tasks}
    out = [sorted(f, key=lambda s: (-counts[s[5:]], s)) for f in fams.values()]
    return out, rest


class _Shrink:
    def __init__(
        self,
        plan: Plan,
        state: ClusterState,
        core: frozenset[str],
        deadline: float,
        mods: Mods | None,
        memory_mb: int | None,
    ) -> None:
        self.plan = plan
        self.state = state
        self.current = set(core)
        self.deadline = deadline
        self.mods = mods
        self.memory_mb = memory_mb
        self.verified = True
        self.pending = 1

    def infeasible(self, trial: set[str]) -> bool | None:
        """True/False, or None when undecided within its share of the time."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        until = time.monotonic() + max(left / max(self.pending, 1), min(left, 0.05))
        d = decide(
            self.plan,
            self.state,
            deadline=min(until, self.deadline),
            active=frozenset(trial),
            mods=self.mods,
            memory_mb=self.memory_mb,
            side_by_side=False,  # many short sub-decisions: cheaper in this process
        )
        if d.status == "infeasible":
            smaller = d.core & trial
            if smaller:
                self.current = set(smaller)
            return True
        if d.status == "feasible":
            return False
        self.verified = False
        return None

    def family(self, fam: list[str]) -> None:
        """Keep the fewest of `fam` (largest first) that stay infeasible with the rest."""
        fam = [s for s in fam if s in self.current]
        if not fam:
            return
        others = self.current - set(fam)
        lo, hi = 0, len(fam)  # hi: known infeasible keeping hi members
        while lo < hi:
            mid = (lo + hi) // 2
            got = self.infeasible(others | set(fam[:mid]))
            if got:
                hi = mid
                others = self.current - set(fam)
            else:
                lo = mid + 1
                if got is None:
                    break
        keep = set(fam[:hi])
        self.current = {s for s in self.current if s not in fam or s in keep}

    def single(self, sid: str) -> None:
        if sid not in self.current:
            return
        if self.infeasible(self.current - {sid}):
            self.current.discard(sid)


def minimise(
    plan: Plan,
    state: ClusterState,
    core: frozenset[str],
    *,
    deadline: float,
    mods: Mods | None = None,
    memory_mb: int | None = None,
) -> tuple[frozenset[str], bool]:
    """(a conflicting set within `core`, True when verified minimal)."""
    s = _Shrink(plan, state, core, deadline, mods, memory_mb)
    fams, rest = _families(plan, set(core))
    s.pending = len(fams) + len(rest) + 1
    try:
        for fam in fams:
            s.family(fam)
            s.pending -= 1
        for sid in rest:
            s.single(sid)
            s.pending -= 1
        creators = any(t.creates for t in plan.tasks)
        if creators and not s.infeasible(set(s.current)):
            # Dropping a task that creates a label can make the rest harder, not easier:
            # the shrunk set did not stay infeasible, so fall back to the original.
            return core, False
    except TimeoutError:
        return frozenset(s.current), False
    return frozenset(s.current), s.verified
