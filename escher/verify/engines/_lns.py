"""Large neighbourhood search with exact sub-solves, for tight multi-resource packings.

The state is a partial assignment that respects every capacity: counts of each class of
identical items per node, and the copies not placed yet. It starts from node-by-node fills
(a small MILP per node for as long as `INIT_SHARE` of the time allows, then the dot-product
rule). Each step picks a copy not placed (by volume) and a few nodes around it (a
neighbourhood): those that lack least to take it, plus random ones that may. It frees every
copy on them and asks HiGHS (`scipy.optimize.milp`, a MILP on counts per (class, node))
for a re-placement of those copies, that copy and two more not placed, on those nodes,
with more placed weight than now (a copy weighs its volume to `WEIGHT_POWER`). The MILP
has no objective, so HiGHS stops at the first such answer. The current assignment is one
with equal weight, so the weight never falls; when steps stop gaining, every other step
asks for equal weight at random costs instead (a move sideways), and the neighbourhood
grows; a gain shrinks it back.

This is the repair of the winners of the ROADEF/EURO 2012 machine reassignment challenge.
On the bench's tight packings of five resources at 98-100% (docs/verify-engines.md) it
places most of what the first assignment leaves out, but it did not place the last copies
within the budgets measured there.

A heuristic: it finds packings (checked by `_greedy.check`), it never proves anything
infeasible. It takes the problems the packing search takes (no task-created resources, no
domain rules), and needs SciPy.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import random
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from escher.verify.engines._search import _Space, _space, applicable
from escher.verify.model import Problem, Timeout, type_total

if TYPE_CHECKING:  # numpy is imported when the search runs, not when a lane is chosen
    import numpy as np

#: Nodes per neighbourhood at first, at most, and steps without a gain before it grows.
FIRST_K = 3
MOST_K = 8
PATIENCE = 8

#: Seconds one sub-MILP may take at most.
STEP_SECONDS = 0.2

#: Share of a neighbourhood chosen as the nodes that lack least to take the chosen copy.
NEAR_SHARE = 0.5

#: Branch-and-bound nodes each node's fill MILP may take (a fill needs a good answer, not
#: a proven best one; a node limit keeps the result the same on a loaded machine).
FILL_NODES = 50

#: A copy placed is worth its volume to this power (1: volume; 0: one copy is one copy).
WEIGHT_POWER = 0.5

#: Share of the time that filling nodes one by one with a MILP each may take; the nodes
#: left then are filled by the dot-product rule (numpy, milliseconds for 1,000 nodes).
INIT_SHARE = 0.3

#: Copies not placed (besides the target) offered to each sub-MILP.
EXTRA = 2


#: A problem is tight (worth this engine's lane) when some resource is asked for at least
#: this share of what the nodes have: the greedy orders place looser ones.
TIGHT = 0.9


def available() -> bool:
    """True if SciPy (HiGHS) is installed; imported only when the search runs."""
    return importlib.util.find_spec("scipy") is not None


def tight(p: Problem) -> bool:
    """Some resource is asked for at least `TIGHT` of the nodes' capacity of it."""
    for r in range(len(p.resources)):
        have = type_total(p, r)
        if not have:
            continue
        for g in p.groups:
            asked = sum(it.loads[g][r] * it.mult for it in p.items if g in it.loads)
            if asked >= TIGHT * have:
                return True
    return False


class _State:
    """Counts per (class, node), the load per node, and the copies not placed."""

    def __init__(self, p: Problem, sp: _Space) -> None:
        import numpy as np

        self.vec = np.array(sp.vec, dtype=np.int64).reshape(len(sp.vec), -1)
        ncls, ndim = self.vec.shape
        self.count = np.array(
            [sum(p.items[i].mult for i in idx) for idx in sp.idxs], dtype=np.int64
        )
        demand = (self.vec * self.count[:, None]).sum(axis=0)
        types = np.array(p.node_type, dtype=np.int64)
        capt = np.array(sp.cap, dtype=np.int64).reshape(len(sp.cap), ndim)
        # An unbounded capacity is never binding beyond what all copies ask together.
        capt = np.minimum(capt, demand[None, :])
        self.types = types
        self.cap = capt[types]  # node -> dim
        self.ok = np.array(sp.ok, dtype=bool).reshape(ncls, -1)[:, types]  # class -> node
        self.x = np.zeros((ncls, len(types)), dtype=np.int64)
        self.load = np.zeros_like(self.cap)
        self.left = self.count.copy()
        finite = np.where(self.cap > 0, self.cap, 0)
        self.scale = np.maximum(finite.mean(axis=0), 1.0)
        self.vol = (self.vec / self.scale).sum(axis=1)
        # Volume in integers (exact comparisons in the MILP's rows).
        self.weight = np.maximum(1, np.rint(1000 * self.vol**WEIGHT_POWER)).astype(np.int64)

    def put(self, c: int, n: int, k: int = 1) -> None:
        self.x[c, n] += k
        self.load[n] += k * self.vec[c]
        self.left[c] -= k


def _dot_fill(s: _State, deadline: float) -> None:
    """Node by node (largest first), the copy most aligned with the room left (the
    bin-centric dot-product rule of Panigrahy et al., "Heuristics for Vector Bin Packing",
    2011: the largest dot product of request and room, both relative to the node's
    capacity) while some copy fits."""
    import numpy as np

    size = (s.cap / s.scale).sum(axis=1)
    for n in np.argsort(-size, kind="stable"):
        if time.monotonic() > deadline:
            raise Timeout
        inv = 1.0 / np.maximum(s.cap[n], 1)
        while True:
            room = s.cap[n] - s.load[n]
            fit = (s.left > 0) & s.ok[:, n] & np.all(s.vec <= room, axis=1)
            if not fit.any():
                break
            score = (s.vec * inv) @ (room * inv)
            score[~fit] = -1.0
            s.put(int(np.argmax(score)), int(n))


def _knapsack_fill(s: _State, until: float) -> None:
    """Node by node (largest first), the copies left that fill it most (the sum over
    dimensions of the load relative to the node's capacity), as a small MILP; the nodes
    left at `until` stay as they are."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    size = (s.cap / s.scale).sum(axis=1)
    for n in np.argsort(-size, kind="stable"):
        if time.monotonic() > until:
            return
        room = s.cap[n] - s.load[n]
        cls = np.flatnonzero((s.left > 0) & s.ok[:, n] & np.all(s.vec <= room, axis=1))
        if len(cls) == 0:
            continue
        vec = s.vec[cls]
        gain = (vec / np.maximum(s.cap[n], 1)).sum(axis=1)
        res = milp(
            -gain,
            integrality=np.ones(len(cls)),
            bounds=Bounds(0, s.left[cls].astype(float)),
            constraints=LinearConstraint(vec.T.astype(float), -np.inf, room.astype(float)),
            options={
                "time_limit": max(0.01, min(1.0, until - time.monotonic())),
                "node_limit": FILL_NODES,
                "disp": False,
            },
        )
        if res.x is None:
            continue
        y = np.rint(res.x).astype(np.int64)
        if (vec.T @ y > room).any():
            continue
        for c, k in zip(cls, y, strict=True):
            if k:
                s.put(int(c), int(n), int(k))


def _target(s: _State, rng: random.Random) -> int:
    """A class with copies not placed, chosen by their volume."""
    import numpy as np

    cls = np.flatnonzero(s.left > 0)
    weights = (s.left[cls] * s.vol[cls]).tolist()
    return int(rng.choices(cls.tolist(), weights=weights)[0])


def _neighbourhood(s: _State, c: int, k: int, rng: random.Random) -> np.ndarray:
    """`k` nodes around a copy of class `c`: those that lack least of what it needs, then
    random ones that may take it."""
    import numpy as np

    cand = np.flatnonzero(s.ok[c])
    if len(cand) <= k:
        return cand
    lack = (np.maximum(0, s.load[cand] + s.vec[c] - s.cap[cand]) / s.scale).sum(axis=1)
    lack += np.array([rng.random() for _ in cand]) * 1e-3
    near = max(1, int(k * NEAR_SHARE))
    chosen = [int(n) for n in cand[np.argsort(lack)[:near]]]
    taken = set(chosen)
    rest = [int(n) for n in cand if int(n) not in taken]
    chosen += rng.sample(rest, k - near)
    return np.array(sorted(chosen), dtype=np.int64)


def _solve(
    s: _State, nodes: np.ndarray, target: int, seconds: float, rng: random.Random, drift: bool
) -> bool:
    """Re-place what `nodes` hold, with one more copy of class `target` and a few other
    copies not placed, on `nodes` (within `seconds`). The MILP asks for more placed volume
    than now, with no objective, so HiGHS stops at the first such answer; with `drift`, for
    as much volume as now, the cheapest at random costs (a move sideways). True when the
    placed volume grew; the new counts are applied whenever an answer was found."""
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp

    extra = np.zeros_like(s.left)
    extra[target] = 1
    others = [int(c) for c in np.flatnonzero(s.left > 0) if c != target]
    for c in rng.sample(others, min(EXTRA, len(others))):
        extra[c] += 1
    pool = s.x[:, nodes].sum(axis=1) + extra
    cls = np.flatnonzero(pool > 0)
    ok = s.ok[np.ix_(cls, nodes)]
    ci, ni = np.nonzero(ok)  # the variables: (class, node) pairs allowed
    if len(ci) == 0:
        return False
    nv = len(ci)
    ncls, knodes, ndim = len(cls), len(nodes), s.vec.shape[1]
    old = s.x[np.ix_(cls, nodes)]
    before = int((old.sum(axis=1) * s.weight[cls]).sum())
    rows_count = np.zeros((ncls, nv))
    rows_count[ci, np.arange(nv)] = 1.0
    rows_cap = np.zeros((knodes * ndim, nv))
    for d in range(ndim):
        rows_cap[ni * ndim + d, np.arange(nv)] = s.vec[cls[ci], d]
    caps = s.cap[nodes].reshape(-1).astype(float)
    used = rows_cap.any(axis=1)
    a = np.vstack([rows_count, rows_cap[used], s.weight[cls[ci]][None, :]])
    lb = np.concatenate([np.full(ncls + int(used.sum()), -np.inf), [before + (0 if drift else 1)]])
    ub = np.concatenate([pool[cls].astype(float), caps[used], [np.inf]])
    cost = np.array([rng.random() for _ in range(nv)]) if drift else np.zeros(nv)
    res = milp(
        cost,
        integrality=np.ones(nv),
        bounds=Bounds(0, pool[cls[ci]].astype(float)),
        constraints=LinearConstraint(a, lb, ub),
        options={"time_limit": max(0.01, seconds), "disp": False},
    )
    if res.x is None:
        return False
    y = np.rint(res.x).astype(np.int64)
    new = np.zeros((ncls, knodes), dtype=np.int64)
    new[ci, ni] = y
    load = s.vec[cls].T @ new  # dim -> node
    if (s.cap[nodes] < load.T).any() or (new.sum(axis=1) > pool[cls]).any():
        return False  # rounding broke a row: keep what we have
    after = int((new.sum(axis=1) * s.weight[cls]).sum())
    if after < before:
        return False
    s.left[cls] += old.sum(axis=1) - new.sum(axis=1)
    s.x[np.ix_(cls, nodes)] = new
    s.load[nodes] = (s.vec.T @ s.x[:, nodes]).T
    return after > before


def _placement(p: Problem, sp: _Space, s: _State) -> list[list[int]]:
    """The counts as a placement of the problem's items (free classes on any node they may
    use)."""
    import numpy as np

    placement: list[list[int]] = [[] for _ in p.items]
    for c, idx in enumerate(sp.idxs):
        if c in sp.free:
            node = next((int(n) for n in np.flatnonzero(s.ok[c])), None)
            if node is None:
                return []
            spots = [node] * int(s.count[c])
        else:
            spots = [int(n) for n in np.flatnonzero(s.x[c]) for _ in range(int(s.x[c, n]))]
        pos = 0
        for i in idx:
            m = p.items[i].mult
            placement[i] = spots[pos : pos + m]
            pos += m
    return placement


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """File descriptor 1 to /dev/null meanwhile: HiGHS as SciPy 1.17 builds it writes
    debugging lines straight to it, which would land in the middle of `--format json`."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def find(
    p: Problem, deadline: float, seed: int = 0, stats: dict[str, Any] | None = None
) -> list[list[int]] | None:
    """A placement found by the neighbourhood search before `deadline`, or None.

    Args:
        p: The problem (one the packing search takes: `_search.applicable`).
        deadline: A `time.monotonic()` value.
        seed: The random seed of the neighbourhoods.
        stats: If given, filled with steps, gains, the copies not placed after the first
            assignment and at the end, and (step, copies left, seconds) at each gain.
    """
    if not applicable(p):
        return None
    with _quiet():
        return _find(p, deadline, random.Random(seed), {} if stats is None else stats)


def _find(
    p: Problem, deadline: float, rng: random.Random, stats: dict[str, Any]
) -> list[list[int]] | None:
    try:
        sp = _space(p, deadline)
        s = _State(p, sp)
        for c in sp.free:
            s.left[c] = 0
        if not all(s.ok[c].any() for c in range(len(sp.idxs)) if s.count[c]):
            return None
        _knapsack_fill(s, time.monotonic() + INIT_SHARE * (deadline - time.monotonic()))
        _dot_fill(s, deadline)
    except Timeout:
        return None
    t_start = time.monotonic()
    k, stuck, steps, gains = FIRST_K, 0, 0, 0
    start_left = int(s.left.sum())
    while s.left.sum() > 0:
        left = deadline - time.monotonic()
        if left <= 0.02:
            break
        target = _target(s, rng)
        nodes = _neighbourhood(s, target, min(k, s.x.shape[1]), rng)
        steps += 1
        drift = stuck >= PATIENCE // 2 and steps % 2 == 0
        if _solve(s, nodes, target, min(STEP_SECONDS, left - 0.01), rng, drift):
            gains += 1
            stuck = 0
            stats.setdefault("trace", []).append(
                (steps, int(s.left.sum()), round(time.monotonic() - t_start, 2))
            )
            k = max(FIRST_K, k - 1)
        else:
            stuck += 1
            if stuck >= PATIENCE:
                stuck = 0
                k = min(MOST_K, k + 1)
    stats.update(steps=steps, gains=gains, first_left=start_left, left=int(s.left.sum()), k=k)
    if s.left.sum() > 0:
        return None
    return _placement(p, sp, s) or None
