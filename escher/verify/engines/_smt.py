"""Z3 encodings of a `Problem`, every constraint guarded by its statements' literals.

One encoding, over "bins" that are either node types or single nodes:

* `relaxed`: integer counts per (class of identical items, node type). A type's nodes are
  summed, with valid per-node cuts (for each size q: sum floor(q_c / q) n_c <= floor(cap / q)),
  so UNSAT proves the real problem infeasible; SAT gives per-type counts to pack into nodes.
  Domain rules are exact here: a type lies in one domain of every key.
* `exact`: integer counts per (class, node), used only for small problems.

Both return ("sat", targets) | ("unsat", core statement ids) | ("unknown", reason).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import z3

from escher.verify.engines._greedy import classes
from escher.verify.model import Item, Problem, Rule

#: Largest class x node product the exact encoding accepts.
EXACT_LIMIT = 6000

#: Size cuts per (node type, resource) in the relaxation.
CUTS = 6

Outcome = tuple[str, Any]

#: A class whose items come from more statements than this gets one assumption literal (a
#: plan written one entry per task then costs what replicas cost).
FAMILY_ITEMS = 8


class _Lits:
    """One assumption literal per statement id."""

    def __init__(self, ctx: z3.Context) -> None:
        self.ctx = ctx
        self.lits: dict[str, z3.BoolRef] = {}
        self.families: dict[str, frozenset[str]] = {}

    def family(self, sids: Iterable[str]) -> z3.BoolRef:
        """One literal for the statements of many interchangeable items (its place in an
        unsat core stands for all of them; minimisation then finds how many are needed)."""
        key = f"family:{len(self.families)}"
        self.families[key] = frozenset(sids)
        lit = self(key)
        assert lit is not None
        return lit

    def expand(self, keys: Iterable[str]) -> set[str]:
        """Statement ids behind literals' keys."""
        out: set[str] = set()
        for k in keys:
            out |= self.families.get(k, {k})
        return out

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


@dataclass
class _Bin:
    nodes: list[int]
    t: int

    @property
    def m(self) -> int:
        return len(self.nodes)


@dataclass
class _Enc:
    p: Problem
    s: z3.Solver
    lits: _Lits
    cls: list[list[int]]
    bins: list[_Bin]
    exact: bool
    x: list[list[z3.ArithRef]] = field(default_factory=list)
    nums: dict[int, z3.ArithRef] = field(default_factory=dict)

    @property
    def ctx(self) -> z3.Context:
        return self.s.ctx

    @property
    def ref(self) -> Any:
        return self.s.ctx.ref()

    def rep(self, ci: int) -> Item:
        return self.p.items[self.cls[ci][0]]

    def guard(self, cond: z3.BoolRef | None, fact: z3.BoolRef) -> None:
        """Assert `fact`, under `cond` when there is one (as ``Implies(cond, fact)``)."""
        if cond is not None:
            fact = z3.BoolRef(z3.Z3_mk_implies(self.ref, cond.as_ast(), fact.as_ast()), self.ctx)
        z3.Z3_solver_assert(self.ref, self.s.solver, fact.as_ast())

    def sum_le(self, terms: Sequence[tuple[int, int]], b: int, bound: int) -> z3.BoolRef:
        """``sum(q * x[ci][b] for q, ci in terms) <= bound``, the same term z3's operators
        make, with one Z3 call per product (the operators check and convert each operand:
        most of the time spent building a model)."""
        lhs = self.lin(terms, b)  # held while Z3 uses its AST
        return z3.BoolRef(z3.Z3_mk_le(self.ref, lhs.as_ast(), self.num(bound)), self.ctx)

    def lin(self, terms: Sequence[tuple[int, int]], b: int) -> z3.ArithRef:
        """``sum(q * x[ci][b] for q, ci in terms)`` (`terms` not empty), as `sum_le`."""
        ref, x = self.ref, self.x
        made = []
        for q, ci in terms:
            pair = (z3.Ast * 2)(self.num(q), x[ci][b].as_ast())
            made.append(z3.ArithRef(z3.Z3_mk_mul(ref, 2, pair), self.ctx))
        args = (z3.Ast * len(made))(*(m.as_ast() for m in made))
        return z3.ArithRef(z3.Z3_mk_add(ref, len(made), args), self.ctx)

    def num(self, value: int) -> Any:
        """The AST of integer `value` (made once per run)."""
        got = self.nums.get(value)
        if got is None:
            got = self.nums[value] = z3.IntVal(value, self.ctx)
        return got.as_ast()


_contexts = threading.local()


def _context() -> z3.Context:
    """This thread's Z3 context (making one costs about 10 ms; every encoding of a run
    shares it, and what an encoding made is freed with its last reference)."""
    ctx: z3.Context | None = getattr(_contexts, "ctx", None)
    if ctx is None:
        ctx = _contexts.ctx = z3.Context()
    return ctx


def _solver(ctx: z3.Context, deadline: float, memory_mb: int | None) -> z3.Solver:
    s = z3.SolverFor("QF_LIA", ctx=ctx)
    s.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
    if memory_mb:
        z3.set_param("memory_max_size", int(memory_mb))
    return s


def _short(p: Problem, it: Item, t: int) -> list[int]:
    """Resources on which one copy of `it` cannot fit any node of type `t` (ever)."""
    nt = p.types[t]
    best_made: dict[int, int] = {}
    for other in p.items:
        for r, c in other.creates.items():
            best_made[r] = max(best_made.get(r, 0), c - nt.held[r])
    out = []
    for r in range(len(p.resources)):
        need, cr = it.need(r), nt.cap[r]
        if not need or cr is None:
            continue
        eff = max(cr, best_made.get(r, 0)) if r in p.created else cr
        if need > eff:
            out.append(r)
    return out


def _rows(e: _Enc, deadline: float) -> bool:
    """Count variables per (class, bin) summing to the class size, and the zeros; False
    when `deadline` passed before all were made."""
    ctx = e.s.ctx
    for ci, idxs in enumerate(e.cls):
        if time.monotonic() > deadline:
            return False
        row = [z3.Int(f"x{ci}_{b}", ctx) for b in range(len(e.bins))]
        zero = e.num(0)
        for v in row:
            e.guard(None, z3.BoolRef(z3.Z3_mk_ge(e.ref, v.as_ast(), zero), ctx))
        e.s.add(z3.Sum(row) == _count(e, idxs))
        e.x.append(row)
        it = e.rep(ci)
        for b, bin_ in enumerate(e.bins):
            _zeros(e, it, row[b], bin_)
    return True


def _count(e: _Enc, idxs: list[int]) -> z3.ArithRef:
    """The copies of a class, each item's guarded by its statements' literals."""
    items = [e.p.items[i] for i in idxs]
    if sum(len(it.stmts) for it in items) > FAMILY_ITEMS and all(it.stmts for it in items):
        g = e.lits.family(s for it in items for s in it.stmts)
        return z3.If(g, z3.IntVal(sum(it.mult for it in items), e.s.ctx), 0)
    return z3.Sum(
        [
            z3.If(g, it.mult, 0)
            if (g := e.lits.all(sorted(it.stmts))) is not None
            else z3.IntVal(it.mult, e.s.ctx)
            for it in items
        ]
    )


def _zeros(e: _Enc, it: Item, var: z3.ArithRef, bin_: _Bin) -> None:
    if it.allowed is not None and not any(n in it.allowed for n in bin_.nodes):
        e.guard(e.lits.all(sorted(it.allowed_stmts)), var == 0)
    short = _short(e.p, it, bin_.t)
    if short:
        reasons = [_reason(e, it, bin_.t, r) for r in short]
        e.guard(reasons[0] if len(reasons) == 1 else z3.Or(*reasons), var == 0)
    for lid, cnt in it.tags.items():
        if lid in e.p.limits and cnt > e.p.limits[lid][0]:
            e.guard(e.lits(e.p.limits[lid][1]), var == 0)


def _reason(e: _Enc, it: Item, t: int, r: int) -> z3.BoolRef:
    """Why one copy of `it` cannot fit a node of type `t` on resource `r`: the capacity, and
    the gang whose load is too big when only a gang's load is."""
    nt = e.p.types[t]
    cap = nt.cap[r] or 0
    sids: list[str | None] = [nt.capsrc[r]]
    small = it.single[r] <= cap and all(
        load[r] <= cap for g, load in it.loads.items() if e.p.groups[g] is None
    )
    if small:
        gangs = [e.p.groups[g] for g, load in it.loads.items() if load[r] > cap]
        sids.append(sorted(s for s in gangs if s)[0] if any(gangs) else None)
    got = e.lits.all(sids)
    assert got is not None
    return got


def _created_cap(e: _Enc, b: int, r: int) -> Any:
    """Capacity of created resource `r` on bin `b` (a single node): the largest creation
    among the creators placed there, else the node's own."""
    ctx = e.s.ctx
    n = e.bins[b].nodes[0]
    base = e.p.cap[n][r]
    expr: Any = z3.IntVal(base, ctx) if base is not None else z3.IntVal(10**18, ctx)
    makers = sorted(
        (e.rep(ci).creates[r], ci) for ci in range(len(e.cls)) if r in e.rep(ci).creates
    )
    for c, ci in makers:
        expr = z3.If(e.x[ci][b] >= 1, z3.IntVal(max(0, c - e.p.held[n][r]), ctx), expr)
    return expr


def _capacity(e: _Enc, b: int) -> None:
    p, bin_ = e.p, e.bins[b]
    nt = p.types[bin_.t]
    for g, gsid in p.groups.items():
        for r in range(len(p.resources)):
            _group_cap(e, b, g, gsid, r)
    for lid, (lim, sid) in p.limits.items():
        terms2 = [(e.rep(ci).tags[lid], ci) for ci in range(len(e.cls)) if lid in e.rep(ci).tags]
        if terms2:
            e.guard(e.lits(sid), e.sum_le(terms2, b, lim * bin_.m))
    if e.exact:
        for r in p.created:
            for ci in range(len(e.cls)):
                need = e.rep(ci).single[r]
                if need:
                    e.guard(
                        e.lits(nt.capsrc[r]),
                        z3.Implies(e.x[ci][b] >= 1, _created_cap(e, b, r) >= need),
                    )


def _group_cap(e: _Enc, b: int, g: str, gsid: str | None, r: int) -> None:
    """What group `g` holds of resource `r` on bin `b` fits its capacity (with size cuts)."""
    p, bin_ = e.p, e.bins[b]
    nt = p.types[bin_.t]
    terms = [
        (load[r], ci)
        for ci in range(len(e.cls))
        if (load := e.rep(ci).loads.get(g)) is not None and load[r]
    ]
    kcap = nt.cap[r]
    if not terms or (kcap is None and not (e.exact and r in p.created)):
        return
    cond = e.lits.all([nt.capsrc[r], gsid])
    if r in p.created:
        _created(e, b, r, cond, e.lin(terms, b), kcap)
        return
    assert kcap is not None
    e.guard(cond, e.sum_le(terms, b, bin_.m * kcap))
    if not e.exact:
        for q in sorted({q for q, _ in terms}, reverse=True)[:CUTS]:
            cut = [(qq // q, ci) for qq, ci in terms if qq // q]
            e.guard(cond, e.sum_le(cut, b, bin_.m * (kcap // q)))


def _created(e: _Enc, b: int, r: int, cond: Any, lhs: Any, kcap: int | None) -> None:
    if e.exact:
        e.guard(cond, lhs <= _created_cap(e, b, r))
        return
    assert kcap is not None
    held = e.p.types[e.bins[b].t].held[r]
    extra = [
        max(0, e.rep(ci).creates[r] - held) * e.x[ci][b]
        for ci in range(len(e.cls))
        if r in e.rep(ci).creates
    ]
    e.guard(cond, lhs <= e.bins[b].m * kcap + (z3.Sum(extra) if extra else 0))


def _rule(e: _Enc, rule: Rule) -> None:
    """A domain rule: bins lie in one domain of the key each (types are split by domain)."""
    ctx = e.s.ctx
    dom = e.p.domains[rule.key]
    tagged = [
        (e.rep(ci).tags[rule.tag], ci) for ci in range(len(e.cls)) if rule.tag in e.rep(ci).tags
    ]
    if not tagged:
        return
    per: list[list[Any]] = [[] for _ in dom.names]
    for b, bin_ in enumerate(e.bins):
        d = dom.of.get(bin_.nodes[0])
        for a, ci in tagged:
            if d is None:
                e.guard(e.lits(rule.stmt), e.x[ci][b] == 0)
            else:
                per[d].append(a * e.x[ci][b])
    counts = [z3.Sum(terms) if terms else z3.IntVal(0, ctx) for terms in per]
    cond = e.lits(rule.stmt)
    if rule.kind == "limit":
        for c in counts:
            e.guard(cond, c <= rule.value)
    elif rule.kind == "together":
        used = [c >= 1 for c in counts]
        if len(used) > 1:
            e.guard(cond, z3.AtMost(*used, 1))
    elif rule.kind == "excess":
        a, b = rule.pair
        e.guard(cond, counts[a] - counts[b] >= rule.value)
    elif rule.kind == "even" and counts:
        lo, hi = z3.Int(f"lo_{rule.tag}", ctx), z3.Int(f"hi_{rule.tag}", ctx)
        for c in counts:
            e.guard(cond, z3.And(lo <= c, c <= hi))
        e.guard(cond, hi - lo <= rule.value)


def _solve(e: _Enc) -> Outcome:
    assumptions = list(e.lits.lits.values())
    res = e.s.check(*assumptions)
    if res == z3.unsat:
        back = {v.get_id(): k for k, v in e.lits.lits.items()}  # ids: no printing
        return ("unsat", e.lits.expand(back[x.get_id()] for x in e.s.unsat_core()))
    if res != z3.sat:
        return ("unknown", str(e.s.reason_unknown()) or "solver gave up")
    model = e.s.model()
    targets: dict[int, list[tuple[list[int], int]]] = {}
    for ci, idxs in enumerate(e.cls):
        per_bin = [model.eval(v, model_completion=True).as_long() for v in e.x[ci]]
        pool = [(b, k) for b, k in enumerate(per_bin) if k > 0]
        for i in idxs:  # hand the class's copies out to its items, bin by bin
            need = e.p.items[i].mult
            jobs: list[tuple[list[int], int]] = []
            while need and pool:
                b, k = pool[0]
                take = min(k, need)
                jobs.append((e.bins[b].nodes, take))
                need -= take
                pool[0] = (b, k - take)
                if pool[0][1] == 0:
                    pool.pop(0)
            targets[i] = jobs
    return ("sat", targets)


def _encode(
    p: Problem, deadline: float, memory_mb: int | None, bins: list[_Bin], exact: bool
) -> Outcome:
    # Z3 reads its memory limit when a context is made: a run with one gets its own.
    ctx = z3.Context() if memory_mb else _context()
    e = _Enc(
        p, _solver(ctx, deadline, memory_mb), _Lits(ctx), list(classes(p).values()), bins, exact
    )
    if not _rows(e, deadline):
        return ("unknown", "timeout while building the model")
    for b in range(len(bins)):
        _capacity(e, b)
        if time.monotonic() > deadline:
            return ("unknown", "timeout while building the model")
    for rule in p.rules:
        _rule(e, rule)
    left = deadline - time.monotonic()
    if left <= 0:
        return ("unknown", "timeout while building the model")
    e.s.set("timeout", max(1, int(left * 1000)))  # what is left after building it
    return _solve(e)


def relaxed(p: Problem, deadline: float, memory_mb: int | None = None) -> Outcome:
    """The per-type aggregated encoding (a relaxation: UNSAT is a proof)."""
    bins = [_Bin(list(nt.nodes), t) for t, nt in enumerate(p.types)]
    return _encode(p, deadline, memory_mb, bins, exact=False)


def exact(p: Problem, deadline: float, memory_mb: int | None = None) -> Outcome:
    """Per-node counts (exact). Nodes of a type are interchangeable, so each type keeps only
    as many nodes as there are item copies; only for problems under `EXACT_LIMIT`."""
    n_cls = len(classes(p))
    copies = sum(it.mult for it in p.items)
    bins = [_Bin([n], t) for t, nt in enumerate(p.types) for n in nt.nodes[:copies]]
    if n_cls * len(bins) > EXACT_LIMIT:
        return (
            "unknown",
            f"too large for the exact encoding ({n_cls} classes x {len(bins)} nodes)",
        )
    return _encode(p, deadline, memory_mb, bins, exact=True)
