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

import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from escher.verify._greedy import classes
from escher.verify._model import Item, Problem

#: Maximal fills tried per (node type, step) before the search stops being exhaustive.
FILL_LIMIT = 200

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


def _space(p: Problem) -> _Space:
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
    ok = [[_fits_alone(p, it, t) for t in range(len(p.types))] for it in cls]
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
    return sp


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
        self.demand = [sum(self.rem[c] * sp.vec[c][d] for c in sp.order) for d in range(ndim)]
        self.capsum = [self._capsum(d) for d in range(ndim)]
        self.complete = True
        self.steps = 0

    def _capsum(self, d: int) -> int:
        total = 0
        for t, m in enumerate(self.unused):
            if m:
                c = self.sp.cap[t][d]
                if c >= INF:
                    return INF
                total += c * m
        return total

    def slack(self) -> list[int]:
        return [
            INF if self.capsum[d] >= INF else self.capsum[d] - self.demand[d]
            for d in range(self.ndim)
        ]

    def key(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (tuple(self.rem), tuple(self.unused))

    def apply(self, t: int, fill: Fill, sign: int) -> None:
        sp = self.sp
        self.unused[t] -= sign
        self.capsum = [self._capsum(d) for d in range(self.ndim)]
        for c, k in fill:
            self.rem[c] -= sign * k
            for d, v in enumerate(sp.vec[c]):
                self.demand[d] -= sign * v * k

    def done(self) -> bool:
        return not any(self.rem[c] for c in self.sp.order)

    def hardest(self) -> int:
        sp = self.sp
        left = [c for c in sp.order if self.rem[c]]

        def key(c: int) -> tuple[int, float]:
            types = sum(1 for t in range(len(self.unused)) if self.unused[t] and sp.ok[c][t])
            return (types, -sp.size[c])

        return min(left, key=key)

    def alternatives(self) -> Iterator[tuple[int, Fill]]:
        sp = self.sp
        first = self.hardest()
        slack = self.slack()
        types = [t for t in range(len(self.unused)) if self.unused[t] and sp.kmax[first][t]]
        types.sort(key=lambda t: sum(min(c, 1 << 40) for c in sp.cap[t]))
        for t in types:
            lower = [
                sp.cap[t][d] - slack[d] if sp.cap[t][d] < INF and slack[d] < INF else 0
                for d in range(self.ndim)
            ]
            yield from ((t, f) for f in self.fills(t, first, lower))

    def fills(self, t: int, first: int, lower: list[int]) -> Iterator[Fill]:
        """Maximal fills of an empty node of type `t` with at least one copy of `first`,
        loading every dimension d to at least lower[d]; iterative, best-filled first."""
        sp = self.sp
        cands = [first] + [c for c in sp.order if c != first and self.rem[c] and sp.ok[c][t]]
        cap = sp.cap[t]
        # potential[i][d]: the most classes cands[i:] could add in dimension d.
        pot = [[0] * self.ndim for _ in range(len(cands) + 1)]
        for i in range(len(cands) - 1, -1, -1):
            c = cands[i]
            k = min(self.rem[c], sp.kmax[c][t])
            pot[i] = [pot[i + 1][d] + k * sp.vec[c][d] for d in range(self.ndim)]
        load = [0] * self.ndim
        chosen: list[int] = [0] * len(cands)
        produced = 0
        # Explicit stack of (position, next k to try) instead of recursion.
        stack: list[list[int]] = [[0, self._room(cands[0], cap, load, t)]]
        while stack:
            self._tick()
            pos, k = stack[-1]
            if pos == len(cands):
                stack.pop()
                if self._maximal(t, cands, chosen, cap, load) and all(
                    load[d] >= lower[d] for d in range(self.ndim)
                ):
                    produced += 1
                    yield tuple((cands[i], chosen[i]) for i in range(len(cands)) if chosen[i])
                    if produced >= FILL_LIMIT:
                        self.complete = False
                        return
                continue
            minimum = 1 if pos == 0 else 0
            if k < minimum:
                stack.pop()
                continue
            c = cands[pos]
            # undo the previous k at this position, set the new one
            self._set(c, chosen, pos, k, load)
            stack[-1][1] = k - 1
            if any(load[d] + pot[pos + 1][d] < lower[d] for d in range(self.ndim)):
                # fewer copies here only load less: this position is done
                self._set(c, chosen, pos, 0, load)
                stack.pop()
                continue
            nxt = pos + 1
            room = self._room(cands[nxt], cap, load, t) if nxt < len(cands) else 0
            stack.append([nxt, room])

    def _set(self, c: int, chosen: list[int], pos: int, k: int, load: list[int]) -> None:
        delta = k - chosen[pos]
        if delta:
            for d, v in enumerate(self.sp.vec[c]):
                load[d] += delta * v
            chosen[pos] = k

    def _room(self, c: int, cap: list[int], load: list[int], t: int) -> int:
        k = min(self.rem[c], self.sp.kmax[c][t])
        for d, v in enumerate(self.sp.vec[c]):
            if v and cap[d] < INF:
                k = min(k, (cap[d] - load[d]) // v)
        return max(k, 0)

    def _maximal(
        self, t: int, cands: list[int], chosen: list[int], cap: list[int], load: list[int]
    ) -> bool:
        for i, c in enumerate(cands):
            # one more copy would fit (rem counts copies not yet in this fill)
            more = self.rem[c] > chosen[i] and chosen[i] < self.sp.kmax[c][t]
            if more and self._room(c, cap, load, t) > 0:
                return False
        return True

    def _tick(self) -> None:
        self.steps += 1
        if self.steps & 1023 == 0 and time.monotonic() > self.deadline:
            raise Exhausted


@dataclass
class _Frame:
    key: tuple[tuple[int, ...], tuple[int, ...]]
    alts: Iterator[tuple[int, Fill]]
    applied: tuple[int, Fill] | None = None


def _l1_ok(s: _Search) -> bool:
    return all(x >= 0 for x in s.slack())


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


def search(p: Problem, deadline: float) -> tuple[str, list[list[int]] | None]:
    """("feasible", placement) | ("infeasible", None) | ("unknown", None)."""
    if not applicable(p):
        return ("unknown", None)
    sp = _space(p)
    s = _Search(p, sp, deadline)
    memo: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    if not _l1_ok(s):
        return ("infeasible", None)
    stack = [_Frame(s.key(), s.alternatives())] if not s.done() else []
    try:
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
            s.apply(*alt, sign=1)
            frame.applied = alt
            if s.done():
                path = [f.applied for f in stack if f.applied is not None]
                return ("feasible", _placement(p, sp, path))
            key = s.key()
            if key in memo or not _l1_ok(s):
                continue
            stack.append(_Frame(key, s.alternatives()))
    except Exhausted:
        return ("unknown", None)
    if s.done() and not stack:
        return ("feasible", _placement(p, sp, []))
    return ("infeasible", None) if s.complete else ("unknown", None)
