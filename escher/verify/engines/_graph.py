"""Pairwise separation as a graph: a clique bound, a DSatur colouring, and a SAT model.

Many small `Separated` intents (and per-node limits of 1) make a conflict graph: a vertex per
copy of an item under such a limit, an edge between two copies that may not share a node.
Nodes are the colours.

* `clique_conflict`: a clique larger than the nodes its copies may use is infeasible at
  once; the cause names the clique's tasks and the core holds the separations of its edges.
* `colour`: DSatur (the copy whose neighbours already use the most nodes first) that also
  respects capacities and every per-node limit, then the greedy orders for the other items;
  a witness for the independent checker.
* `tabu_colour`: Tabucol, a local search over colourings, for planted colourings DSatur
  misses; capacities the copies could overfill count in its objective (`capacity_rows`),
  so it finds equitable colourings too; `propagated_colour` starts it from belief
  propagation's colouring;
* `solve`: the exact 0/1 model (a Boolean per copy and node it may use; clauses and
  cardinalities for Glucose, or pseudo-Boolean capacities for Z3's SAT engine), with the
  nodes of one clique fixed when all nodes are interchangeable (symmetry breaking); UNSAT
  comes with the statements of its core.

Only for problems without task-created resources or domain rules (the other engines take
those).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.verify.check import Placement
from escher.verify.engines._tabucol import Tabucol
from escher.verify.model import Problem

#: The python-sat solver of the 0/1 model: Glucose 4 stops when interrupted (CaDiCaL 1.9
#: there does not, so a deadline could not be kept), and solved the colourings measured
#: in docs/verify-engines.md as fast.
SAT_SOLVER = "glucose4"

#: Largest number of (copy, node) Booleans the SAT model is built with.
SAT_LIMIT = 60_000

#: Literals x bound of a cardinality past which it is encoded as a cardinality network,
#: not a sequential counter.
SEQCOUNTER_CELLS = 50_000

#: Vertices the clique search starts from (the highest degrees).
CLIQUE_STARTS = 200

#: CPU seconds the exact clique search may take past its deadline: on a loaded machine
#: (load 50 on 2 cores) the pre-checks' 0.2 s of wall clock were less than the 17 ms of
#: CPU that a 1,000-task graph needs, and a 5-clique went unseen.
CLIQUE_MIN_CPU = 0.05

#: Copies and edges in the graph at most (beyond that, the graph engines leave the problem
#: alone: one `Separated` over 1,000 replicas alone would be 499,500 edges, and the
#: separation-vs-node-count pre-check already decides such a set).
GRAPH_LIMIT = 20_000
EDGE_LIMIT = 200_000


@dataclass
class Graph:
    """The conflict graph of a problem's per-node limits of one.

    Attributes:
        item: Item index of each vertex (one vertex per copy).
        adj: Neighbours of each vertex.
        why: (u, v) with u < v -> the statement of a limit that separates them (or None).
    """

    item: list[int]
    adj: list[set[int]]
    why: dict[tuple[int, int], str | None]

    @property
    def edges(self) -> int:
        """How many edges there are."""
        return len(self.why)


def applicable(p: Problem) -> bool:
    """The graph engines take this problem: no creations, no domain rules, limits of one."""
    return (
        not p.created
        and not p.rules
        and bool(p.types)
        and any(lim == 1 for lim, _ in p.limits.values())
    )


def conflict_graph(p: Problem) -> Graph | None:
    """The graph of copies under limits of one per node, or None when there is no edge or
    it is larger than `GRAPH_LIMIT` copies or `EDGE_LIMIT` edges."""
    found = _vertices(p)
    if found is None:
        return None
    item, by_limit = found
    if sum(len(vs) * (len(vs) - 1) // 2 for vs in by_limit.values()) > EDGE_LIMIT:
        return None
    adj: list[set[int]] = [set() for _ in item]
    why: dict[tuple[int, int], str | None] = {}
    for lid, vs in by_limit.items():
        sid = p.limits[lid][1]
        for a, u in enumerate(vs):
            for w in vs[a + 1 :]:
                adj[u].add(w)
                adj[w].add(u)
                if why.get((u, w)) is None:
                    why[(u, w)] = sid
    return Graph(item, adj, why) if why else None


def _vertices(p: Problem) -> tuple[list[int], dict[str, list[int]]] | None:
    """The item of each vertex (a copy under a limit of one), and each such limit's
    vertices; None past `GRAPH_LIMIT` copies."""
    pair_limits = {lid for lid, (lim, _) in p.limits.items() if lim == 1}
    item: list[int] = []
    by_limit: dict[str, list[int]] = {}
    for i, it in enumerate(p.items):
        lids = [lid for lid in it.tags if lid in pair_limits and it.tags[lid] >= 1]
        if not lids:
            continue
        if len(item) + it.mult > GRAPH_LIMIT:
            return None
        for _ in range(it.mult):
            for lid in lids:
                by_limit.setdefault(lid, []).append(len(item))
            item.append(i)
    return item, by_limit


def _nodes_of(p: Problem, i: int) -> set[int]:
    allowed = p.items[i].allowed
    return set(range(len(p.node_ids))) if allowed is None else set(allowed)


def max_clique(g: Graph, deadline: float) -> list[int]:
    """A largest clique, or a large one when `deadline` has passed and the search has had
    `CLIQUE_MIN_CPU` of CPU.

    Grown greedily from the highest-degree vertices first (a bound to prune with), then
    searched exactly per vertex among its neighbours later in a degeneracy order (in a
    sparse graph a handful each): a small clique among low-degree vertices (five tasks
    apart from one another in a graph of 1,000) is found as surely as a dense one.
    """
    cpu0 = time.process_time()

    def over() -> bool:
        return time.monotonic() > deadline and time.process_time() - cpu0 >= CLIQUE_MIN_CPU

    best = _greedy_clique(g, deadline)
    order = _degeneracy_order(g)
    pos = {v: k for k, v in enumerate(order)}
    for v in order:
        if over():
            break
        later = {u for u in g.adj[v] if pos[u] > pos[v]}
        if len(later) + 1 > len(best):
            found = _grow(g, [v], later, len(best), over)
            if found is not None:
                best = found
    return best


def _greedy_clique(g: Graph, deadline: float) -> list[int]:
    order = sorted(range(len(g.item)), key=lambda v: -len(g.adj[v]))
    best: list[int] = []
    for v in order[:CLIQUE_STARTS]:
        if len(g.adj[v]) + 1 <= len(best) or time.monotonic() > deadline:
            break
        clique = [v]
        cand = set(g.adj[v])
        while cand:
            # the candidate with the most neighbours among the other candidates
            w = max(cand, key=lambda u: (len(g.adj[u] & cand), -u))
            clique.append(w)
            cand &= g.adj[w]
        if len(clique) > len(best):
            best = clique
    return best


def _degeneracy_order(g: Graph) -> list[int]:
    """Vertices in the order of removing one of least remaining degree each time."""
    import heapq

    degree = [len(a) for a in g.adj]
    heap = [(d, v) for v, d in enumerate(degree)]
    heapq.heapify(heap)
    done = [False] * len(degree)
    order: list[int] = []
    while heap:
        d, v = heapq.heappop(heap)
        if done[v] or d != degree[v]:
            continue
        done[v] = True
        order.append(v)
        for u in g.adj[v]:
            if not done[u]:
                degree[u] -= 1
                heapq.heappush(heap, (degree[u], u))
    return order


def _grow(
    g: Graph, clique: list[int], cand: set[int], beat: int, over: Callable[[], bool]
) -> list[int] | None:
    """A clique larger than `beat` extending `clique` with vertices of `cand` (all adjacent
    to every vertex of `clique`), the largest found; None when there is none (or `over`
    said the time is up)."""
    if not cand:
        return list(clique) if len(clique) > beat else None
    best: list[int] | None = None
    for w in sorted(cand, key=lambda u: -len(g.adj[u] & cand)):
        if len(clique) + len(cand) <= beat or over():
            break
        found = _grow(g, [*clique, w], cand & g.adj[w], beat, over)
        if found is not None:
            best, beat = found, len(found)
        cand = cand - {w}
    return best


@dataclass(frozen=True)
class CliqueConflict:
    """Copies that must all be on different nodes, more than the nodes they may use."""

    core: frozenset[str]
    cause: str


def clique_conflict(p: Problem, deadline: float) -> CliqueConflict | None:
    """A clique of the conflict graph larger than the nodes its copies may use."""
    if not applicable(p):
        return None
    g = conflict_graph(p)
    return None if g is None else graph_clique_conflict(p, g, deadline)


def graph_clique_conflict(p: Problem, g: Graph, deadline: float) -> CliqueConflict | None:
    """`clique_conflict` on the graph `g` of `p`, already built."""
    clique = max_clique(g, deadline)
    nodes: set[int] = set()
    for v in clique:
        nodes |= _nodes_of(p, g.item[v])
    if len(clique) <= len(nodes):
        return None
    core = clique_statements(p, g, clique)
    names = _task_names(p, [g.item[v] for v in clique])
    return CliqueConflict(
        frozenset(core),
        f"{len(clique)} tasks must each run on a different node ({names}: every two of "
        f"them are separated), but they may use only {len(nodes)} nodes",
    )


def _task_names(p: Problem, items: list[int]) -> str:
    names: list[str] = []
    for i in dict.fromkeys(items):
        for u, _ in p.items[i].members:
            names += [t for t, _ in p.units.get(u, [(u, 0)])]
    shown = ", ".join(repr(t) for t in names[:6])
    return shown + (f" and {len(names) - 6} more" if len(names) > 6 else "")


def colour(p: Problem, g: Graph, deadline: float) -> Placement | None:
    """DSatur over the graph's copies, capacity- and limit-aware; None when some copy finds
    no node. The other items are left to the caller (`fixed` placement)."""
    from escher.verify.engines._greedy import _Packer

    packer = _Packer(p)
    n_nodes = len(p.node_ids)
    placed: list[int] = [-1] * len(g.item)
    seen: list[set[int]] = [set() for _ in g.item]  # nodes the neighbours use
    left = set(range(len(g.item)))
    load = [0] * n_nodes
    while left:
        if time.monotonic() > deadline:
            return None
        v = max(left, key=lambda u: (len(seen[u]), len(g.adj[u]), -u))
        it = p.items[g.item[v]]
        options = [
            n
            for n in (range(n_nodes) if it.allowed is None else sorted(it.allowed))
            if n not in seen[v] and packer.fit(it, n, 1) >= 1
        ]
        if not options:
            return None
        # the node the fewest uncoloured neighbours could still use, then the least loaded
        n = min(options, key=lambda m: (sum(1 for u in g.adj[v] if u in left), load[m], m))
        packer.place(it, n, 1)
        placed[v] = n
        load[n] += 1
        left.discard(v)
        for u in g.adj[v]:
            seen[u].add(n)
    out: Placement = [[] for _ in p.items]
    for v, n in enumerate(placed):
        out[g.item[v]].append(n)
    return out


@dataclass
class _Model:
    """The 0/1 model, solver-neutral: Booleans are ints 1..n; every constraint carries the
    statements it comes from (it holds only while they are all in force)."""

    n: int = 0
    x: list[list[dict[int, int]]] = field(default_factory=list)  # item -> copy -> node -> var
    clauses: list[tuple[list[int], frozenset[str]]] = field(default_factory=list)
    atmost: list[tuple[list[int], int, frozenset[str]]] = field(default_factory=list)
    pb: list[tuple[list[tuple[int, int]], int, frozenset[str]]] = field(default_factory=list)
    units: list[int] = field(default_factory=list)  # fixed true (symmetry breaking)

    def var(self) -> int:
        self.n += 1
        return self.n


def _build(
    p: Problem, g: Graph, cands: list[tuple[list[int], frozenset[str]]], deadline: float
) -> tuple[_Model, list[int]] | None:
    m = _Model()
    for i, it in enumerate(p.items):
        rows = []
        why = frozenset(it.stmts | it.allowed_stmts | cands[i][1])
        for _ in range(it.mult):
            row = {n: m.var() for n in cands[i][0]}
            m.clauses.append((list(row.values()), why))
            if len(row) > 1:
                m.atmost.append((list(row.values()), 1, frozenset()))
            rows.append(row)
        m.x.append(rows)
    if not _rows(p, m, deadline):
        return None
    fixed, clique = _symmetry(p, g, [c for c, _ in cands])
    m.units = [m.x[i][k][n] for i, k, n in fixed]
    return m, clique


def solve(
    p: Problem,
    g: Graph,
    deadline: float,
    memory_mb: int | None = None,
    stop: threading.Event | None = None,
) -> tuple[str, Any]:
    """The exact 0/1 model: Glucose 4 (python-sat) when every constraint is a clause or a
    cardinality, else Z3's SAT engine with pseudo-Boolean constraints.

    `stop`, when set from another thread, interrupts the solver at once (another engine
    answered first).

    Returns:
        ("sat", placement) | ("unsat", statement ids of a core) | ("unknown", reason).
    """
    stop = stop or threading.Event()
    cands = [_candidates(p, i) for i in range(len(p.items))]
    size = sum(it.mult * len(cands[i][0]) for i, it in enumerate(p.items))
    if size > SAT_LIMIT:
        return ("unknown", f"too large for the 0/1 model ({size} copy-node pairs)")
    built = _build(p, g, cands, deadline)
    if built is None or time.monotonic() > deadline:
        return ("unknown", "timeout while building the 0/1 model")
    m, clique = built
    if stop.is_set():
        return ("unknown", "stopped: another engine answered first, or the deadline passed")
    if not m.pb and _has_pysat():
        solved = _clauses(m, deadline, stop)
    elif _int32_pb(m.pb) is None:
        solved = ("unknown", "a capacity too large for Z3's 0/1 constraints")
    else:
        solved = _z3(m, deadline, memory_mb, stop)
    status, data = solved
    if status == "unsat":
        # the fixed nodes assume the clique's copies apart: its statements join the core
        return ("unsat", set(data) | (clique_statements(p, g, clique) if m.units else set()))
    if status != "sat":
        return solved
    true: set[int] = data
    out: Placement = [[] for _ in p.items]
    for i, rows in enumerate(m.x):
        for row in rows:
            on = [n for n, v in row.items() if v in true]
            if not on:
                return ("unknown", "the model left a copy unplaced")
            out[i].append(on[0])
    return ("sat", out)


def _has_pysat() -> bool:
    import importlib.util

    return importlib.util.find_spec("pysat") is not None


def _selectors(m: _Model, first: int) -> dict[frozenset[str], int]:
    """A selector variable per distinct non-empty set of statements (from `first` on)."""
    sets = {why for _, why in m.clauses} | {why for *_, why in m.atmost} | {w for *_, w in m.pb}
    ordered = sorted((why for why in sets if why), key=sorted)
    return {why: first + k for k, why in enumerate(ordered)}


def _watch(
    stop: threading.Event, done: threading.Event, seconds: float, interrupt: Any
) -> threading.Thread:
    """A daemon thread that calls `interrupt` once `stop` is set or `seconds` have passed,
    unless `done` (the solver returned) came first; it looks every 10 ms."""

    def run() -> None:
        until = time.monotonic() + max(0.0, seconds)
        while not done.is_set():
            if stop.is_set() or time.monotonic() >= until:
                interrupt()
                return
            done.wait(0.01)

    watcher = threading.Thread(target=run, daemon=True)
    watcher.start()
    return watcher


def _clauses(m: _Model, deadline: float, stop: threading.Event) -> tuple[str, Any]:
    """Clauses and cardinalities (sequential counters) for Glucose 4, with a selector per set
    of statements as assumptions; interrupted at `deadline` or when `stop` is set (Glucose
    releases the GIL while it solves, so other engines run meanwhile)."""
    from pysat.card import CardEnc, EncType
    from pysat.solvers import Solver

    top = m.n
    cards = []
    for lits, k, why in m.atmost:
        if time.monotonic() > deadline or stop.is_set():
            return ("unknown", "timeout while building the 0/1 model")
        # a sequential counter has len x k clauses: 1,000 copies at most 250 per node
        # would be a million; a cardinality network stays near len x log^2 k
        kind = EncType.seqcounter if len(lits) * k <= SEQCOUNTER_CELLS else EncType.cardnetwrk
        enc = CardEnc.atmost(lits, bound=k, top_id=top, encoding=kind)
        top = max(top, enc.nv)
        cards.append((enc.clauses, why))
    sel = _selectors(m, top + 1)
    with Solver(name=SAT_SOLVER) as s:
        for lits, why in m.clauses:
            s.add_clause(lits + ([-sel[why]] if why else []))
        for clauses, why in cards:
            for c in clauses:
                s.add_clause(c + ([-sel[why]] if why else []))
        for u in m.units:
            s.add_clause([u])
        left = deadline - time.monotonic()
        if left <= 0:
            return ("unknown", "timeout while building the 0/1 model")
        done = threading.Event()
        watcher = _watch(stop, done, left, s.interrupt)
        try:
            res = s.solve_limited(assumptions=list(sel.values()), expect_interrupt=True)
        finally:
            done.set()
            watcher.join(timeout=5.0)
        if res is None:
            return ("unknown", "time limit reached in the SAT solver")
        if res:
            model = s.get_model() or []
            return ("sat", {v for v in model if 0 < v <= m.n})
        back = {v: why for why, v in sel.items()}
        core: set[str] = set()
        for v in s.get_core() or []:
            core |= back.get(v, frozenset())
        return ("unsat", core)


_INT32 = 2**31 - 1


def _int32_terms(
    terms: Sequence[tuple[int, int]], k: int
) -> tuple[list[tuple[int, int]], int] | None:
    """`sum(q * x) <= k` with coefficients Z3 takes (C ints): ([], k) when every term fits at
    once, divided by the common divisor when too large, None when still too large."""
    if sum(q for _, q in terms if q > 0) <= k:  # holds whatever is chosen
        return [], k
    if max(k, *(q for _, q in terms)) <= _INT32:
        return list(terms), k
    g = math.gcd(k, *(q for _, q in terms))
    if max(k, *(q for _, q in terms)) // g > _INT32:
        return None
    return [(v, q // g) for v, q in terms], k // g


def _int32_pb(
    pb: Sequence[tuple[list[tuple[int, int]], int, frozenset[str]]],
) -> list[tuple[list[tuple[int, int]], int, frozenset[str]]] | None:
    """The constraints of `pb` that can fail, in coefficients Z3 takes; None if one cannot."""
    out = []
    for terms, k, why in pb:
        scaled = _int32_terms(terms, k)
        if scaled is None:
            return None
        if scaled[0]:
            out.append((scaled[0], scaled[1], why))
    return out


def _z3(
    m: _Model, deadline: float, memory_mb: int | None, stop: threading.Event
) -> tuple[str, Any]:
    """The model for Z3's SAT engine (pseudo-Boolean constraints natively)."""
    import z3

    ctx = z3.Context()
    s = z3.SolverFor("QF_FD", ctx=ctx)
    if memory_mb:
        s.set("max_memory", int(memory_mb))
    b = [z3.BoolVal(True, ctx)] + [z3.Bool(f"x{v}", ctx) for v in range(1, m.n + 1)]
    sel = {why: z3.Bool(f"s{k}", ctx) for why, k in _selectors(m, 0).items()}

    def lit(v: int) -> Any:
        return b[v] if v > 0 else z3.Not(b[-v])

    def add(fact: Any, why: frozenset[str]) -> None:
        s.add(z3.Implies(sel[why], fact) if why else fact)

    for lits, why in m.clauses:
        add(z3.Or(*(lit(v) for v in lits)), why)
    for lits, k, why in m.atmost:
        add(z3.AtMost(*(lit(v) for v in lits), k), why)
    for terms, k, why in _int32_pb(m.pb) or ():  # solve() declined a None first
        add(z3.PbLe([(lit(v), q) for v, q in terms], k), why)
    for u in m.units:
        s.add(lit(u))
    left = deadline - time.monotonic()
    if left <= 0:
        return ("unknown", "timeout while building the 0/1 model")
    s.set("timeout", max(1, int(left * 1000)))
    done = threading.Event()
    watcher = _watch(stop, done, left + 1.0, ctx.interrupt)
    try:
        res = s.check(*sel.values())
    finally:
        done.set()
        watcher.join(timeout=5.0)
    try:
        return _z3_answer(s, res, sel, b, m.n)
    except z3.Z3Exception:  # the watcher interrupted the context as the check returned
        return ("unknown", "stopped: another engine answered first, or the deadline passed")


def _z3_answer(
    s: Any, res: Any, sel: dict[frozenset[str], Any], b: list[Any], n: int
) -> tuple[str, Any]:
    """The 0/1 model's answer from a finished check: the core, the reason, or the true ones."""
    import z3

    if res == z3.unsat:
        back = {v.get_id(): why for why, v in sel.items()}
        core: set[str] = set()
        for c in s.unsat_core():
            core |= back.get(c.get_id(), frozenset())
        return ("unsat", core)
    if res != z3.sat:
        return ("unknown", str(s.reason_unknown()) or "the SAT engine gave up")
    model = s.model()
    return ("sat", {v for v in range(1, n + 1) if z3.is_true(model.eval(b[v], True))})


def _candidates(p: Problem, i: int) -> tuple[list[int], frozenset[str]]:
    """Nodes item `i` may use and fits alone on, and the statements that leave the others
    out (capacities too small, limits below one copy's count)."""
    it = p.items[i]
    out = []
    why: set[str] = set()
    over = [
        p.limits[lid][1] for lid, k in it.tags.items() if lid in p.limits and k > p.limits[lid][0]
    ]
    for n in sorted(_nodes_of(p, i)):
        caps = p.cap[n]
        short = [r for r in it.nonzero if caps[r] is not None and it.need(r) > (caps[r] or 0)]
        if not short and not over:
            out.append(n)
            continue
        why |= {p.cap_stmt(n, r) for r in short}
        why |= {sid for sid in over if sid}
    return out, frozenset(why)


def _rows(p: Problem, m: _Model, deadline: float) -> bool:
    """Capacities per (node, group, resource) and limits per (node, limit); False when
    `deadline` passed first. Each row looks only at the items that load it."""
    loaders: dict[tuple[str, int], list[int]] = {}
    tagged: dict[str, list[int]] = {}
    for i, it in enumerate(p.items):
        for grp, load in it.loads.items():
            for r in it.nonzero:
                if load[r]:
                    loaders.setdefault((grp, r), []).append(i)
        for lid in it.tags:
            if lid in p.limits:
                tagged.setdefault(lid, []).append(i)
    for n in range(len(p.node_ids)):
        if time.monotonic() > deadline:
            return False
        nt = p.types[p.node_type[n]]
        for (grp, r), idx in loaders.items():
            cap = p.cap[n][r]
            if cap is None:
                continue
            terms = [(row[n], p.items[i].loads[grp][r]) for i in idx for row in m.x[i] if n in row]
            why = frozenset(s for s in (nt.capsrc[r], p.groups[grp]) if s)
            _row(m, terms, cap, why)
        for lid, idx in tagged.items():
            lim, sid = p.limits[lid]
            terms = [(row[n], p.items[i].tags[lid]) for i in idx for row in m.x[i] if n in row]
            _row(m, terms, lim, frozenset({sid} if sid else ()))
    return True


def _row(m: _Model, terms: list[tuple[int, int]], bound: int, why: frozenset[str]) -> None:
    """`sum(q x) <= bound`: a clause for a separated pair, a cardinality for equal weights,
    else pseudo-Boolean."""
    if not terms or sum(q for _, q in terms) <= bound:
        return
    sizes = {q for _, q in terms}
    if len(sizes) > 1:
        m.pb.append((terms, bound, why))
        return
    k = bound // sizes.pop()
    lits = [v for v, _ in terms]
    if k == 0:
        m.clauses.extend(([-v], why) for v in lits)
    elif k == 1 and len(lits) == 2:
        m.clauses.append(([-lits[0], -lits[1]], why))
    else:
        m.atmost.append((lits, k, why))


def _symmetry(
    p: Problem, g: Graph, cands: list[list[int]]
) -> tuple[list[tuple[int, int, int]], list[int]]:
    """(item, copy, node) fixed by symmetry, and the clique behind them: when all nodes are
    one type and every copy may use every node, the copies of a clique take the first nodes
    in order (any placement that keeps the clique apart can be renamed so)."""
    n_nodes = len(p.node_ids)
    if len(p.types) != 1 or any(len(c) != n_nodes for c in cands):
        return [], []
    clique = max_clique(g, time.monotonic() + 0.05)
    if len(clique) > n_nodes:
        return [], []
    copy_of: dict[int, int] = {}
    seen: dict[int, int] = {}
    for v, i in enumerate(g.item):
        copy_of[v] = seen.get(i, 0)
        seen[i] = copy_of[v] + 1
    return [(g.item[v], copy_of[v], node) for node, v in enumerate(clique)], clique


def clique_statements(p: Problem, g: Graph, clique: list[int]) -> set[str]:
    """The statements that keep a clique's copies apart: its tasks and its edges."""
    core: set[str] = set()
    for v in clique:
        it = p.items[g.item[v]]
        core |= it.stmts | it.allowed_stmts
    for a, u in enumerate(clique):
        for w in clique[a + 1 :]:
            sid = g.why[(min(u, w), max(u, w))]
            if sid:
                core.add(sid)
    return core


#: Share of a Tabucol try with capacities that the search without them may take first,
#: when the try is in wall-clock time; a try in CPU seconds gives the plain search all of
#: them and the swaps at least the rest of this share past them (on col5 seed 13 the plain
#: search needed 1.0-2.2 s of CPU, and cut at 70% of a 1.5 s try it left the swaps a
#: colouring with conflicts, which they did not finish; from a proper one they took 0.01 s).
PLAIN_SHARE = 0.7


def tabu_colour(
    p: Problem,
    g: Graph,
    deadline: float,
    stop: threading.Event | None = None,
    seed: int = 0,
    start: list[int] | None = None,
    seconds: float | None = None,
) -> Placement | None:
    """Tabucol (Hertz and de Werra; Galinier and Hao's tenure): a local search over
    colourings (nodes) that moves one conflicting copy at a time to the node with the fewest
    conflicts, not back to a node it left recently unless that gives the fewest conflicts
    yet. Planted colourings that DSatur misses are found in a fraction of a second.

    Where capacities the copies could overfill (`capacity_rows`) bind, the colouring found
    without them (or the one reached after `PLAIN_SHARE` of the time) is the start of
    `_swap_tabu`'s search: overfill counts as conflicts, and copies of equal loads may also
    trade nodes, so a colouring is found whose classes also fit (an equitable colouring
    when the nodes hold exactly their share; from a colouring with a few copies too many on
    a node, a dozen swaps). The caller checks the placement. None at `deadline`, after
    `seconds` of this thread's CPU time (a try's budget: on a loaded machine a try of
    wall-clock seconds got a tenth of them), or once `stop` is set. `start`: a node per
    vertex to begin from (else random)."""
    nodes = [sorted(_nodes_of(p, g.item[v])) for v in range(len(g.item))]
    if any(not ns for ns in nodes):
        return None
    rows = capacity_rows(p, g)
    # with capacities, the plain search first (20x faster a step) for at most a share of
    # the time: the classes of a colouring it finds are then evened out in a few swaps
    until = deadline
    cpu_until = None if seconds is None else time.thread_time() + seconds
    if rows and seconds is None:
        until = time.monotonic() + max(0.0, deadline - time.monotonic()) * PLAIN_SHARE
    adj = [sorted(a) for a in g.adj]
    tabu = Tabucol(adj, nodes, len(p.node_ids), seed, start)
    solved = tabu.run(until, stop, cpu_until)
    if not rows:
        return _placement(p, g, tabu.col) if solved else None
    if stop is not None and stop.is_set():
        return None
    if seconds is not None:  # the swaps get what the plain search left, or their share
        cpu_until = time.thread_time() + max(
            (cpu_until or 0.0) - time.thread_time(), seconds * (1.0 - PLAIN_SHARE)
        )
    from escher.verify.engines._swap_tabu import swap_tabu

    loads, caps = [r.load for r in rows], [r.cap for r in rows]
    got = swap_tabu(
        adj, nodes, len(p.node_ids), loads, caps, deadline, stop, seed, tabu.col, cpu_until
    )
    return None if got is None else _placement(p, g, got)


def _placement(p: Problem, g: Graph, col: Sequence[int]) -> Placement:
    """The nodes of each item's copies from a node per vertex."""
    out: Placement = [[] for _ in p.items]
    for v, n in enumerate(col):
        out[g.item[v]].append(n)
    return out


@dataclass(frozen=True)
class CapacityRow:
    """One capacity the graph's copies share on every node: a load per copy, a capacity per
    node (None: unbounded), both in units of the largest load (so one copy too many costs
    about 1)."""

    load: list[float]
    cap: list[float | None]


def capacity_rows(p: Problem, g: Graph) -> list[CapacityRow]:
    """The (group, resource) capacities the copies of `g` alone could overfill on some node:
    the others can never bind, so they are left out (a colouring with room to spare keeps
    the plain Tabucol's speed). Items outside the graph are not counted: the greedy orders
    place them afterwards, and the checker has the last word."""
    rows: list[CapacityRow] = []
    keys = {
        (grp, r)
        for i in set(g.item)
        for grp, load in p.items[i].loads.items()
        for r, q in enumerate(load)
        if q
    }
    for grp, r in sorted(keys):
        load = [p.items[i].loads.get(grp, ())[r] if grp in p.items[i].loads else 0 for i in g.item]
        unit, total = max(load), sum(load)
        caps = [p.cap[n][r] for n in range(len(p.node_ids))]
        if not unit or all(c is None or c >= total for c in caps):
            continue
        rows.append(
            CapacityRow([q / unit for q in load], [None if c is None else c / unit for c in caps])
        )
    return rows


#: Seconds Tabucol may take after belief propagation, at least, and per second the beliefs
#: took: from the beliefs' colouring it removes a few conflicts or a few copies too many on
#: a node in milliseconds, while from a colouring with ~80 conflicts far from the planted
#: one it did not finish in minutes; another start of the beliefs is the better bet then.
TABU_AFTER_BELIEFS = 0.25
TABU_PER_BELIEF_SECOND = 1.0


def propagated_colour(
    p: Problem,
    g: Graph,
    deadline: float,
    stop: threading.Event | None = None,
    seed: int = 0,
    tabu_seconds: float = 0.0,
) -> Placement | None:
    """Belief propagation's colouring (`_propagation`), then Tabucol from it to remove the
    conflicts and overfilled nodes left (for `TABU_AFTER_BELIEFS` seconds of this thread's
    CPU time, as long as the beliefs took, or `tabu_seconds`, whichever is longest); None
    when that did not finish, at `deadline`, or once `stop` is set. The caller checks the
    placement, as with `tabu_colour`."""
    from escher.verify.engines._propagation import beliefs_colouring

    nodes = [sorted(_nodes_of(p, g.item[v])) for v in range(len(g.item))]
    if any(not ns for ns in nodes):
        return None
    t0 = time.thread_time()
    start = beliefs_colouring(list(g.why), nodes, len(p.node_ids), deadline, seed)
    if start is None or (stop is not None and stop.is_set()):
        return None
    took = time.thread_time() - t0
    tabu = max(TABU_AFTER_BELIEFS, TABU_PER_BELIEF_SECOND * took, tabu_seconds)
    return tabu_colour(p, g, deadline, stop, seed, start, tabu)
