"""Zero-slack packings of one resource: fill every node exactly, one node at a time.

A node takes the largest task left, then a depth-first search over the sizes left (in
non-increasing order, random among them) completes it to exactly its capacity. When no
node can be completed from the tasks left, a few filled nodes chosen at random are emptied
and refilled together with the tasks left; the change is kept unless more tasks are left
over after it (a large-neighbourhood search). It only finds witnesses, which go through
the same independent check as every other engine's; it never proves a packing impossible
(the bounds and the arc-flow model do that).

Why: when every node must be full, the MILP solver's search for an integral flow can take
seconds, while exact completion with repair usually finds one in a fraction of a second.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict

#: Search steps one node's completion may take before that try counts as failed.
STEPS_PER_NODE = 2_000
#: A repair step empties at most this many filled nodes ...
REPAIR_NODES = 8
#: ... and refills them this many times (keeping the best).
REPAIR_TRIES = 3

Fill = tuple[tuple[int, int], ...]  # (class, copies) per class, sorted


def fill(
    cap: int, sizes: dict[int, int], copies: dict[int, int], nodes: int, deadline: float
) -> list[Fill] | None:
    """Fills for `nodes` nodes of capacity `cap` that place every copy of every class
    (`sizes`: class -> positive integer size), each node exactly full; None if none was
    found by `deadline` (a `time.monotonic()` value)."""
    if any(w <= 0 for w in sizes.values()):
        return None
    if sum(sizes[c] * k for c, k in copies.items()) != cap * nodes:
        return None
    by_size: dict[int, list[int]] = defaultdict(list)
    for c in sorted(sizes):
        by_size[sizes[c]].append(c)
    left: Counter[int] = Counter()
    for c, k in copies.items():
        left[sizes[c]] += k
    packer = _Packer(cap, sorted(left, reverse=True), random.Random(0))
    bins = packer.fill_all(left)
    while left.total() and time.monotonic() < deadline:
        bins = packer.repair(bins, left)
    if left.total() or len(bins) != nodes:
        return None
    return _as_fills(bins, by_size, copies)


class _Packer:
    """Exact completion of nodes from the sizes left (size -> copies)."""

    def __init__(self, cap: int, sizes: list[int], rng: random.Random) -> None:
        self.cap = cap
        self.sizes = sizes  # every size, largest first
        self.rng = rng
        self.steps = 0

    def fill_all(self, left: Counter[int]) -> list[list[int]]:
        """Complete nodes from `left` (taken from it) until none can be."""
        bins: list[list[int]] = []
        while True:
            b = self.complete(left)
            if b is None:
                return bins
            bins.append(b)

    def repair(self, bins: list[list[int]], left: Counter[int]) -> list[list[int]]:
        """One step of the search: empty a few random nodes and fill them again with the
        tasks left; keep the result unless more is left over (`left` is updated)."""
        k = self.rng.randint(1, min(REPAIR_NODES, len(bins))) if bins else 0
        picked = set(self.rng.sample(range(len(bins)), k))
        pool = Counter(left)
        for j in picked:
            pool.update(bins[j])
        best: tuple[int, list[list[int]], Counter[int]] | None = None
        for _ in range(REPAIR_TRIES):
            trial = Counter(pool)
            refilled = self.fill_all(trial)
            if best is None or trial.total() < best[0]:
                best = (trial.total(), refilled, trial)
            if not trial.total():
                break
        assert best is not None
        if best[0] > left.total():
            return bins
        left.clear()
        left.update(best[2])
        return [b for j, b in enumerate(bins) if j not in picked] + best[1]

    def complete(self, left: Counter[int]) -> list[int] | None:
        """Take the largest size left and complete a node with it exactly; the sizes taken
        (from `left`), or None (nothing taken) if no completion was found."""
        first = next((w for w in self.sizes if left[w] > 0), None)
        if first is None or first > self.cap:
            return None
        left[first] -= 1
        chosen = [first]
        self.steps = 0
        if self._dfs(left, self.cap - first, 0, chosen):
            return chosen
        left[first] += 1
        return None

    def _dfs(self, left: Counter[int], rest: int, lo: int, chosen: list[int]) -> bool:
        if rest == 0:
            return True
        self.steps += 1
        if self.steps > STEPS_PER_NODE:
            return False
        if left[rest] > 0 and rest <= self.sizes[lo]:  # finishes the node
            left[rest] -= 1
            chosen.append(rest)
            return True
        options = [
            i
            for i in range(lo, len(self.sizes))
            if self.sizes[i] < rest and left[self.sizes[i]] > 0
        ]
        self.rng.shuffle(options)
        for i in options:
            w = self.sizes[i]
            left[w] -= 1
            chosen.append(w)
            if self._dfs(left, rest - w, i, chosen):
                return True
            chosen.pop()
            left[w] += 1
            if self.steps > STEPS_PER_NODE:
                return False
        return False


def _as_fills(
    bins: list[list[int]], by_size: dict[int, list[int]], copies: dict[int, int]
) -> list[Fill]:
    """The nodes' sizes as classes: each size's copies dealt from its classes in turn."""
    left = dict(copies)
    fills: list[Fill] = []
    for b in bins:
        counts: dict[int, int] = defaultdict(int)
        for w in b:
            pool = by_size[w]
            while left.get(pool[-1], 0) == 0:
                pool.pop()
            c = pool[-1]
            left[c] -= 1
            counts[c] += 1
        fills.append(tuple(sorted(counts.items())))
    return fills
