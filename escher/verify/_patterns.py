"""The configuration encoding: exact per node type, for witness search.

Nodes of one type are identical, so a placement is a choice of how many nodes of each type
use each *pattern* (a multiset of item classes that fits one node). Removing items from a node
never breaks it (no task creates resources here), so maximal patterns suffice: a class only
has to be *covered*. Z3 solves the small covering problem; the answer is a real placement.
Used when the greedy search and the per-type packing failed; skipped (None) when patterns
are too many or some task creates resources.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import z3

from escher.verify._greedy import classes
from escher.verify._model import Item, Problem

#: Largest number of maximal patterns per node type.
PATTERN_LIMIT = 4000


def _max_patterns(
    p: Problem, t: int, cls: list[Item], deadline: float
) -> list[tuple[int, ...]] | None:
    nt = p.types[t]
    nres = len(p.resources)
    groups = list(p.groups)
    limits = list(p.limits)
    cap = [c if c is not None else 10**30 for c in nt.cap]
    ok: list[int] = []
    free: list[int] = []
    for ci, it in enumerate(cls):
        if it.allowed is not None and nt.nodes[0] not in it.allowed:
            continue
        if any(it.single[r] > cap[r] for r in range(nres)):
            continue
        if any(v[r] > cap[r] for v in it.loads.values() for r in range(nres)):
            continue
        if any(cnt > p.limits[lid][0] for lid, cnt in it.tags.items()):
            continue
        if not it.loads and not it.tags:
            free.append(ci)  # takes nothing from the node: not part of any pattern
            continue
        ok.append(ci)
    used = {g: [0] * nres for g in groups}
    tags = dict.fromkeys(limits, 0)
    counts = [0] * len(cls)
    out: list[tuple[int, ...]] = []

    def room(ci: int) -> int:
        it = cls[ci]
        k = 10**9
        for g, load in it.loads.items():
            u = used[g]
            for r in range(nres):
                if load[r]:
                    k = min(k, (cap[r] - u[r]) // load[r])
        for lid, cnt in it.tags.items():
            k = min(k, (p.limits[lid][0] - tags[lid]) // cnt)
        return max(0, k)

    def add(ci: int, k: int) -> None:
        it = cls[ci]
        for g, load in it.loads.items():
            u = used[g]
            for r in range(nres):
                u[r] += load[r] * k
        for lid, cnt in it.tags.items():
            tags[lid] += cnt * k
        counts[ci] += k

    def rec(j: int) -> bool:
        if len(out) > PATTERN_LIMIT or time.monotonic() > deadline:
            return False
        if j == len(ok):
            if all(room(ci) == 0 for ci in ok):
                pat = list(counts)
                for ci in free:
                    pat[ci] = 10**6  # unbounded
                out.append(tuple(pat))
            return True
        ci = ok[j]
        top = room(ci)
        for k in range(top, -1, -1):
            add(ci, k)
            good = rec(j + 1)
            add(ci, -k)
            if not good:
                return False
        return True

    if not rec(0):
        return None
    return out


def solve(
    p: Problem, deadline: float, memory_mb: int | None = None
) -> tuple[str, dict[int, list[tuple[Sequence[int], int]]] | None]:
    """("sat", targets) | ("unsat", None) | ("unknown", None)."""
    if any(it.creates for it in p.items):
        return ("unknown", None)
    cls_map = classes(p)
    idx_lists = list(cls_map.values())
    cls = [p.items[idxs[0]] for idxs in idx_lists]
    want = [sum(p.items[i].mult for i in idxs) for idxs in idx_lists]
    pats: list[list[tuple[int, ...]]] = []
    for t in range(len(p.types)):
        got = _max_patterns(p, t, cls, deadline)
        if got is None:
            return ("unknown", None)
        pats.append(got)
    ctx = z3.Context()
    s = z3.SolverFor("QF_LIA", ctx=ctx)
    s.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
    if memory_mb:
        z3.set_param("memory_max_size", int(memory_mb))
    y: list[list[z3.ArithRef]] = []
    cover: list[list[z3.ArithRef]] = [[] for _ in cls]
    for t, plist in enumerate(pats):
        row = [z3.Int(f"y{t}_{k}", ctx) for k in range(len(plist))]
        y.append(row)
        for v in row:
            s.add(v >= 0)
        if row:
            s.add(z3.Sum(row) <= len(p.types[t].nodes))
        for k, pat in enumerate(plist):
            for ci, c in enumerate(pat):
                if c:
                    cover[ci].append(c * row[k])
    for ci, terms in enumerate(cover):
        if want[ci]:
            if not terms:
                return ("unsat", None)
            s.add(z3.Sum(terms) >= want[ci])
    res = s.check()
    if res == z3.unsat:
        return ("unsat", None)
    if res != z3.sat:
        return ("unknown", None)
    model = s.model()
    # Deal the copies of each class into the chosen patterns' slots, node by node.
    slots: list[list[int]] = [[] for _ in cls]
    for t, plist in enumerate(pats):
        nodes = iter(p.types[t].nodes)
        for k, pat in enumerate(plist):
            for _ in range(model.eval(y[t][k], model_completion=True).as_long()):
                n = next(nodes)
                for ci, c in enumerate(pat):
                    slots[ci].extend([n] * min(c, want[ci]))
    targets: dict[int, list[tuple[Sequence[int], int]]] = {}
    for ci, idxs in enumerate(idx_lists):
        pos = 0
        for i in idxs:
            m = p.items[i].mult
            targets[i] = [([n], 1) for n in slots[ci][pos : pos + m]]
            pos += m
    return ("sat", targets)
