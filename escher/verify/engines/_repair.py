"""Balance, then repair: a witness search for packings at 85-95% of the scarce resources.

First fit class by class gets stuck there with a handful of copies left, and the exact and
neighbourhood searches take seconds to place them. This pass places copy by copy with the
dot-product rule on the room left (`_greedy._balance`), keeps aside what does not fit, and
then makes room for each such copy with ejection moves:

* a copy goes where it fits;
* or into a node from which one copy of another item moves to a node with room for it;
* or in place of a smaller copy, which is set aside instead, so the size of what is set
  aside falls at every such step and the pass ends;
* or into a node from which two copies move out, each to a node with room for it.

It proves nothing infeasible and finds packings only; each is checked as usual.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Mapping

from escher.verify.check import Placement
from escher.verify.engines._greedy import (
    DEADLINE_STRIDE,
    _class_order,
    _order_nodes,
    _Packer,
    classes,
)
from escher.verify.model import Item, Problem, Timeout

#: The balance order scores every node for every class: it runs where classes x nodes is
#: at most this (~0.3 s of CPU); first fit is what scales (family a at 10,000 nodes).
BALANCE_CELLS = 300_000

#: Nodes tried per copy set aside, those that lack least for it first.
NODES_TRIED = 32

#: The repair is tried when the balance order sets aside at most this many copies plus
#: `ASIDE_SHARE` of them all: it closes a few, and hundreds mean an infeasible plan (the
#: one-node-short tight packings set aside 218 of 903) on which it would spend its budget.
ASIDE_FEW = 16
ASIDE_SHARE = 0.01


def applies(p: Problem) -> bool:
    """Items that create nothing, on a problem without creations or domain rules (the
    moves take copies off nodes, which creations and domain counts do not allow), small
    enough for the balance order."""
    return (
        not p.created
        and not p.rules
        and bool(p.types)
        and all(not it.creates and not it.tags for it in p.items)
        and len(classes(p)) * len(p.node_ids) <= BALANCE_CELLS
    )


def _free_share(packer: _Packer, it: Item, n: int, weight: Mapping[int, float]) -> float:
    """What is free on node `n` of each resource `it` needs, as a share of the node's
    capacity, weighted (a resource without a limit counts as all free)."""
    score = 0.0
    for r, w in weight.items():
        c = packer.cap(n, r, it.creates)
        if c is None or c <= 0:
            score += w
            continue
        used = max((packer.used[g].get(n, {}).get(r, 0) for g in it.loads), default=0)
        score += w * (c - used) / c
    return score


class _Moves:
    """A partial placement that never overloads a node, with its copies set aside."""

    def __init__(self, p: Problem, deadline: float) -> None:
        self.p = p
        self.deadline = deadline
        self.packer = _Packer(p)
        self.totals = p.totals()
        self.on: list[dict[int, int]] = [{} for _ in p.node_ids]  # node -> item -> copies
        self.aside: list[int] = []  # one entry per copy set aside
        self.ticks = 0

    def size(self, i: int) -> float:
        it = self.p.items[i]
        return sum(it.need(r) / self.totals[r] for r in it.nonzero if self.totals[r])

    def put(self, i: int, n: int) -> None:
        self.packer.place(self.p.items[i], n, 1)
        self.on[n][i] = self.on[n].get(i, 0) + 1

    def take(self, i: int, n: int) -> None:
        it = self.p.items[i]
        for g, load in it.loads.items():
            used = self.packer.used[g][n]
            for r in it.nonzero:
                if load[r]:
                    used[r] -= load[r]
        left = self.on[n][i] - 1
        if left:
            self.on[n][i] = left
        else:
            del self.on[n][i]

    def fits(self, i: int, n: int) -> bool:
        self._tick()
        return bool(self.packer.fit(self.p.items[i], n, 1))

    def _tick(self) -> None:
        self.ticks += 1
        if self.ticks % DEADLINE_STRIDE == 0 and time.monotonic() > self.deadline:
            raise Timeout

    def lack(self, it: Item, n: int) -> float:
        """What node `n` lacks for one copy of `it`, as shares of the cluster's totals."""
        out = 0.0
        for r in it.nonzero:
            c = self.packer.cap(n, r)
            if c is None:
                continue
            used = max((self.packer.used[g].get(n, {}).get(r, 0) for g in it.loads), default=0)
            short = used + it.need(r) - c
            if short > 0:
                out += short / self.totals[r]
        return out

    def best_node(self, i: int, exclude: int = -1) -> int | None:
        """The node with room for a copy of item `i` that keeps most room (dot-product)."""
        it = self.p.items[i]
        weight = {r: it.need(r) / self.totals[r] for r in it.nonzero if it.need(r)}
        best: tuple[float, int] | None = None
        for n in self._nodes(it):
            if n != exclude and self.fits(i, n):
                score = _free_share(self.packer, it, n, weight)
                if best is None or score > best[0]:
                    best = (score, n)
        return None if best is None else best[1]

    def _nodes(self, it: Item) -> range | frozenset[int]:
        return range(len(self.p.node_ids)) if it.allowed is None else it.allowed


def _balanced(m: _Moves) -> None:
    """Every class copy by copy to the node that keeps most room; what fits nowhere is set
    aside."""
    p = m.p
    for idxs in _class_order(p):
        it = p.items[idxs[0]]
        order = _order_nodes(p, it, "align", m.deadline)
        weight = {r: it.need(r) / m.totals[r] for r in it.nonzero if it.need(r)}
        heap = [
            (-_free_share(m.packer, it, n, weight), j, n)
            for j, n in enumerate(order)
            if m.fits(idxs[0], n)
        ]
        heapq.heapify(heap)
        for i in idxs:
            for _ in range(p.items[i].mult):
                if not heap:
                    m.aside.append(i)
                    continue
                _, j, n = heapq.heappop(heap)
                m.put(i, n)
                if m.fits(i, n):
                    heapq.heappush(heap, (-_free_share(m.packer, it, n, weight), j, n))


def _make_room(m: _Moves, i: int) -> bool:
    """Place one copy of item `i` (set aside) by an ejection move; True if placed."""
    n = m.best_node(i)
    if n is not None:
        m.put(i, n)
        return True
    it = m.p.items[i]
    candidates = sorted(m._nodes(it), key=lambda node: m.lack(it, node))[:NODES_TRIED]
    mine = m.size(i)
    swap: tuple[float, int, int] | None = None  # (size set aside, node, item)
    for n in candidates:
        for j in sorted(m.on[n], key=m.size):
            if j == i:
                continue
            m.take(j, n)
            if m.fits(i, n):
                dest = m.best_node(j, exclude=n)
                if dest is not None:
                    m.put(i, n)
                    m.put(j, dest)
                    return True
                theirs = m.size(j)
                if theirs < mine and (swap is None or theirs < swap[0]):
                    swap = (theirs, n, j)
            m.put(j, n)
    if swap is None:
        return _make_room_two(m, i, candidates)
    _, n, j = swap
    m.take(j, n)
    m.put(i, n)
    m.aside.append(j)
    return True


def _make_room_two(m: _Moves, i: int, candidates: list[int]) -> bool:
    """Place a copy of item `i` where two copies of other items move out, each to a node
    with room for it; True if placed."""
    for n in candidates:
        here = [j for j in sorted(m.on[n], key=m.size, reverse=True) if j != i]
        for a, j in enumerate(here):
            for k in here[a:]:
                if k == j and m.on[n][j] < 2:
                    continue
                m.take(j, n)
                m.take(k, n)
                if m.fits(i, n):
                    m.put(i, n)
                    dj = m.best_node(j, exclude=n)
                    if dj is not None:
                        m.put(j, dj)
                        dk = m.best_node(k, exclude=n)
                        if dk is not None:
                            m.put(k, dk)
                            return True
                        m.take(j, dj)
                    m.take(i, n)
                m.put(j, n)
                m.put(k, n)
    return False


def find(p: Problem, deadline: float) -> Placement | None:
    """A packing of every copy, or None when the copies set aside cannot all be placed
    (or are too many to try).

    Raises:
        Timeout: `deadline` (a `time.monotonic()` value) passed.
    """
    m = _Moves(p, deadline)
    _balanced(m)
    if len(m.aside) > ASIDE_FEW + ASIDE_SHARE * sum(it.mult for it in p.items):
        return None
    while m.aside:
        m.aside.sort(key=m.size)
        i = m.aside.pop()  # the largest first
        if not _make_room(m, i):
            return None
    placement: Placement = [[] for _ in p.items]
    for n, items in enumerate(m.on):
        for i, k in items.items():
            placement[i].extend([n] * k)
    return placement
