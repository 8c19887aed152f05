"""A first descent of the packing search that picks balanced fills (a heuristic: it never
proves anything infeasible, it only finds packings).

The exact search tries the maximal fills of a node in a fixed order: each class as many
copies as fit, the first class first. On large clusters that order fails twice: a node
gets all the copies of the hardest class it can hold (a node of memory-heavy tasks wastes
its CPU), and hundreds of alternatives differ only in which tiny tasks take the last units.
The dive instead:

* pools classes that are interchangeable on every node (same amounts, same node types, same
  most copies per node: e.g. the tasks of many anti-affinity groups) and takes a pool's
  copies from the members with the most copies left, so their order is never a choice;
* builds a few candidate fills of each node type: each count of the hardest pool, each
  count of the next, the rest completed largest first;
* takes the candidate that uses up the least of the slack, resource by resource
  (wasting a tight resource costs more than wasting a loose one).

Candidates are kept per hardest pool and reused while they still apply, so most steps cost
a few comparisons. The dive does not backtrack: when no candidate applies it gives up and
the exact search takes over.
"""

from __future__ import annotations

import time
from collections import defaultdict

from escher.verify.engines._search import (
    INF,
    Fill,
    _fold_private,
    _l1_ok,
    _placement,
    _Search,
    _space,
    applicable,
)
from escher.verify.model import Problem

#: Counts tried per pool when building candidates (evenly spread from the most to one).
COUNTS = 12

PoolFill = tuple[tuple[int, int], ...]  # (pool, copies)
Candidate = tuple[float, int, PoolFill]  # (cost, node type, fill)


class _Pools:
    """Classes grouped by what a node sees of them."""

    def __init__(self, s: _Search) -> None:
        sp = s.sp
        by_key: dict[tuple[object, ...], list[int]] = defaultdict(list)
        for c in sp.order:
            by_key[(tuple(sp.vec[c]), tuple(sp.ok[c]), tuple(sp.kmax[c]))].append(c)
        self.members = list(by_key.values())
        self.s = s
        first = [m[0] for m in self.members]
        self.nz = [sp.nz[c] for c in first]
        self.kmax = [sp.kmax[c] for c in first]
        self.size = [sp.size[c] for c in first]
        self.order = sorted(range(len(self.members)), key=lambda q: -self.size[q])
        # (dimension, least amount) for dimensions every pool uses: a node with less room
        # left there takes nothing more
        floor: dict[int, int] = {}
        for nz in self.nz:
            have = dict(nz)
            for d in range(s.ndim):
                floor[d] = min(floor.get(d, INF), have.get(d, 0))
        self.floor = [(d, v) for d, v in floor.items() if v > 0]

    def avail(self, q: int, t: int) -> int:
        """Copies of pool `q` one node of type `t` can take, as far as the pool goes."""
        k = self.kmax[q][t]
        rem = self.s.rem
        members = self.members[q]
        if len(members) == 1:
            return min(rem[members[0]], k)
        return sum(min(rem[c], k) for c in members)

    def left(self, q: int) -> int:
        rem = self.s.rem
        return sum(rem[c] for c in self.members[q])

    def expand(self, t: int, fill: PoolFill) -> Fill:
        """The fill in classes: each pool's copies from its members with most copies left."""
        rem = self.s.rem
        out: list[tuple[int, int]] = []
        for q, k in fill:
            cap = self.kmax[q][t]
            for c in sorted(self.members[q], key=lambda c: -rem[c]):
                if k == 0:
                    break
                take = min(k, rem[c], cap)
                if take:
                    out.append((c, take))
                    k -= take
        return tuple(out)


def _counts(most: int, least: int) -> list[int]:
    """Up to `COUNTS` values from `most` down to `least`, both included."""
    if most - least < COUNTS:
        return list(range(most, least - 1, -1))
    step = (most - least) / (COUNTS - 1)
    return sorted({round(most - i * step) for i in range(COUNTS)}, reverse=True)


class _Dive:
    def __init__(self, s: _Search, deadline: float) -> None:
        self.s = s
        self.deadline = deadline  # building candidates stops there (many shapes cost)
        self.pools = _Pools(s)
        self.cache: dict[int, list[Candidate]] = {}

    def hardest(self) -> int:
        """The pool with copies left on the fewest node types, then the largest (as
        `_Search.hardest` picks a class)."""
        pools = self.pools
        types = self.s.type_counts()
        left = [q for q in pools.order if pools.left(q)]
        return min(left, key=lambda q: (types[pools.members[q][0]], -pools.size[q]))

    def load(self, fill: PoolFill) -> list[int]:
        out = [0] * self.s.ndim
        for q, k in fill:
            for d, v in self.pools.nz[q]:
                out[d] += k * v
        return out

    def applies(self, t: int, fill: PoolFill, slack: list[int]) -> bool:
        s, pools = self.s, self.pools
        if not s.unused[t] or any(pools.avail(q, t) < k for q, k in fill):
            return False
        lower = s.lower(t, slack)
        return all(x >= y for x, y in zip(self.load(fill), lower, strict=True))

    def cost(self, t: int, load: list[int], slack: list[int]) -> float:
        cap = self.s.sp.cap[t]
        out = 0.0
        for d, used in enumerate(load):
            if cap[d] < INF and slack[d] < INF:
                out += (cap[d] - used) / max(slack[d], 1)
        return out

    def build(self, first: int, slack: list[int]) -> list[Candidate]:
        s, pools = self.s, self.pools
        out: set[Candidate] = set()
        for t in range(len(s.unused)):
            if not s.unused[t] or not pools.avail(first, t):
                continue
            others = [q for q in pools.order if q != first and pools.avail(q, t)]
            for fill in self._fills(t, first, others):
                if self.applies(t, fill, slack):
                    out.add((self.cost(t, self.load(fill), slack), t, fill))
        return sorted(out)

    def _fills(self, t: int, first: int, others: list[int]) -> list[PoolFill]:
        pools = self.pools
        cap = self.s.sp.cap[t]
        fills: list[PoolFill] = []
        for k0 in _counts(pools.avail(first, t), 1):
            if time.monotonic() > self.deadline:
                break
            load = [0] * len(cap)
            for d, v in pools.nz[first]:
                load[d] += k0 * v
            if any(x > c for x, c in zip(load, cap, strict=True)):
                continue
            second = next((i for i, q in enumerate(others) if self._room(q, t, load)), None)
            if second is None:
                fills.append(((first, k0),))
                continue
            for k1 in _counts(self._room(others[second], t, load), 0):
                fill = [(first, k0)]
                used = list(load)
                for i, q in enumerate(others[second:]):
                    k = k1 if i == 0 else self._room(q, t, used)
                    if k:
                        fill.append((q, k))
                        for d, v in pools.nz[q]:
                            used[d] += k * v
                        if any(cap[d] - used[d] < v for d, v in pools.floor):
                            break
                fills.append(tuple(fill))
        return fills

    def _room(self, q: int, t: int, load: list[int]) -> int:
        cap = self.s.sp.cap[t]
        k = self.pools.avail(q, t)
        for d, v in self.pools.nz[q]:
            if cap[d] < INF:
                k = min(k, (cap[d] - load[d]) // v)
        return max(k, 0)

    def step(self) -> tuple[int, Fill] | None:
        """The next node's type and fill, or None when no candidate applies."""
        first = self.hardest()
        slack = self.s.slack()
        cands = self.cache.get(first)
        built = cands is None
        if cands is None:
            cands = self.cache[first] = self.build(first, slack)
        while True:
            while cands:
                _, t, fill = cands[0]
                if self.applies(t, fill, slack):
                    return t, self.pools.expand(t, fill)
                cands.pop(0)
            if built:
                return None
            cands = self.cache[first] = self.build(first, slack)
            built = True


def dive(s: _Search, deadline: float) -> list[tuple[int, Fill]] | None:
    """The path of fills that places everything, or None (the search state is restored)."""
    d = _Dive(s, deadline)
    path: list[tuple[int, Fill]] = []
    while not s.done():
        got = d.step() if time.monotonic() < deadline else None
        if got is not None:
            s.apply(*got, sign=1)
            path.append(got)
        if got is None or not _l1_ok(s):
            for t, fill in reversed(path):
                s.apply(t, fill, sign=-1)
            return None
    return path


def find(p: Problem, deadline: float) -> list[list[int]] | None:
    """A placement of a problem the packing search handles, found by one dive; None if the
    dive got stuck, ran out of time, or the problem is not one for the search."""
    if not applicable(p):
        return None
    sp = _fold_private(p, _space(p, deadline))
    s = _Search(p, sp, deadline)
    if not _l1_ok(s):
        return None
    path = [] if s.done() else dive(s, deadline)
    return None if path is None else _placement(p, sp, path) or None
