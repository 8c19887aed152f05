"""Tabucol with capacities and swap moves: colourings whose classes must also fit the nodes.

When the nodes hold exactly their share (an equitable colouring: 1,000 tasks on 4 nodes of
250 each), a single copy cannot change node without overfilling another, so one-move
Tabucol pays a capacity penalty for every step and wanders (an outside construction with
4,000 pairs stayed ~30 conflicts away after 2,500 steps of 4 ms). This search adds the
move that equitable-colouring searches use: two copies of equal loads trade nodes, which
leaves every node's load as it was. Each step takes, over all copies at once (numpy):

* one-moves of a conflicting copy or of a copy on an overfilled node, scored by the
  conflicts plus the overfill they change (a copy's worth of overfill costs about one);
* swaps of a conflicting copy `v` (on node `a`) with a copy `u` of the same loads on
  another node `c`: the conflicts `v` gains on `c` plus those `u` gains on `a` (two fewer
  when they are neighbours), the best `u` per (load class, node, target) by one reduction.

Moves back to a node a copy left recently are tabu (Galinier and Hao's tenure) unless they
give the lowest cost yet. A heuristic: the caller checks whatever placement it ends with.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

#: Tenure: TENURE_FACTOR x the conflicting copies plus a random 0..TENURE_RANDOM-1 steps.
TENURE_FACTOR = 0.6
TENURE_RANDOM = 10

#: Steps between two looks at the clock.
CLOCK_EVERY = 64

_INF = float("inf")


def swap_tabu(
    adj: Sequence[Sequence[int]],
    allowed: Sequence[Sequence[int]],
    colours: int,
    loads: Sequence[Sequence[float]],
    caps: Sequence[Sequence[float | None]],
    deadline: float,
    stop: threading.Event | None = None,
    seed: int = 0,
    start: Sequence[int] | None = None,
    cpu: float | None = None,
) -> list[int] | None:
    """A colour per vertex with no neighbours alike and no colour over a capacity, or None
    at `deadline`, once `stop` is set, or past `cpu`.

    Args:
        adj: The neighbours of each vertex.
        allowed: The colours each vertex may take (none empty).
        colours: How many colours (nodes) there are.
        loads: Per capacity row, each vertex's load (in units of the row's largest load).
        caps: Per capacity row, each colour's capacity in the same units (None: unbounded).
        deadline: A `time.monotonic()` value.
        stop: Set from another thread to stop at once.
        seed: The random start and tie-breaks.
        start: A colour per vertex to begin from (else random among the allowed ones).
        cpu: A `time.thread_time()` value: this thread's CPU budget (None: no budget).
    """
    search = _Search(adj, allowed, colours, loads, caps, seed, start)
    while not search.solved():
        if search.step % CLOCK_EVERY == 0 and (
            time.monotonic() > deadline
            or (stop is not None and stop.is_set())
            or (cpu is not None and time.thread_time() > cpu)
        ):
            return None
        search.move()
    return [int(c) for c in search.col]


class _Search:
    """The state: a colour per vertex, per vertex and colour how many neighbours have it,
    each colour's load per row, and when each (vertex, colour) stops being tabu."""

    def __init__(
        self,
        adj: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[int]],
        colours: int,
        loads: Sequence[Sequence[float]],
        caps: Sequence[Sequence[float | None]],
        seed: int,
        start: Sequence[int] | None,
    ) -> None:
        import numpy as np

        self.np = np
        n, k = len(adj), colours
        self.n, self.k = n, k
        self.rng = np.random.default_rng(seed)
        self.ok = np.zeros((n, k), dtype=bool)
        for v, cs in enumerate(allowed):
            self.ok[v, list(cs)] = True
        if start is None:
            col = [cs[int(self.rng.integers(len(cs)))] for cs in allowed]
        else:
            col = list(start)
        self.col = np.asarray(col, dtype=np.int64)
        self.indptr = np.zeros(n + 1, dtype=np.int64)
        self.indptr[1:] = np.cumsum([len(a) for a in adj])
        self.nbr = np.asarray([u for a in adj for u in a], dtype=np.int64)
        self.src = np.repeat(np.arange(n), np.diff(self.indptr))
        self.gamma = np.zeros((n, k), dtype=np.int64)
        np.add.at(self.gamma, (self.src, self.col[self.nbr]), 1)
        self.ar = np.arange(n)
        self.load = np.asarray(loads, dtype=float).reshape(len(loads), n)
        self.cap = np.asarray(
            [[_INF if c is None else c for c in row] for row in caps], dtype=float
        ).reshape(len(caps), k)
        self.use = np.zeros((len(loads), k))
        for r in range(len(loads)):
            np.add.at(self.use[r], self.col, self.load[r])
        # copies of equal loads on every row may trade nodes without changing any load
        _, self.cls = np.unique(self.load.T, axis=0, return_inverse=True)
        self.cls = self.cls.reshape(-1)
        self.classes = int(self.cls.max()) + 1 if n else 0
        self.tabu = np.zeros((n, k), dtype=np.int64)
        self.step = 0
        self.conflicts = int(self.gamma[self.ar, self.col].sum()) // 2
        self.over = self._overfill()
        self.fewest = self.conflicts + self.over

    def _overfill(self) -> float:
        return float(self.np.maximum(0.0, self.use - self.cap).sum())

    def solved(self) -> bool:
        """No two neighbours alike and no colour over a capacity."""
        return self.conflicts == 0 and self.over < 1e-9

    def move(self) -> None:
        """One step: the best one-move or swap that is not tabu (random among equals)."""
        np = self.np
        self.step += 1
        col, gamma, ar = self.col, self.gamma, self.ar
        here = gamma[ar, col]
        bad = here > 0
        cost = self.conflicts + self.over
        floor = self.fewest - cost - 1e-9  # a tabu move that beats the best yet is allowed
        dconf = (gamma - here[:, None]).astype(float)
        # one-moves: the conflicts and the overfill a copy changes by leaving and arriving
        over_now = np.maximum(0.0, self.use - self.cap)
        leave = np.zeros(self.n)
        enter = np.zeros((self.n, self.k))
        for r in range(len(self.load)):
            ld = self.load[r]
            leave += np.maximum(0.0, self.use[r, col] - ld - self.cap[r, col]) - over_now[r, col]
            enter += (
                np.maximum(0.0, self.use[r][None, :] + ld[:, None] - self.cap[r][None, :])
                - over_now[r][None, :]
            )
        one = dconf + leave[:, None] + enter
        movers = bad | (leave < -1e-9)
        blocked = ~self.ok | ~movers[:, None]
        blocked[ar, col] = True
        tabu = self.tabu > self.step
        noise = self.rng.random((self.n, self.k)) * 1e-6
        one = np.where(blocked | (tabu & (one >= floor)), _INF, one + noise)
        best_one = float(one.min())
        best_swap, pair = self._best_swap(dconf, bad, tabu, noise)
        if best_one == _INF and best_swap == _INF:
            return
        if best_swap < best_one and pair is not None:
            v, u = pair
            a, c = int(col[v]), int(col[u])
            self._apply(v, c)
            self._apply(u, a)
        else:
            flat = int(one.argmin())
            self._apply(flat // self.k, flat % self.k)
        self.fewest = min(self.fewest, self.conflicts + self.over)

    def _best_swap(
        self, dconf: object, bad: object, tabu: object, noise: object
    ) -> tuple[float, tuple[int, int] | None]:
        """The best trade of nodes between a conflicting copy and a copy of its load class
        elsewhere: its score and the two copies."""
        np = self.np
        d, isbad, tb, nz = (
            np.asarray(dconf),
            np.asarray(bad),
            np.asarray(tabu),
            np.asarray(noise),
        )
        vs = np.nonzero(isbad)[0]
        if not len(vs):
            return _INF, None
        col, k = self.col, self.k
        # u -> colour a: its conflicts there, not tabu, allowed, not its own colour
        arrive = np.where(tb | ~self.ok, _INF, d + nz)
        arrive[self.ar, col] = _INF
        key = self.cls * k + col
        order = np.argsort(key, kind="stable")
        keys, starts = np.unique(key[order], return_index=True)
        best = np.full((self.classes * k, k), _INF)
        best[keys] = np.minimum.reduceat(arrive[order], starts, axis=0)
        # v -> colour c (not tabu), paired with the best u of v's class on c going to v's
        go = np.where(tb[vs] | ~self.ok[vs], _INF, d[vs])
        a = col[vs]
        rows = self.cls[vs][:, None] * k + np.arange(k)[None, :]
        swap = go + best[rows, a[:, None]]
        swap[np.arange(len(vs)), a] = _INF
        # neighbours: each leaves the other's conflicts (two fewer than counted)
        e_bad = isbad[self.src] & (self.cls[self.src] == self.cls[self.nbr])
        e_bad &= col[self.src] != col[self.nbr]
        sv, su = self.src[e_bad], self.nbr[e_bad]
        near = np.full(1, _INF)
        if len(sv):
            near = (
                np.where(tb[sv, col[su]] | ~self.ok[sv, col[su]], _INF, d[sv, col[su]])
                + arrive[su, col[sv]]
                - 2.0
            )
        m_far = float(swap.min())
        m_near = float(near.min())
        if m_far == _INF and m_near == _INF:
            return _INF, None
        if m_near <= m_far:
            j = int(near.argmin())
            return m_near, (int(sv[j]), int(su[j]))
        flat = int(swap.argmin())
        i, c = divmod(flat, k)
        v = int(vs[i])
        g = int(self.cls[v]) * k + c
        target = best[g, col[v]]
        us = np.nonzero((key == g) & (arrive[:, col[v]] == target))[0]
        return m_far, (v, int(us[0]))

    def _apply(self, v: int, c: int) -> None:
        """Copy `v` to colour `c`: the counts, loads, cost and tabu list follow."""
        np = self.np
        old = int(self.col[v])
        if old == c:
            return
        self.conflicts += int(self.gamma[v, c] - self.gamma[v, old])
        near = self.nbr[self.indptr[v] : self.indptr[v + 1]]
        self.gamma[near, old] -= 1
        self.gamma[near, c] += 1
        self.col[v] = c
        self.use[:, old] -= self.load[:, v]
        self.use[:, c] += self.load[:, v]
        self.over = self._overfill()
        bad = int(np.count_nonzero(self.gamma[self.ar, self.col]))
        self.tabu[v, old] = (
            self.step + int(TENURE_FACTOR * bad) + int(self.rng.integers(TENURE_RANDOM))
        )
