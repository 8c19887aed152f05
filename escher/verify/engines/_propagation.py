"""Belief propagation for colourings: a start for the local search of the graph engine.

Each vertex of the conflict graph sends each neighbour, per colour (node), how likely it is
to take that colour without it; a vertex's belief is the product over its neighbours of the
chance that they do not take a colour. On planted colourings with a few colours and a
handful of neighbours per vertex (1,000 tasks, 5,000 separated pairs, 4 nodes), which CDCL
solvers and Tabucol from a random start leave undecided for minutes, the beliefs converge in
a few hundred milliseconds to a colouring with at most a few conflicts; Tabucol removes them
(docs/verify-engines.md). A heuristic: its colouring is only a start, and the caller checks
whatever it ends with.
"""

from __future__ import annotations

import time
from typing import Any

#: Colours (nodes) past which the beliefs are not computed (vertices x colours x degree).
MAX_COLOURS = 64

#: (directed edges) x colours past which the beliefs are not computed.
MAX_CELLS = 4_000_000

#: Iterations of one run at most, and the largest change of a message below which a run
#: has converged.
ITERATIONS = 400
CONVERGED = 1e-4

#: How fast the prior of a vertex follows its beliefs (reinforced belief propagation):
#: messages that do not converge leave ~50 conflicts of 5,000 edges instead of ~250.
REINFORCE = 0.1

#: The damping of each update (the share of the old message kept), by seed in turn: which
#: one converges differs from graph to graph (0.7 colours most planted 1,000-task graphs
#: measured, 0.5 fewer, 0.85 none in `ITERATIONS`).
DAMPINGS = (0.7, 0.6, 0.75, 0.5)


def beliefs_colouring(
    edges: list[tuple[int, int]],
    allowed: list[list[int]],
    colours: int,
    deadline: float,
    seed: int = 0,
) -> list[int] | None:
    """A colour per vertex from the beliefs (the most likely allowed one), the one with the
    fewest conflicts seen (none once the messages converge on a planted colouring); None
    when the problem is too large or the deadline passed.

    Args:
        edges: Pairs (u, v) of vertices that must take different colours.
        allowed: The colours each vertex may take (none empty).
        colours: How many colours there are.
        deadline: A `time.monotonic()` value.
        seed: The random start of the messages (another seed, another colouring).
    """
    if not edges or colours < 2 or colours > MAX_COLOURS:
        return None
    if 2 * len(edges) * colours > MAX_CELLS:
        return None
    import numpy as np

    n = len(allowed)
    rng = np.random.default_rng(seed)
    damping = DAMPINGS[seed % len(DAMPINGS)]
    mask = np.full((n, colours), -1e9)
    for v, cs in enumerate(allowed):
        mask[v, cs] = 0.0
    e = np.asarray(edges, dtype=np.int64)
    half = len(edges)
    # directed edges sorted by target, so a vertex's incoming messages are one slice
    src = np.concatenate([e[:, 0], e[:, 1]])
    dst = np.concatenate([e[:, 1], e[:, 0]])
    by = np.argsort(dst, kind="stable")
    src, dst = src[by], dst[by]
    where = np.empty_like(by)
    where[by] = np.arange(2 * half)
    rev = where[np.concatenate([np.arange(half, 2 * half), np.arange(0, half)])[by]]
    targets, starts = np.unique(dst, return_index=True)
    msg = _normalise(np, rng.dirichlet(np.ones(colours), size=2 * half) * np.exp(mask[src]))
    prior = mask.copy()
    best, fewest = None, None
    for step in range(ITERATIONS):
        if step % 16 == 0 and time.monotonic() > deadline:
            return None
        away = np.log(np.clip(1.0 - msg, 1e-12, None))  # src does not take the colour
        total = prior.copy()
        total[targets] += np.add.reduceat(away, starts, axis=0)
        new = total[src] - away[rev]
        new = _normalise(np, np.exp(new - new.max(axis=1, keepdims=True)))
        change = float(np.abs(new - msg).max())
        msg = damping * msg + (1.0 - damping) * new
        # reinforcement past half the steps: the prior moves toward the beliefs, more with
        # each step, so messages that oscillate settle (with fewer conflicts)
        if 2 * step > ITERATIONS:
            pull = REINFORCE * (2 * step - ITERATIONS) / ITERATIONS
            prior += pull * (total - total.max(axis=1, keepdims=True))
        if step % 8 == 7 or change < CONVERGED:
            colour = total.argmax(axis=1)
            bad = int((colour[e[:, 0]] == colour[e[:, 1]]).sum())
            if fewest is None or bad < fewest:
                best, fewest = colour, bad
            if bad == 0 or change < CONVERGED:
                break
    return None if best is None else [int(c) for c in best]


def _normalise(np: Any, a: Any) -> Any:
    return a / np.clip(a.sum(axis=1, keepdims=True), 1e-300, None)
