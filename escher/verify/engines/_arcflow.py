"""Exact packing by an arc-flow model, solved by the HiGHS MILP solver (through SciPy).

The arc-flow formulation (Valério de Carvalho) writes a packing of one resource as a flow:
for each node type, a graph whose vertices are the loads a node can reach (0 .. capacity)
and whose arcs add one copy of a class (classes in decreasing size, so each fill is one
path); a flow of value k from 0 to the capacity is k nodes, and the copies of each class
the flow carries must equal the copies to place. Its size grows with the capacity and the
distinct sizes, not with the number of tasks or nodes, and its linear relaxation is the
Gilmore-Gomory bound, so zero-slack packings that defeat a tree search are decided at once.

Two uses:

* `solve`: the whole problem when every class loads one dimension only (one resource of one
  simultaneous group, or one per-node limit): feasible (a placement for the independent
  check) or infeasible.
* `project`: each dimension alone, over the classes that load it and the node types each
  may use, as a relaxation: infeasible there is infeasible for the whole problem, with the
  statements of that dimension as the conflict.

SciPy is optional (the ``verify`` extra): without it, `available()` is False and the other
engines decide.
"""

from __future__ import annotations

import importlib.util
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from escher.verify.engines import _bounded, _exactfill
from escher.verify.engines._search import INF, Fill, _placement, _Space, _space, applicable
from escher.verify.model import Problem

#: Arcs (over all node types) above which the model is not built.
ARC_LIMIT = 150_000

#: At most this share of the time left, and these seconds, go to exact completion first.
EXACT_FILL_SHARE = 0.25
EXACT_FILL_SECONDS = 1.0

#: Seconds left below which the MILP is not started (building it takes longer).
MIN_RUN = 0.05

Arc = tuple[int, int, int]  # (from load, to load, class)


def available() -> bool:
    """True if SciPy (its MILP interface runs HiGHS) is installed; imported only when used."""
    return importlib.util.find_spec("scipy") is not None


@dataclass
class _Model:
    """Graphs per node type over the classes of one dimension."""

    sp: _Space
    dim: int
    caps: list[int]  # type -> capacity in `dim`
    nodes: list[int]  # type -> nodes of the type
    demand: dict[int, int]  # class -> copies
    arcs: list[list[Arc]]  # type -> arcs
    exact: bool  # zero slack: every node full, no loss arcs


def _arcs(cap: int, sizes: list[tuple[int, int, int]], exact: bool) -> list[Arc]:
    """Arcs of one graph; `sizes` is (class, size, copies) in decreasing size."""
    reached = {0}
    arcs: set[Arc] = set()
    for c, w, copies in sizes:
        cur = set(reached)
        for _ in range(min(copies, cap // w)):
            step = {(u, u + w, c) for u in cur if u + w <= cap}
            if not step:
                break
            arcs |= step
            cur = {v for _, v, _ in step}
            reached |= cur
    if not exact:
        return sorted(arcs)
    good = {cap}
    for u, v, _ in sorted(arcs, key=lambda a: -a[0]):
        if v in good:
            good.add(u)
    return sorted(a for a in arcs if a[0] in good and a[1] in good)


def _model(p: Problem, sp: _Space, dim: int, classes: list[int], deadline: float) -> _Model | None:
    """The graphs of one dimension, or None (too many arcs, or `deadline` passed: building
    them grows with the node types times the capacity)."""
    types = [t for t in range(len(p.types)) if p.types[t].nodes]
    caps = [sp.cap[t][dim] for t in range(len(p.types))]
    if any(caps[t] >= INF for t in types):
        return None
    demand = {c: sum(p.items[i].mult for i in sp.idxs[c]) for c in classes}
    need = sum(demand[c] * sp.vec[c][dim] for c in classes)
    have = sum(caps[t] * len(p.types[t].nodes) for t in types)
    exact = need == have
    arcs: list[list[Arc]] = [[] for _ in p.types]
    total = 0
    for t in types:
        if time.monotonic() > deadline:
            return None
        sizes = sorted(
            ((c, sp.vec[c][dim], demand[c]) for c in classes if sp.ok[c][t]),
            key=lambda x: (-x[1], x[0]),
        )
        arcs[t] = _arcs(caps[t], sizes, exact)
        total += len(arcs[t])
        if total > ARC_LIMIT:
            return None
    nodes = [len(nt.nodes) for nt in p.types]
    return _Model(sp, dim, caps, nodes, demand, arcs, exact)


@dataclass
class _Layout:
    """Column and row numbers of the MILP."""

    arc_col: list[int]  # type -> first column of its arcs
    loss_col: list[dict[int, int]]  # type -> vertex -> column of its loss arc
    z_col: list[int]  # type -> column of its flow value
    vrow: list[dict[int, int]]  # type -> vertex -> conservation row
    crow: dict[int, int]  # class -> demand row
    ncols: int
    nrows: int


def _layout(m: _Model) -> _Layout:
    col = row = 0
    arc_col, loss_col, z_col, vrow = [], [], [], []
    for t, arcs in enumerate(m.arcs):
        verts = sorted({0, m.caps[t]} | {a[0] for a in arcs} | {a[1] for a in arcs})
        arc_col.append(col)
        col += len(arcs)
        losses = {} if m.exact else {v: 0 for v in verts if 0 < v < m.caps[t]}
        for v in losses:
            losses[v] = col
            col += 1
        loss_col.append(losses)
        z_col.append(col)
        col += 1
        rows = {}
        for v in verts:
            if v != m.caps[t] or v == 0:  # a type with nothing: z_t = 0
                rows[v] = row
                row += 1
        vrow.append(rows)
    crow = {}
    for c in sorted(m.demand):
        crow[c] = row
        row += 1
    return _Layout(arc_col, loss_col, z_col, vrow, crow, col, row)


def _matrix(m: _Model, lay: _Layout) -> tuple[Any, Any, Any, Any]:
    """(A, row lower, row upper, column upper) of the MILP."""
    import numpy as np
    from scipy.sparse import coo_matrix

    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []

    def put(r: int, c: int, v: float) -> None:
        rows.append(r)
        cols.append(c)
        vals.append(v)

    for t, arcs in enumerate(m.arcs):
        vr = lay.vrow[t]
        for j, (u, v, c) in enumerate(arcs):
            put(vr[u], lay.arc_col[t] + j, -1.0)  # out of u
            if v in vr:
                put(vr[v], lay.arc_col[t] + j, 1.0)  # into v
            put(lay.crow[c], lay.arc_col[t] + j, 1.0)
        for v, col in lay.loss_col[t].items():
            put(vr[v], col, -1.0)
        put(vr[0], lay.z_col[t], 1.0)  # flow value z_t leaves 0
    a = coo_matrix((vals, (rows, cols)), shape=(lay.nrows, lay.ncols)).tocsr()
    lo = np.zeros(lay.nrows)
    for c, r in lay.crow.items():
        lo[r] = m.demand[c]
    upper = np.full(lay.ncols, np.inf)
    for t, zc in enumerate(lay.z_col):
        upper[zc] = m.nodes[t]
    return a, lo, lo.copy(), upper


def _run(m: _Model, deadline: float) -> tuple[str, list[tuple[int, Fill]] | None]:
    """Runs the MILP once, with all the time left until `deadline`.

    Restarts with doubling limits (in shuffled column orders) threw away the solver's
    progress at each restart: on a loaded machine the zero-slack triplets of 333 nodes
    stayed undecided after HiGHS had used 6.45 s of CPU in 90 s of wall time, in pieces
    none of which was long enough. One run keeps its search tree to the end.
    """
    lay = _layout(m)
    a, lo, hi, upper = _matrix(m, lay)
    left = deadline - time.monotonic()  # after building: the solver's run ends by `deadline`
    if left <= MIN_RUN:
        return ("unknown", None)
    status, x = _bounded.milp(a, lo, hi, upper, left, left)
    if status == 2:
        return ("infeasible", None)
    if status != 0 or x is None:
        return ("unknown", None)
    flow = [int(v + 0.5) for v in x]  # x >= 0
    return ("feasible", _paths(m, lay, flow))


def _paths(m: _Model, lay: _Layout, flow: list[int]) -> list[tuple[int, Fill]]:
    """Decomposes the flow of each type into one fill per node."""
    out: list[tuple[int, Fill]] = []
    for t, arcs in enumerate(m.arcs):
        succ: dict[int, list[int]] = defaultdict(list)
        for j, (u, _, _) in enumerate(arcs):
            if flow[lay.arc_col[t] + j] > 0:
                succ[u].append(j)
        loss = {v: flow[col] for v, col in lay.loss_col[t].items()}
        for _ in range(flow[lay.z_col[t]]):
            out.append((t, _walk(m.caps[t], arcs, succ, loss, flow, lay.arc_col[t])))
    return out


def _walk(
    cap: int,
    arcs: list[Arc],
    succ: dict[int, list[int]],
    loss: dict[int, int],
    flow: list[int],
    base: int,
) -> Fill:
    counts: dict[int, int] = defaultdict(int)
    v = 0
    while v != cap:
        if loss.get(v, 0) > 0:
            loss[v] -= 1
            break
        while flow[base + succ[v][-1]] == 0:
            succ[v].pop()
        j = succ[v][-1]
        flow[base + j] -= 1
        counts[arcs[j][2]] += 1
        v = arcs[j][1]
    return tuple(sorted(counts.items()))


def _exact_fills(m: _Model, deadline: float) -> list[tuple[int, Fill]] | None:
    """Zero slack on one node type: fills found by exact completion
    (`escher.verify.engines._exactfill`), given at most `EXACT_FILL_SHARE` of the time left."""
    types = [t for t, n in enumerate(m.nodes) if n]
    if not m.exact or len(types) != 1:
        return None
    t = types[0]
    if any(not m.sp.ok[c][t] for c in m.demand):
        return None
    sizes = {c: m.sp.vec[c][m.dim] for c in m.demand}
    budget = min(EXACT_FILL_SECONDS, EXACT_FILL_SHARE * (deadline - time.monotonic()))
    fills = _exactfill.fill(m.caps[t], sizes, m.demand, m.nodes[t], time.monotonic() + budget)
    return None if fills is None else [(t, f) for f in fills]


def solve(p: Problem, deadline: float) -> tuple[str, list[list[int]] | None]:
    """("feasible", placement) | ("infeasible", None) | ("unknown", None) for a problem
    whose classes load one dimension; ("unknown", None) when the model does not apply."""
    if not applicable(p):
        return ("unknown", None)
    sp = _space(p, deadline)
    if len(sp.cap[0]) != 1 or not sp.order:
        return ("unknown", None)
    m = _model(p, sp, 0, list(sp.order), deadline)
    if m is None:
        return ("unknown", None)
    quick = _exact_fills(m, deadline)
    if quick is not None:
        placement = _placement(p, sp, quick)
        if placement:
            return ("feasible", placement)
    status, path = _run(m, deadline)
    if status != "feasible" or path is None:
        return (status, None)
    placement = _placement(p, sp, path)
    return ("feasible", placement) if placement else ("unknown", None)


def project(p: Problem, deadline: float) -> frozenset[str] | None:
    """The statements of a dimension whose projection is infeasible, or None."""
    if not applicable(p):
        return None
    sp = _space(p, deadline)
    ndim = len(sp.cap[0]) if sp.cap else 0
    if ndim < 2:
        return None
    for d in range(ndim):
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        # each dimension an equal part of what is left; what one does not use, the next get
        until = time.monotonic() + left / (ndim - d)
        classes = [c for c in sp.order if sp.vec[c][d]]
        m = _model(p, sp, d, classes, until) if classes else None
        if m is None:
            continue
        status, _ = _run(m, until)
        if status == "infeasible":
            return _core(p, sp, d, classes)
    return None


def _core(p: Problem, sp: _Space, d: int, classes: list[int]) -> frozenset[str]:
    from escher.verify.engines._search import _dims

    core = {s for c in classes for i in sp.idxs[c] for s in p.items[i].stmts}
    core |= {s for c in classes for i in sp.idxs[c] for s in p.items[i].allowed_stmts}
    g, r = _dims(p, [p.items[idx[0]] for idx in sp.idxs])[d]
    sid = p.limits[str(r)][1] if g == "limit" else p.groups[str(g)]
    # The classes' node types come from every resource they need (fits alone).
    need = {r for c in classes for i in sp.idxs[c] for r in p.items[i].nonzero}
    core |= {nt.capsrc[r] for nt in p.types if nt.nodes for r in need}
    if sid:
        core.add(sid)
    return frozenset(core)
