"""Tabucol: a local search over colourings, one conflicting vertex moved at a time.

Hertz and de Werra's search with Galinier and Hao's tenure: each step moves a vertex that
shares its colour with a neighbour to the colour with the fewest conflicts, never back to a
colour it left recently unless that gives the fewest conflicts yet. The graph engine runs
it on the conflict graph of separations (nodes are colours; `_graph.tabu_colour`).

A step scans every (conflicting vertex, colour) pair, so its cost is the Python around
that scan: the state is flat lists of ints (no tuple keys, no per-step attribute lookups),
and `run` takes many steps per call and looks at the clock every `CLOCK_EVERY` of them.
A heuristic: the caller checks whatever colouring it ends with.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence

#: Tenure: TABU_FACTOR x the conflicting vertices plus a random 0..TABU_RANDOM-1 steps.
TABU_FACTOR = 0.6
TABU_RANDOM = 10

#: Steps between two looks at the clock (and at the stop event).
CLOCK_EVERY = 256


class Tabucol:
    """The state of a run: a colour per vertex, per vertex and colour how many neighbours
    have it, the conflicting vertices, and when each (vertex, colour) stops being tabu.

    Args:
        adj: The neighbours of each vertex.
        allowed: The colours each vertex may take (none empty).
        colours: How many colours there are.
        seed: The random start and tie-breaks.
        start: A colour per vertex to begin from (else random among the allowed ones).
    """

    def __init__(
        self,
        adj: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[int]],
        colours: int,
        seed: int = 0,
        start: Sequence[int] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.k = colours
        self.allowed = [list(cs) for cs in allowed]
        self.adj = [list(a) for a in adj]
        self.col = list(start) if start is not None else [self.rng.choice(cs) for cs in allowed]
        self.gamma = [[0] * colours for _ in self.adj]
        for v, near in enumerate(self.adj):
            row = self.gamma[v]
            for u in near:
                row[self.col[u]] += 1
        self.bad = {v for v in range(len(self.adj)) if self.gamma[v][self.col[v]]}
        self.tabu = [0] * (len(self.adj) * colours)  # v * k + c -> first step it is free
        self.step = 0
        self.conflicts = sum(self.gamma[v][self.col[v]] for v in range(len(self.adj))) // 2
        self.fewest = self.conflicts

    def solved(self) -> bool:
        """No two neighbours share a colour."""
        return not self.bad

    def run(
        self, deadline: float, stop: threading.Event | None = None, cpu: float | None = None
    ) -> bool:
        """Steps until no conflict is left (True), or `deadline` (`time.monotonic()`),
        `stop`, or `cpu` (a `time.thread_time()` value) (False)."""
        while self.bad:
            if (stop is not None and stop.is_set()) or time.monotonic() > deadline:
                return False
            if cpu is not None and time.thread_time() > cpu:
                return False
            self.steps(CLOCK_EVERY)
        return True

    def steps(self, count: int) -> None:
        """Up to `count` steps (fewer once no conflict is left)."""
        k, col, gamma, adj = self.k, self.col, self.gamma, self.adj
        allowed, bad, tabu = self.allowed, self.bad, self.tabu
        choice, randrange = self.rng.choice, self.rng.randrange
        step, conflicts, fewest = self.step, self.conflicts, self.fewest
        for _ in range(count):
            if not bad:
                break
            step += 1
            moves = _best_moves(bad, gamma, col, allowed, tabu, k, fewest - conflicts, step)
            if not moves:
                continue
            v, c = divmod(choice(moves), k)
            old = col[v]
            tabu[v * k + old] = step + int(TABU_FACTOR * len(bad)) + randrange(TABU_RANDOM)
            gv = gamma[v]
            conflicts += gv[c] - gv[old]
            if conflicts < fewest:
                fewest = conflicts
            col[v] = c
            for u in adj[v]:
                gu = gamma[u]
                gu[old] -= 1
                gu[c] += 1
                if gu[col[u]]:
                    bad.add(u)
                else:
                    bad.discard(u)
            if gv[c]:
                bad.add(v)
            else:
                bad.discard(v)
        self.step, self.conflicts, self.fewest = step, conflicts, fewest


def _best_moves(
    bad: set[int],
    gamma: list[list[int]],
    col: list[int],
    allowed: list[list[int]],
    tabu: list[int],
    k: int,
    floor: int,
    step: int,
) -> list[int]:
    """The moves (v * k + c) of a conflicting vertex to another colour with the fewest
    conflicts after; a tabu one only when it goes below `floor` (the fewest yet)."""
    best = 1 << 30
    moves: list[int] = []
    for v in bad:
        gv = gamma[v]
        cv = col[v]
        here = gv[cv]
        base = v * k
        for c in allowed[v]:
            delta = gv[c] - here
            if delta > best or c == cv:
                continue
            if delta >= floor and tabu[base + c] > step:
                continue
            if delta < best:
                best = delta
                moves = [base + c]
            else:
                moves.append(base + c)
    return moves
