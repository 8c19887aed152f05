"""The decision pipeline: exact pre-checks, greedy witness, Z3 relaxation, exact Z3.

`decide` answers one (sub-)problem; `minimise` shrinks a conflicting set by deletion;
`intent_scenarios` turns "is there a placement violating this intent?" into sub-problems.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.plan import Colocated, Intent, PinnedTo, Plan, Separated, SpreadAtMost
from escher.verify import _patterns, _smt
from escher.verify._greedy import STRATEGIES, Placement, Timeout, check, greedy
from escher.verify._model import Mods, Problem, build


@dataclass
class Decision:
    """The answer for one problem."""

    status: str  # "feasible" | "infeasible" | "unknown"
    problem: Problem
    placement: Placement | None = None
    core: frozenset[str] = frozenset()
    method: str = ""
    reason: str = ""
    times: dict[str, float] = field(default_factory=dict)


def _precheck(p: Problem) -> tuple[str, frozenset[str]] | None:
    """Exact, cheap infeasibility proofs: (method, conflicting statement ids) or None."""
    nres = len(p.resources)
    for it in p.items:
        for lid, cnt in it.tags.items():
            lim, sid = p.limits[lid]
            if cnt > lim:
                return ("colocation vs separation", it.stmts | ({sid} if sid else set()))
        if it.allowed is not None and not it.allowed:
            return ("no allowed node", it.stmts | it.allowed_stmts)
    best_made: dict[int, int] = {}
    for it in p.items:
        for r, c in it.creates.items():
            best_made[r] = max(best_made.get(r, 0), c)
    all_types = set(range(len(p.types)))
    for it in p.items:
        needs = [max([it.single[r], *(load[r] for load in it.loads.values())]) for r in range(nres)]
        ok = False
        tset = all_types if it.allowed is None else {p.node_type[n] for n in it.allowed}
        for t in tset:
            nt = p.types[t]
            fits = True
            for r in range(nres):
                cr = nt.cap[r]
                if not needs[r] or cr is None:
                    continue
                if r in p.created:
                    cr = max(cr, best_made.get(r, 0) - nt.held[r])
                if needs[r] > cr:
                    fits = False
                    break
            if fits:
                ok = True
                break
        if not ok:
            cap_ids = {nt.capsrc[r] for nt in p.types for r in range(nres) if needs[r]}
            gangs = {sid for g in it.loads if (sid := p.groups[g]) is not None}
            return (
                "largest free slot",
                it.stmts | it.allowed_stmts | frozenset(cap_ids) | frozenset(gangs),
            )
    for g, gsid in p.groups.items():
        for r in range(nres):
            if r in p.created:
                continue
            demand = sum(it.loads[g][r] * it.mult for it in p.items if g in it.loads)
            if not demand:
                continue
            node_caps = [c[r] for c in p.cap]
            if any(c is None for c in node_caps):
                continue
            if demand > sum(c for c in node_caps if c is not None):
                stmts = {s for it in p.items if g in it.loads and it.loads[g][r] for s in it.stmts}
                stmts |= {nt.capsrc[r] for nt in p.types}
                if gsid:
                    stmts.add(gsid)
                return ("per-resource totals", frozenset(stmts))
    return None


def decide(
    plan: Plan,
    state: ClusterState,
    *,
    deadline: float,
    active: frozenset[str] | None = None,
    mods: Mods | None = None,
    memory_mb: int | None = None,
    want_core: bool = True,
    fast: bool = True,
) -> Decision:
    """Decide one problem. Never runs past `deadline` by more than one solver call's slack."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    p = build(plan, state, active=active, mods=mods)
    times["build"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    pre = _precheck(p) if fast else None
    times["precheck"] = time.perf_counter() - t0
    if pre is not None:
        return Decision("infeasible", p, core=pre[1], method=pre[0], times=times)
    try:
        t0 = time.perf_counter()
        for strategy in STRATEGIES if fast else ():
            placement = greedy(p, deadline=deadline, strategy=strategy)
            times["greedy"] = time.perf_counter() - t0
            if placement is not None and not check(p, placement):
                return Decision(
                    "feasible", p, placement, method=f"greedy witness ({strategy})", times=times
                )
        if time.monotonic() > deadline:
            raise Timeout
        t0 = time.perf_counter()
        status, data = _smt.relaxed(p, deadline, memory_mb)
        times["z3_relaxed"] = time.perf_counter() - t0
        reason = ""
        if status == "unsat":
            return Decision(
                "infeasible", p, core=frozenset(data), method="z3 (per node type)", times=times
            )
        if status == "sat" and fast:
            t0 = time.perf_counter()
            placement = greedy(p, targets=data, deadline=deadline, strategy="spread")
            times["pack"] = time.perf_counter() - t0
            if placement is not None and not check(p, placement):
                return Decision("feasible", p, placement, method="z3 counts + packing", times=times)
            reason = "the per-type solution did not pack into nodes"
            t0 = time.perf_counter()
            pstatus, targets = _patterns.solve(p, deadline, memory_mb)
            times["z3_patterns"] = time.perf_counter() - t0
            if pstatus == "sat" and targets is not None:
                placement = greedy(p, targets=targets, deadline=deadline, strategy="plain")
                if placement is not None and not check(p, placement):
                    return Decision(
                        "feasible", p, placement, method="z3 (node patterns)", times=times
                    )
            elif pstatus == "unsat":
                reason = "infeasible by node patterns"
        else:
            reason = str(data)
        if time.monotonic() > deadline:
            raise Timeout
        t0 = time.perf_counter()
        status, data = _smt.exact(p, deadline, memory_mb)
        times["z3_exact"] = time.perf_counter() - t0
        if status == "unsat":
            return Decision(
                "infeasible", p, core=frozenset(data), method="z3 (per node)", times=times
            )
        if status == "sat":
            placement = greedy(p, targets=data, deadline=None)
            if placement is not None and not check(p, placement):
                return Decision("feasible", p, placement, method="z3 (per node)", times=times)
            return Decision(
                "unknown",
                p,
                method="z3 (per node)",
                times=times,
                reason="internal: the exact model did not check",
            )
        return Decision("unknown", p, method="z3", times=times, reason=f"{reason}; {data}")
    except Timeout:
        return Decision("unknown", p, method="timeout", times=times, reason="time limit reached")


def _task_signature(plan: Plan, sid: str) -> Any:
    """Statements with equal signatures are interchangeable for minimisation."""
    if not sid.startswith("task:"):
        return sid
    name = sid[5:]
    if any(name in i.tasks for i in plan.intents):
        return sid
    t = plan.task(name)
    return ("task", t.resources, t.count, t.creates, t.concurrent)


def minimise(
    plan: Plan,
    state: ClusterState,
    core: frozenset[str],
    *,
    deadline: float,
    mods: Mods | None = None,
    memory_mb: int | None = None,
) -> tuple[frozenset[str], bool]:
    """Deletion-based minimisation. Returns (core, verified minimal)."""
    current = set(core)
    needed: set[Any] = set()  # signatures shown necessary
    order = sorted(current, key=lambda s: (not s.startswith("task:"), s))
    verified = True
    for sid in order:
        if sid not in current:
            continue
        sig = _task_signature(plan, sid)
        if sig in needed:
            continue
        if time.monotonic() > deadline:
            return frozenset(current), False
        trial = frozenset(current - {sid})
        d = decide(plan, state, deadline=deadline, active=trial, mods=mods, memory_mb=memory_mb)
        if d.status == "infeasible":
            current = set(d.core & trial) or set(trial)
        elif d.status == "feasible":
            needed.add(sig)
        else:
            verified = False
    # Symmetric statements were tested once; confirm that the result is still infeasible.
    d = decide(
        plan, state, deadline=deadline, active=frozenset(current), mods=mods, memory_mb=memory_mb
    )
    if d.status != "infeasible":
        return frozenset(core), False
    return frozenset(current), verified


def intent_scenarios(
    plan: Plan, intent: Intent, node_ids: list[str], limit: int = 200
) -> Iterator[Mods] | None:
    """Sub-problems whose feasibility means "some placement violates `intent`".

    Returns None for intents with no placement-level violation (gangs).
    """
    counts = {t.name: t.count for t in plan.tasks}
    names = list(dict.fromkeys(intent.tasks))

    def pairs() -> Iterator[tuple[dict[str, int], tuple[str, str]]]:
        for a, b in itertools.combinations_with_replacement(names, 2):
            if a == b:
                if counts[a] >= 2:
                    yield {a: 2}, (f"{a}#0", f"{a}#1")
            else:
                yield {a: 1, b: 1}, (f"{a}#0", f"{b}#0")

    def gen() -> Iterator[Mods]:
        produced = 0
        if isinstance(intent, Colocated):
            for split, (u, v) in pairs():
                yield Mods(split=split, apart=[(u, v)], drop_intents=True)
        elif isinstance(intent, Separated | SpreadAtMost):
            k = 1 if isinstance(intent, Separated) else intent.per_node
            pool = [n for n in names for _ in range(min(counts[n], k + 1))]
            seen: set[tuple[str, ...]] = set()
            for combo in itertools.combinations(pool, k + 1):
                if combo in seen:
                    continue
                seen.add(combo)
                produced += 1
                if produced > limit:
                    raise OverflowError
                together: dict[str, int] = {}
                for n in combo:
                    together[n] = together.get(n, 0) + 1
                units = [f"{n}#{j}" for n, c in together.items() for j in range(c)]
                yield Mods(split=together, merge=[tuple(units)], drop_intents=True)
        elif isinstance(intent, PinnedTo):
            for n in names:
                others = frozenset(nid for nid in node_ids if nid not in intent.nodes)
                yield Mods(split={n: 1}, only={f"{n}#0": others}, drop_intents=True)

    if not isinstance(intent, Colocated | Separated | SpreadAtMost | PinnedTo):
        return None
    return gen()
