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

#: Colours (nodes) past which the beliefs are not computed (vertices x colours x degree).
MAX_COLOURS = 64

#: (directed edges) x colours past which the beliefs are not computed.
MAX_CELLS = 4_000_000

#: Iterations of plain (damped) belief propagation at most, then of reinforced belief
#: propagation when the plain messages did not colour the graph; and the largest change of
#: a message below which a run has converged. Near the threshold where the planted
#: colouring can be found (average degree 10 on 4 colours), plain messages drift for
#: hundreds of iterations before they fall into it (`colouring` seed 11: after 550-770), and
#: reinforcing them earlier settles them in a colouring with ~50 conflicts far from it.
ITERATIONS = 1200
REINFORCED = 200
CONVERGED = 1e-4

#: How fast the prior of a vertex follows its beliefs in the reinforced iterations:
#: messages that do not converge leave ~50 conflicts of 5,000 edges instead of ~250.
REINFORCE = 0.1

#: The damping of each update (the share of the old message kept), by seed in turn: which
#: one converges differs from graph to graph, and heavy damping converges more often near
#: the threshold (docs/verify-engines.md).
DAMPINGS = (0.85, 0.9)


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
    # colours along the first axis: numpy reduces over it element-wise (over a short last
    # axis, the max and sum of each update took 0.7 of its 1.3 ms)
    mask = np.full((colours, n), -1e9)
    for v, cs in enumerate(allowed):
        mask[cs, v] = 0.0
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
    msg = rng.dirichlet(np.ones(colours), size=2 * half).T * np.exp(mask[:, src])
    msg /= np.clip(msg.sum(axis=0), 1e-300, None)
    prior = mask.copy()
    best, fewest = None, None
    reinforced = 0  # iterations since the reinforcement began (0: plain)
    for step in range(ITERATIONS + REINFORCED):
        if step % 16 == 0 and time.monotonic() > deadline:
            return None
        away = np.log(np.clip(1.0 - msg, 1e-12, None))  # src does not take the colour
        total = prior.copy()
        total[:, targets] += np.add.reduceat(away, starts, axis=1)
        new = np.take(total, src, axis=1) - np.take(away, rev, axis=1)
        new -= new.max(axis=0)
        np.exp(new, out=new)
        new /= np.clip(new.sum(axis=0), 1e-300, None)
        change = float(np.abs(new - msg).max())
        msg = damping * msg + (1.0 - damping) * new
        if reinforced:
            # the prior moves toward the beliefs, more with each step, so messages that
            # oscillate settle (with fewer conflicts)
            prior += REINFORCE * min(1.0, reinforced / REINFORCED) * (total - total.max(axis=0))
            reinforced += 1
        if step % 8 == 7 or change < CONVERGED:
            colour = total.argmax(axis=0)
            bad = int((colour[e[:, 0]] == colour[e[:, 1]]).sum())
            if fewest is None or bad < fewest:
                best, fewest = colour, bad
            if bad == 0 or (reinforced and change < CONVERGED):
                break
            if not reinforced and (change < CONVERGED or step >= ITERATIONS - 1):
                reinforced = 1
    return None if best is None else [int(c) for c in best]
