"""Exact packing by bin completion over classes of identical items (no solver).

The state is the number of copies left per class and of unused nodes per node type, so the
search grows with distinct sizes and node types rather than with tasks and nodes:

* the hardest class left (fewest node types, then largest) goes into a fresh node of some
  type; identical unused nodes are interchangeable, so only the first one of each type is
  tried (symmetry breaking over identical nodes);
* that node is filled completely: only *maximal* fills are tried (taking a copy from a later
  node into an earlier one never breaks a placement), best-filled first;
* waste pruning: a fill may leave unused at most the slack of the whole problem (capacity of
  the unused nodes minus the demand left) in every dimension, so tight and zero-slack
  packings only ever try (nearly) full nodes;
* failed states are remembered, so permutations of the same fills are not tried twice.

The search is iterative (an explicit stack), stops at the deadline, and answers
"feasible" (a placement for `_greedy.check`), "infeasible" (every alternative exhausted) or
"unknown". It handles simultaneous groups, per-node limits and allowed nodes; problems with
task-created resources or domain rules are left to the other engines.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from escher.verify.engines._greedy import classes
from escher.verify.model import Item, Problem, Timeout

#: Maximal fills tried per (node type, step) before the search stops being exhaustive.
FILL_LIMIT = 200

#: Restarts (in random order) before the last, exhaustive run.
RESTARTS = 12

#: Failed states remembered at most.
MEMO_LIMIT = 2_000_000

INF = 1 << 62

Fill = tuple[tuple[int, int], ...]


@dataclass
class _Space:
    """The problem as classes x dimensions (group-resource pairs and per-node limits)."""

    vec: list[list[int]]  # class -> dim -> amount per copy
    cap: list[list[int]]  # type -> dim -> capacity (INF = unbounded)
    ok: list[list[bool]]  # class -> type -> may use and fits alone
    kmax: list[list[int]]  # class -> type -> copies on an empty node
    size: list[float]  # class -> difficulty
    free: list[int]  # classes that take nothing (placed at the end)
    idxs: list[list[int]]  # class -> item indices
    order: list[int] = field(default_factory=list)  # classes by size, largest first
    nz: list[list[tuple[int, int]]] = field(default_factory=list)  # class -> (dim, amount > 0)
    folded: list[int] = field(default_factory=list)  # classes whose own dimensions are in kmax


def _dims(p: Problem, cls: list[Item]) -> list[tuple[str, int | str]]:
    dims: list[tuple[str, int | str]] = []
    for g in p.groups:
        for r in range(len(p.resources)):
            if any(g in it.loads and it.loads[g][r] for it in cls):
                dims.append((g, r))
    for lid in p.limits:
        if any(lid in it.tags for it in cls):
            dims.append(("limit", lid))
    return dims


def _fits_alone(p: Problem, it: Item, t: int) -> bool:
    nt = p.types[t]
    if it.allowed is not None and nt.nodes[0] not in it.allowed:
        return False
    return all(not q or nt.cap[r] is None or q <= (nt.cap[r] or 0) for r, q in enumerate(it.single))


def _space(p: Problem, deadline: float = float("inf")) -> _Space:
    """The problem as classes x dimensions. Raises `Timeout` once `deadline` passes (with
    many node types, which node types each class fits alone is most of the cost)."""
    groups = list(classes(p).values())
    cls = [p.items[g[0]] for g in groups]
    dims = _dims(p, cls)
    vec = [
        [
            (it.loads.get(str(g), ()) or (0,) * len(p.resources))[int(r)]
            if g != "limit"
            else it.tags.get(str(r), 0)
            for g, r in dims
        ]
        for it in cls
    ]
    cap = []
    for nt in p.types:
        row = []
        for g, r in dims:
            if g == "limit":
                row.append(p.limits[str(r)][0])
            else:
                c = nt.cap[int(r)]
                row.append(INF if c is None else c)
        cap.append(row)
    ok = []
    for it in cls:
        if time.monotonic() > deadline:
            raise Timeout
        ok.append([_fits_alone(p, it, t) for t in range(len(p.types))])
    kmax = [
        [
            min((cap[t][d] // v for d, v in enumerate(vec[c]) if v), default=INF) if ok[c][t] else 0
            for t in range(len(p.types))
        ]
        for c in range(len(cls))
    ]
    top = [max((row[d] for row in cap if row[d] < INF), default=1) or 1 for d in range(len(dims))]
    size = [max((v / top[d] for d, v in enumerate(vec[c])), default=0.0) for c in range(len(cls))]
    free = [c for c in range(len(cls)) if not any(vec[c])]
    sp = _Space(vec, cap, ok, kmax, size, free, groups)
    sp.order = sorted((c for c in range(len(cls)) if any(vec[c])), key=lambda c: -size[c])
    sp.nz = [[(d, v) for d, v in enumerate(row) if v] for row in vec]
    return sp


def _fold_private(p: Problem, sp: _Space) -> _Space:
    """The space without the loose dimensions only one class uses (an anti-affinity group's
    own label and limit): on a node such a dimension bounds that class alone, as its `kmax`
    already does, and `_Search.room_left` checks its total; a dimension per label would only
    slow every step. A tight one (slack below a node's capacity) stays: it prunes fills
    that waste it. Only for the search: other engines index the full dimensions."""
    ndim = len(sp.cap[0]) if sp.cap else 0
    copies = [sum(p.items[i].mult for i in idx) for idx in sp.idxs]
    nodes = [len(nt.nodes) for nt in p.types]
    keep = []
    folded: set[int] = set()
    for d in range(ndim):
        users = [c for c, row in enumerate(sp.vec) if row[d]]
        bounded = [row[d] for row in sp.cap if row[d] < INF]
        total = (
            INF
            if len(bounded) < len(sp.cap)
            else sum(m * row[d] for m, row in zip(nodes, sp.cap, strict=True))
        )
        slack = total - sum(copies[c] * sp.vec[c][d] for c in users)
        if len(users) == 1 and slack >= max(bounded, default=0):
            folded.add(users[0])
        else:
            keep.append(d)
    if not folded:
        return sp
    vec = [[row[d] for d in keep] for row in sp.vec]
    cap = [[row[d] for d in keep] for row in sp.cap]
    top = [max((row[d] for row in cap if row[d] < INF), default=1) or 1 for d in range(len(keep))]
    size = [max((v / top[d] for d, v in enumerate(row)), default=0.0) for row in vec]
    out = _Space(vec, cap, sp.ok, sp.kmax, size, sp.free, sp.idxs)
    out.order = sorted(sp.order, key=lambda c: -size[c])
    out.nz = [[(d, v) for d, v in enumerate(row) if v] for row in vec]
    out.folded = sorted(folded)
    return out


class Exhausted(Exception):
    """The deadline passed during the search."""


class _Search:
    def __init__(self, p: Problem, sp: _Space, deadline: float) -> None:
        self.p = p
        self.sp = sp
        self.deadline = deadline
        self.rem = [sum(p.items[i].mult for i in idx) for idx in sp.idxs]
        self.unused = [len(nt.nodes) for nt in p.types]
        ndim = len(sp.cap[0]) if sp.cap else 0
        self.ndim = ndim
        self.demand = [0] * ndim
        for c in sp.order:
            for d, v in sp.nz[c]:
                self.demand[d] += self.rem[c] * v
        # Capacity of the unused nodes per dimension: the finite part, and how many unused
        # nodes are unbounded there (kept up to date by `apply`).
        self.capfin = [0] * ndim
        self.capinf = [0] * ndim
        for t, m in enumerate(self.unused):
            self._count_type(t, m)
        self._types_of: dict[tuple[bool, ...], list[int]] = {}
        by_row: dict[tuple[int, ...], list[int]] = {}
        for c in sp.folded:
            by_row.setdefault(tuple(sp.kmax[c]), []).append(c)
        # (kmax row, its folded classes, their most copies)
        self._folded = [(row, cs, max(self.rem[c] for c in cs)) for row, cs in by_row.items()]
        self.complete = True
        self.steps = 0
        self.rng: random.Random | None = None

    def _count_type(self, t: int, m: int) -> None:
        for d, c in enumerate(self.sp.cap[t]):
            if c >= INF:
                self.capinf[d] += m
            else:
                self.capfin[d] += c * m

    def slack(self) -> list[int]:
        return [
            INF if self.capinf[d] else self.capfin[d] - self.demand[d] for d in range(self.ndim)
        ]

    def key(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (tuple(self.rem), tuple(self.unused))

    def apply(self, t: int, fill: Fill, sign: int) -> None:
        nz = self.sp.nz
        self.unused[t] -= sign
        self._count_type(t, -sign)
        for c, k in fill:
            self.rem[c] -= sign * k
            for d, v in nz[c]:
                self.demand[d] -= sign * v * k

    def done(self) -> bool:
        return not any(self.rem[c] for c in self.sp.order)

    def hardest(self) -> int:
        sp = self.sp
        types = self.type_counts()
        left = [c for c in sp.order if self.rem[c]]
        return min(left, key=lambda c: (types[c], -sp.size[c]))

    def type_counts(self) -> list[int]:
        """Class -> node types with unused nodes it may use (cached per set of such types)."""
        avail = tuple(m > 0 for m in self.unused)
        got = self._types_of.get(avail)
        if got is None:
            ok = self.sp.ok
            got = [sum(1 for t, a in enumerate(avail) if a and row[t]) for row in ok]
            self._types_of[avail] = got
        return got

    def room_left(self) -> bool:
        """Every class with an own dimension still has nodes enough for its copies."""
        for row, members, most in self._folded:
            room = sum(m * k for m, k in zip(self.unused, row, strict=True))
            if room < most and any(self.rem[c] > room for c in members):
                return False
        return True

    def lower(self, t: int, slack: list[int]) -> list[int]:
        """What a fill of a node of type `t` must use of each dimension (more waste than
        the slack is a dead end)."""
        cap = self.sp.cap[t]
        return [
            cap[d] - slack[d] if cap[d] < INF and slack[d] < INF else 0 for d in range(self.ndim)
        ]

    def alternatives(self) -> Iterator[tuple[int, Fill]]:
        sp = self.sp
        slack = self.slack()
        first = self.hardest()
        types = [t for t in range(len(self.unused)) if self.unused[t] and sp.kmax[first][t]]
        types.sort(key=lambda t: sum(min(c, 1 << 40) for c in sp.cap[t]))
        if self.rng is not None:
            self.rng.shuffle(types)
        for t in types:
            lower = self.lower(t, slack)
            if self.rng is None:
                yield from ((t, f) for f in self.fills(t, first, lower))
                continue
            # A restart: the same fills, best-filled first with ties in random order.
            got = list(self.fills(t, first, lower))
            waste = {f: self._waste(t, f) for f in got}
            keys = {f: (round(waste[f], 2), self.rng.random()) for f in got}
            yield from ((t, f) for f in sorted(got, key=keys.__getitem__))

    def _waste(self, t: int, fill: Fill) -> float:
        cap = self.sp.cap[t]
        used = [0] * self.ndim
        for c, k in fill:
            for d, v in self.sp.nz[c]:
                used[d] += k * v
        return sum((cap[d] - used[d]) / cap[d] for d in range(self.ndim) if 0 < cap[d] < INF)

    def fills(self, t: int, first: int, lower: list[int]) -> Iterator[Fill]:
        """Maximal fills of an empty node of type `t` with at least one copy of `first`,
        loading every dimension d to at least lower[d]; best-filled first."""
        cands = [first] + [
            c for c in self.sp.order if c != first and self.rem[c] and self.sp.ok[c][t]
        ]
        filler = _Filler(self, t, cands, lower)
        for produced, fill in enumerate(filler.run(), start=1):
            yield fill
            if produced >= FILL_LIMIT:
                self.complete = False
                return

    def _tick(self) -> None:
        self.steps += 1
        if self.steps & 1023 == 0 and time.monotonic() > self.deadline:
            raise Exhausted


def _suffix(rows: list[list[int]], ndim: int, op: Any, empty: int) -> list[list[int]]:
    out = [[empty] * ndim for _ in range(len(rows) + 1)]
    for i in range(len(rows) - 1, -1, -1):
        out[i] = [op(out[i + 1][d], rows[i][d]) for d in range(ndim)]
    return out


class _Filler:
    """Enumerates the fills of one node (an explicit stack, no recursion).

    Prunes with two upper bounds on what the later candidates can still add in a dimension:
    all their copies, and (the residual // their smallest size) copies of their largest.
    """

    def __init__(self, s: _Search, t: int, cands: list[int], lower: list[int]) -> None:
        sp = s.sp
        self.s, self.t, self.cands, self.lower = s, t, cands, lower
        self.cap = sp.cap[t]
        self.ndim = s.ndim
        self.vec = [sp.vec[c] for c in cands]
        self.nz = [[(d, v) for d, v in sp.nz[c] if self.cap[d] < INF] for c in cands]
        self.limit = [min(s.rem[c], sp.kmax[c][t]) for c in cands]
        nd = self.ndim
        self.pot = _suffix(
            [[k * v for v in vec] for k, vec in zip(self.limit, self.vec, strict=True)],
            nd,
            lambda a, b: a + b,
            0,
        )
        self.maxv = _suffix(self.vec, nd, max, 0)
        self.minv = _suffix([[v or INF for v in vec] for vec in self.vec], nd, min, INF)
        self.load = [0] * nd
        self.chosen = [0] * len(cands)
        self.short = [d for d in range(nd) if lower[d] > 0]  # dimensions with a lower bound

    def room(self, i: int) -> int:
        k = self.limit[i]
        cap, load = self.cap, self.load
        for d, v in self.nz[i]:
            q = (cap[d] - load[d]) // v
            if q < k:
                k = q
        return max(k, 0)

    def set(self, i: int, k: int) -> None:
        delta = k - self.chosen[i]
        if delta:
            for d, v in self.s.sp.nz[self.cands[i]]:
                self.load[d] += delta * v
            self.chosen[i] = k

    def next_pos(self, i: int) -> int:
        n = len(self.cands)
        while i < n and not self.room(i):
            i += 1
        return i

    def bounds(self, i: int) -> tuple[bool, bool]:
        """(hopeless by all copies, hopeless by the count bound) from position `i` on."""
        by_count = False
        for d in self.short:
            need = self.lower[d] - self.load[d]
            if need <= 0:
                continue
            if self.pot[i][d] < need:
                return True, True
            mv = self.minv[i][d]
            q = 0 if mv >= INF else (self.cap[d] - self.load[d]) // mv
            if q * self.maxv[i][d] < need:
                by_count = True
        return False, by_count

    def maximal(self) -> bool:
        return all(
            self.chosen[i] >= self.limit[i] or not self.room(i) for i in range(len(self.cands))
        )

    def run(self) -> Iterator[Fill]:
        n = len(self.cands)
        stack: list[list[int]] = [[0, self.room(0)]]
        while stack:
            self.s._tick()
            pos, k = stack[-1]
            if pos == n:
                stack.pop()
                if all(self.load[d] >= self.lower[d] for d in self.short) and self.maximal():
                    yield tuple((self.cands[i], c) for i, c in enumerate(self.chosen) if c)
                continue
            if k < (1 if pos == 0 else 0):
                self.set(pos, 0)
                stack.pop()
                continue
            self.set(pos, k)
            stack[-1][1] = k - 1
            if self.bounds(pos + 1)[0]:  # fewer copies here only load less: position done
                self.set(pos, 0)
                stack.pop()
                continue
            nxt = self.next_pos(pos + 1)
            if not any(self.bounds(nxt)):
                stack.append([nxt, self.room(nxt) if nxt < n else 0])


@dataclass
class _Frame:
    key: tuple[tuple[int, ...], tuple[int, ...]]
    alts: Iterator[tuple[int, Fill]]
    applied: tuple[int, Fill] | None = None


def _l1_ok(s: _Search) -> bool:
    return all(x >= 0 for x in s.slack()) and s.room_left()


def _placement(p: Problem, sp: _Space, path: list[tuple[int, Fill]]) -> list[list[int]]:
    next_node = [0] * len(p.types)
    spots: list[list[int]] = [[] for _ in sp.idxs]
    for t, fill in path:
        n = p.types[t].nodes[next_node[t]]
        next_node[t] += 1
        for c, k in fill:
            spots[c].extend([n] * k)
    for c in sp.free:
        node = next(
            (p.types[t].nodes[0] for t in range(len(p.types)) if sp.ok[c][t]),
            None,
        )
        if node is None:
            return []
        spots[c] = [node] * sum(p.items[i].mult for i in sp.idxs[c])
    placement: list[list[int]] = [[] for _ in p.items]
    for c, idx in enumerate(sp.idxs):
        pos = 0
        for i in idx:
            m = p.items[i].mult
            placement[i] = spots[c][pos : pos + m]
            pos += m
    return placement


def applicable(p: Problem) -> bool:
    """True if the search handles this problem (no creations, no domain rules)."""
    return not p.created and not p.rules and bool(p.types)


class _Restart(Exception):
    """The run used its budget of fills: start over in another order."""


def _run(
    s: _Search,
    memo: set[tuple[tuple[int, ...], tuple[int, ...]]],
    budget: int | None,
) -> list[tuple[int, Fill]] | None:
    """One depth-first run; the path of fills that places everything, or None when every
    alternative failed. Raises `_Restart` after `budget` fills (None: no limit)."""
    stack = [_Frame(s.key(), s.alternatives())]
    tried = 0
    while stack:
        frame = stack[-1]
        if frame.applied is not None:
            s.apply(*frame.applied, sign=-1)
            frame.applied = None
        alt = next(frame.alts, None)
        if alt is None:
            if len(memo) < MEMO_LIMIT:
                memo.add(frame.key)
            stack.pop()
            continue
        tried += 1
        if budget is not None and tried > budget:
            for f in reversed(stack):
                if f.applied is not None:
                    s.apply(*f.applied, sign=-1)
            raise _Restart
        s.apply(*alt, sign=1)
        frame.applied = alt
        if s.done():
            return [f.applied for f in stack if f.applied is not None]
        key = s.key()
        if key in memo or not _l1_ok(s):
            continue
        stack.append(_Frame(key, s.alternatives()))
    return None


def search(p: Problem, deadline: float) -> tuple[str, list[list[int]] | None]:
    """("feasible", placement) | ("infeasible", None) | ("unknown", None).

    Runs restart with a doubling budget of fills, in best-first order first and then with
    ties broken at random (feasible packings have many solutions; one bad early choice should
    not cost the whole time); failed states carry over, so the last run is exhaustive.
    """
    if not applicable(p):
        return ("unknown", None)
    try:
        sp = _fold_private(p, _space(p, deadline))
    except Timeout:
        return ("unknown", None)
    s = _Search(p, sp, deadline)
    if s.done():
        return ("feasible", _placement(p, sp, []))
    if not _l1_ok(s):
        return ("infeasible", None)
    memo: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    budget = 4 * len(p.node_ids) + 64
    try:
        for attempt in range(RESTARTS + 1):
            limit = None if attempt == RESTARTS else budget << attempt
            s.rng = None if attempt == 0 else random.Random(attempt)
            try:
                path = _run(s, memo, limit)
            except _Restart:
                continue
            if path is not None:
                return ("feasible", _placement(p, sp, path))
            return ("infeasible", None) if s.complete else ("unknown", None)
    except Exhausted:
        return ("unknown", None)
    return ("unknown", None)
