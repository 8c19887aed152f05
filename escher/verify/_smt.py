"""Z3 encodings of a `Problem`, every constraint guarded by its statements' literals.

* `relaxed`: integer counts per (class of identical items, node type). Each type's nodes are
  summed, with valid per-node cuts (largest multiple that fits one node), so UNSAT proves the
  real problem infeasible; SAT gives per-type counts for `greedy` to pack into real nodes.
* `exact`: integer counts per (class, node), used only for small problems.

Both return ("sat", counts) | ("unsat", core statement ids) | ("unknown", reason).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import z3

from escher.verify._greedy import classes
from escher.verify._model import Item, Problem

#: Largest class x node product the exact encoding accepts.
EXACT_LIMIT = 6000

Outcome = tuple[str, Any]


class _Lits:
    def __init__(self, ctx: z3.Context) -> None:
        self.ctx = ctx
        self.lits: dict[str, z3.BoolRef] = {}

    def __call__(self, sid: str | None) -> z3.BoolRef | None:
        if sid is None:
            return None
        if sid not in self.lits:
            self.lits[sid] = z3.Bool(f"s{len(self.lits)}", self.ctx)
        return self.lits[sid]

    def all(self, sids: Sequence[str | None]) -> z3.BoolRef | None:
        got = [x for x in (self(s) for s in sids) if x is not None]
        if not got:
            return None
        return got[0] if len(got) == 1 else z3.And(*got)

    def any(self, sids: Sequence[str | None]) -> z3.BoolRef | None:
        got = [x for x in (self(s) for s in sids) if x is not None]
        if not got:
            return None
        return got[0] if len(got) == 1 else z3.Or(*got)


def _guard(s: z3.Solver, cond: z3.BoolRef | None, fact: z3.BoolRef) -> None:
    s.add(fact if cond is None else z3.Implies(cond, fact))


def _solver(ctx: z3.Context, deadline: float, memory_mb: int | None) -> z3.Solver:
    s = z3.SolverFor("QF_LIA", ctx=ctx)
    ms = max(1, int((deadline - time.monotonic()) * 1000))
    s.set("timeout", ms)
    if memory_mb:
        z3.set_param("memory_max_size", int(memory_mb))
    return s


def _run(s: z3.Solver, lits: _Lits) -> str:
    assumptions = list(lits.lits.values())
    res = s.check(*assumptions)
    if res == z3.sat:
        return "sat"
    if res == z3.unsat:
        return "unsat"
    return "unknown:" + str(s.reason_unknown())


def _core(s: z3.Solver, lits: _Lits) -> set[str]:
    back = {str(v): k for k, v in lits.lits.items()}
    return {back[str(x)] for x in s.unsat_core()}


def _item_fits_type_alone(p: Problem, it: Item, t: int) -> list[int]:
    """Resources on which one copy of `it` cannot fit any node of type `t` (ever)."""
    nt = p.types[t]
    best_made: dict[int, int] = {}
    for other in p.items:
        for r, c in other.creates.items():
            best_made[r] = max(best_made.get(r, 0), c - nt.held[r])
    short = []
    for r in range(len(p.resources)):
        need = max([it.single[r], *(load[r] for load in it.loads.values())])
        if not need:
            continue
        cr = nt.cap[r]
        if cr is None:
            continue
        eff = max(cr, best_made.get(r, 0)) if r in p.created else cr
        if need > eff:
            short.append(r)
    return short


def _class_row(
    p: Problem, s: z3.Solver, lits: _Lits, idxs: list[int], names: list[str]
) -> list[z3.ArithRef]:
    """One count variable per name for a class of identical items; they sum to its size
    (an item whose statements are dropped counts 0)."""
    ctx = s.ctx
    row = [z3.Int(name, ctx) for name in names]
    for v in row:
        s.add(v >= 0)
    count = z3.Sum(
        [
            z3.If(g, p.items[i].mult, 0)
            if (g := lits.all(sorted(p.items[i].stmts))) is not None
            else z3.IntVal(p.items[i].mult, ctx)
            for i in idxs
        ]
    )
    s.add(z3.Sum(row) == count)
    return row


def relaxed(p: Problem, deadline: float, memory_mb: int | None = None) -> Outcome:
    """The per-type aggregated encoding (a relaxation: UNSAT is a proof)."""
    ctx = z3.Context()
    lits = _Lits(ctx)
    s = _solver(ctx, deadline, memory_mb)
    cls = list(classes(p).values())
    nt_count = len(p.types)
    x: list[list[z3.ArithRef]] = []
    for ci, idxs in enumerate(cls):
        it = p.items[idxs[0]]
        row = _class_row(p, s, lits, idxs, [f"x{ci}_{t}" for t in range(nt_count)])
        x.append(row)
        for t in range(nt_count):
            nodes = p.types[t].nodes
            if it.allowed is not None and not any(n in it.allowed for n in nodes):
                _guard(s, lits.all(sorted(it.allowed_stmts)), row[t] == 0)
            short = _item_fits_type_alone(p, it, t)
            if short:
                _guard(s, lits.any([p.types[t].capsrc[r] for r in short]), row[t] == 0)
            for lid, cnt in it.tags.items():
                lim, sid = p.limits[lid]
                if cnt > lim:
                    _guard(s, lits(sid), row[t] == 0)
        if time.monotonic() > deadline:
            return ("unknown", "timeout while building the model")
    for t, nt in enumerate(p.types):
        m = len(nt.nodes)
        for g, gsid in p.groups.items():
            for r in range(len(p.resources)):
                raw = [(p.items[idxs[0]].loads.get(g), ci) for ci, idxs in enumerate(cls)]
                terms = [(load[r], ci) for load, ci in raw if load is not None and load[r]]
                kcap = nt.cap[r]
                if not terms or kcap is None:
                    continue
                cond = lits.all([nt.capsrc[r], gsid])
                lhs = z3.Sum([q * x[ci][t] for q, ci in terms])
                if r in p.created:
                    extra = [
                        max(0, p.items[idxs[0]].creates[r] - nt.held[r]) * x[ci][t]
                        for ci, idxs in enumerate(cls)
                        if r in p.items[idxs[0]].creates
                    ]
                    _guard(s, cond, lhs <= m * kcap + z3.Sum(extra) if extra else lhs <= m * kcap)
                    continue
                _guard(s, cond, lhs <= m * kcap)
                for q in sorted({q for q, _ in terms}, reverse=True)[:6]:
                    # Per node: sum floor(q_c / q) * n_c <= floor(cap / q). Valid, and it
                    # catches fragmentation that the summed capacity misses.
                    cut = [(qq // q, ci) for qq, ci in terms if qq // q]
                    _guard(s, cond, z3.Sum([a * x[ci][t] for a, ci in cut]) <= m * (kcap // q))
        for lid, (lim, sid) in p.limits.items():
            terms2 = [
                (p.items[idxs[0]].tags[lid], ci)
                for ci, idxs in enumerate(cls)
                if lid in p.items[idxs[0]].tags
            ]
            if terms2:
                _guard(s, lits(sid), z3.Sum([a * x[ci][t] for a, ci in terms2]) <= lim * m)
        if time.monotonic() > deadline:
            return ("unknown", "timeout while building the model")
    res = _run(s, lits)
    if res == "unsat":
        return ("unsat", _core(s, lits))
    if res != "sat":
        return ("unknown", res.split(":", 1)[1] or "solver gave up")
    model = s.model()
    counts: dict[int, list[tuple[list[int], int]]] = {}
    for ci, idxs in enumerate(cls):
        per_type = [model.eval(x[ci][t], model_completion=True).as_long() for t in range(nt_count)]
        # Hand the class's copies out to its items, type by type.
        pool = [(t, k) for t, k in enumerate(per_type) if k > 0]
        for i in idxs:
            need = p.items[i].mult
            jobs: list[tuple[list[int], int]] = []
            while need and pool:
                t, k = pool[0]
                take = min(k, need)
                jobs.append((p.types[t].nodes, take))
                need -= take
                pool[0] = (t, k - take)
                if pool[0][1] == 0:
                    pool.pop(0)
            counts[i] = jobs
    return ("sat", counts)


def exact(p: Problem, deadline: float, memory_mb: int | None = None) -> Outcome:
    """Per-node counts (exact); only for problems under `EXACT_LIMIT`."""
    cls = list(classes(p).values())
    nn = len(p.node_ids)
    if len(cls) * nn > EXACT_LIMIT:
        return ("unknown", f"too large for the exact encoding ({len(cls)} classes x {nn} nodes)")
    ctx = z3.Context()
    lits = _Lits(ctx)
    s = _solver(ctx, deadline, memory_mb)
    nres = len(p.resources)
    y: list[list[z3.ArithRef]] = []
    for ci, idxs in enumerate(cls):
        it = p.items[idxs[0]]
        row = _class_row(p, s, lits, idxs, [f"y{ci}_{n}" for n in range(nn)])
        y.append(row)
        for n in range(nn):
            if it.allowed is not None and n not in it.allowed:
                _guard(s, lits.all(sorted(it.allowed_stmts)), row[n] == 0)
            for lid, cnt in it.tags.items():
                lim, sid = p.limits[lid]
                if cnt > lim:
                    _guard(s, lits(sid), row[n] == 0)
    creators = [
        (ci, p.items[idxs[0]].creates) for ci, idxs in enumerate(cls) if p.items[idxs[0]].creates
    ]

    def cap_expr(n: int, r: int) -> Any:
        base = p.cap[n][r]
        if r not in p.created:
            return None if base is None else z3.IntVal(base, ctx)
        mine = sorted(((c[r], ci) for ci, c in creators if r in c))
        expr: Any = z3.IntVal(base, ctx) if base is not None else None
        for c, ci in mine:
            val = z3.IntVal(max(0, c - p.held[n][r]), ctx)
            if expr is None:
                expr = z3.If(y[ci][n] >= 1, val, z3.IntVal(10**18, ctx))
            else:
                expr = z3.If(y[ci][n] >= 1, val, expr)
        return expr

    for n in range(nn):
        caps = [cap_expr(n, r) for r in range(nres)]
        for g, gsid in p.groups.items():
            for r in range(nres):
                raw = [(p.items[idxs[0]].loads.get(g), ci) for ci, idxs in enumerate(cls)]
                terms = [(load[r], ci) for load, ci in raw if load is not None and load[r]]
                if not terms or caps[r] is None:
                    continue
                cond = lits.all([p.cap_stmt(n, r), gsid])
                _guard(s, cond, z3.Sum([q * y[ci][n] for q, ci in terms]) <= caps[r])
        for ci, idxs in enumerate(cls):
            it = p.items[idxs[0]]
            for r in range(nres):
                if it.single[r] and caps[r] is not None:
                    _guard(
                        s,
                        lits(p.cap_stmt(n, r)),
                        z3.Implies(y[ci][n] >= 1, caps[r] >= it.single[r]),
                    )
        for lid, (lim, sid) in p.limits.items():
            terms2 = [
                (p.items[idxs[0]].tags[lid], ci)
                for ci, idxs in enumerate(cls)
                if lid in p.items[idxs[0]].tags
            ]
            if terms2:
                _guard(s, lits(sid), z3.Sum([a * y[ci][n] for a, ci in terms2]) <= lim)
        if time.monotonic() > deadline:
            return ("unknown", "timeout while building the model")
    res = _run(s, lits)
    if res == "unsat":
        return ("unsat", _core(s, lits))
    if res != "sat":
        return ("unknown", res.split(":", 1)[1] or "solver gave up")
    model = s.model()
    counts: dict[int, list[tuple[list[int], int]]] = {}
    for ci, idxs in enumerate(cls):
        spots: list[int] = []
        for n in range(nn):
            spots.extend([n] * model.eval(y[ci][n], model_completion=True).as_long())
        pos = 0
        for i in idxs:
            m = p.items[i].mult
            counts[i] = [([n], 1) for n in spots[pos : pos + m]]
            pos += m
    return ("sat", counts)
