"""Exact, cheap infeasibility proofs (no solver), each with its cause in one line.

* co-location vs separation: a co-located component holds more replicas of a separated set
  than the limit allows on one node;
* separation vs node count: a separated set has more replicas than the limit per node times
  the nodes they may use;
* no allowed node: pins and topology keys leave a task no node;
* largest free slot: a replica (or co-located group) fits no node it may use;
* per-resource totals: a simultaneous group asks for more of a resource than all nodes have;
* Martello-Toth L2: for items that can only use nodes with one capacity C of a resource,
  the L2 lower bound on the number of nodes they need exceeds the nodes there are;
* slots of size s (the dual feasible function floor(x / s), valid on nodes of any
  capacities): a task asking x of a resource fills floor(x / s) slots of s, a node with
  capacity C has floor(C / s), and the tasks fill more than the nodes have (fragmentation:
  enough GPUs in total, too few nodes with 3 free at once); also with s the greatest
  common divisor of the requests (the totals on the requests' grid).
"""

from __future__ import annotations

import bisect
import math
import time
from dataclasses import dataclass
from itertools import accumulate

from escher.verify.engines._graph import clique_conflict
from escher.verify.model import Item, Problem, type_total


@dataclass(frozen=True)
class Conflict:
    """A proof of infeasibility: how it was found, the statements, the cause in one line."""

    method: str
    core: frozenset[str]
    cause: str


def _names(p: Problem, it: Item) -> str:
    tasks = [t for u, _ in it.members for t, _ in p.units.get(u, [(u, 0)])]
    shown = ", ".join(repr(t) for t in tasks[:3])
    return shown + (f" and {len(tasks) - 3} more" if len(tasks) > 3 else "")


def limit_conflict(p: Problem) -> Conflict | None:
    """A co-located component over a separation/spread limit, or with no allowed node."""
    for it in p.items:
        for lid, cnt in it.tags.items():
            if lid not in p.limits:
                continue
            lim, sid = p.limits[lid]
            if cnt > lim:
                text = p.statements[sid].text if sid else "a scenario"
                return Conflict(
                    "colocation vs separation",
                    it.stmts | ({sid} if sid else set()),
                    f"{_names(p, it)} must share a node, but {text} allows {lim} per node",
                )
        if it.allowed is not None and not it.allowed:
            return Conflict(
                "no allowed node",
                it.stmts | it.allowed_stmts,
                f"{_names(p, it)} has no node it may use (pins and topology keys exclude all)",
            )
    return None


def _best_made(p: Problem) -> dict[int, int]:
    best: dict[int, int] = {}
    for it in p.items:
        for r, c in it.creates.items():
            best[r] = max(best.get(r, 0), c)
    return best


def _short(p: Problem, it: Item, t: int, made: dict[int, int]) -> list[int]:
    nt = p.types[t]
    out = []
    for r in it.nonzero:
        need, cr = it.need(r), nt.cap[r]
        if not need or cr is None:
            continue
        if r in p.created:
            cr = max(cr, made.get(r, 0) - nt.held[r])
        if need > cr:
            out.append(r)
    return out


def slot_conflict(p: Problem) -> Conflict | None:
    """A copy of an item that fits no node type it may use."""
    made = _best_made(p)
    every = range(len(p.types))
    for it in p.items:
        tset = every if it.allowed is None else sorted({p.node_type[n] for n in it.allowed})
        if any(not _short(p, it, t, made) for t in tset):  # stops at the first that fits
            continue
        shorts = [_short(p, it, t, made) for t in tset]
        need = [r for r in it.nonzero if it.need(r)]
        cap_ids = {p.types[t].capsrc[r] for t in tset for r in need}
        gangs = {sid for g in it.loads if (sid := p.groups[g]) is not None}
        return Conflict(
            "largest free slot",
            it.stmts | it.allowed_stmts | frozenset(cap_ids) | frozenset(gangs),
            _slot_cause(p, it, list(tset), shorts),
        )
    return None


def _slot_cause(p: Problem, it: Item, tset: list[int], shorts: list[list[int]]) -> str:
    who = _names(p, it)
    if not shorts:
        return f"no alive node {who} may use"
    common = set(shorts[0]).intersection(*map(set, shorts))
    if common:
        r = min(common)
        best = max((p.types[t].cap[r] or 0) for t in tset)
        return (
            f"no node has {p.quantity(r, it.need(r))} {p.resources[r]} free for {who} "
            f"(the most any node it may use has is {p.quantity(r, best)})"
        )
    need = {
        p.resources[r]: p.quantity(r, it.need(r)) for r in range(len(p.resources)) if it.need(r)
    }
    return f"no node has {need} free at once for {who}"


def totals_conflict(p: Problem) -> Conflict | None:
    """A simultaneous group that asks for more of a resource than every node has in all."""
    demands: dict[tuple[str, int], int] = {}
    for it in p.items:
        for g, load in it.loads.items():
            for r in it.nonzero:
                if load[r]:
                    demands[(g, r)] = demands.get((g, r), 0) + load[r] * it.mult
    for g, gsid in p.groups.items():
        for r in range(len(p.resources)):
            if r in p.created:
                continue
            demand = demands.get((g, r), 0)
            if not demand:
                continue
            have = type_total(p, r)
            if have is None:
                continue
            if demand <= have:
                continue
            core = _totals_core(p, g, r, have)
            core |= {nt.capsrc[r] for nt in p.types}
            if gsid:
                core.add(gsid)
            what = "requested" if gsid is None else f"requested by {p.statements[gsid].text}"
            return Conflict(
                "per-resource totals",
                frozenset(core),
                f"{p.resources[r]}: {p.quantity(r, demand)} {what}, "
                f"{p.quantity(r, have)} available on all nodes together",
            )
    return None


def _totals_core(p: Problem, g: str, r: int, have: int) -> set[str]:
    """The largest demands until they exceed `have`: dropping any one of them fits the total."""
    demands = sorted(
        ((it.loads[g][r] * it.mult, it) for it in p.items if g in it.loads and it.loads[g][r]),
        key=lambda x: -x[0],
    )
    core: set[str] = set()
    total = 0
    for d, it in demands:
        core |= it.stmts
        total += d
        if total > have:
            break
    return core


def l2_bound(sizes: list[int], counts: list[int], cap: int) -> int:
    """Martello-Toth L2: a lower bound on the bins of capacity `cap` that hold the items.

    `sizes` ascending, each with its count; every size at most `cap`.
    """
    n_total = sum(counts)
    if not n_total:
        return 0
    csum = list(accumulate(counts))
    wsum = list(accumulate(s * c for s, c in zip(sizes, counts, strict=True)))

    def upto(x: float) -> tuple[int, int]:
        # (count, weight) of items with size <= x
        i = bisect.bisect_right(sizes, x)
        return (csum[i - 1], wsum[i - 1]) if i else (0, 0)

    best = math.ceil(wsum[-1] / cap)
    half = cap / 2
    for alpha in [0, *(s for s in sizes if s <= half)]:
        n_le_c_minus_a, w_le_c_minus_a = upto(cap - alpha)
        n_le_half, w_le_half = upto(half)
        _, w_lt_a = upto(alpha - 1)
        j1 = n_total - n_le_c_minus_a
        j2 = n_le_c_minus_a - n_le_half
        w2 = w_le_c_minus_a - w_le_half
        w3 = w_le_half - w_lt_a
        extra = max(0, math.ceil((w3 - (j2 * cap - w2)) / cap))
        best = max(best, j1 + j2 + extra)
    return best


def l2_conflict(p: Problem) -> Conflict | None:
    """Per resource and group: items whose nodes all have one capacity C need more nodes (by
    L2) than there are."""
    for (g, r), its in _by_resource(p):
        found = _l2(p, g, r, its)
        if found is not None:
            return found
    return None


def _by_resource(p: Problem) -> list[tuple[tuple[str, int], list[Item]]]:
    """(group, resource) -> the items loading it (resources tasks create left out), sorted."""
    by_res: dict[tuple[str, int], list[Item]] = {}
    for it in p.items:
        for g, load in it.loads.items():
            for r in it.nonzero:
                if load[r] and r not in p.created:
                    by_res.setdefault((g, r), []).append(it)
    return sorted(by_res.items())


def _l2(p: Problem, g: str, r: int, its: list[Item]) -> Conflict | None:
    nodes = _candidate_nodes(p, its)
    caps = {p.cap[n][r] for n in nodes}
    if len(caps) != 1 or None in caps:
        return None
    cap = caps.pop()
    if not cap:
        return None
    sizes: dict[int, int] = {}
    for it in its:
        sizes[it.loads[g][r]] = sizes.get(it.loads[g][r], 0) + it.mult
    ordered = sorted(sizes)
    if ordered[-1] > cap:
        return None  # the slot check's case
    need = l2_bound(ordered, [sizes[s] for s in ordered], cap)
    if need <= len(nodes):
        return None
    gsid = p.groups[g]
    core = {s for it in its for s in it.stmts | it.allowed_stmts}
    core |= {p.cap_stmt(n, r) for n in nodes}
    if gsid:
        core.add(gsid)
    return Conflict(
        "Martello-Toth L2 bound",
        frozenset(core),
        f"{p.resources[r]}: the tasks need at least {need} nodes with "
        f"{p.quantity(r, cap)} each, {len(nodes)} exist",
    )


#: Distinct request sizes of one resource tried as the slot size s, largest first.
SLOT_SIZES = 64


def slot_count_conflict(p: Problem) -> Conflict | None:
    """Per resource and group: the tasks fill more slots of some size s than the nodes they
    may use have (`floor` is superadditive, so a node of capacity C takes at most C // s)."""
    for (g, r), its in _by_resource(p):
        found = _slots(p, g, r, its)
        if found is not None:
            return found
    return None


def _slots(p: Problem, g: str, r: int, its: list[Item]) -> Conflict | None:
    nodes = _candidate_nodes(p, its)
    caps: dict[int, int] = {}
    for n in nodes:
        c = p.cap[n][r]
        if c is None:
            return None
        caps[c] = caps.get(c, 0) + 1
    sizes: dict[int, int] = {}
    for it in its:
        sizes[it.loads[g][r]] = sizes.get(it.loads[g][r], 0) + it.mult
    for s in _slot_sizes(sizes):
        filled = sum(k * (x // s) for x, k in sizes.items())
        room = sum(k * (c // s) for c, k in caps.items())
        if filled <= room:
            continue
        big = [it for it in its if it.loads[g][r] >= s]
        gsid = p.groups[g]
        core = {x for it in big for x in it.stmts | it.allowed_stmts}
        core |= {p.cap_stmt(n, r) for n in nodes}
        if gsid:
            core.add(gsid)
        q = p.quantity(r, s)
        return Conflict(
            "slot count",
            frozenset(core),
            f"{p.resources[r]}: the tasks asking {q} or more need {filled} slots of {q} "
            f"(a task asking x fills x // {q}), but the nodes they may use have only {room} "
            f"(a node with C free has C // {q})",
        )
    return None


def _slot_sizes(sizes: dict[int, int]) -> list[int]:
    """The slot sizes to try: the largest distinct requests, and their greatest common
    divisor g when it is none of them (tasks asking 4 and 6 fill x / 2 slots of 2 exactly,
    so a node of capacity C holds at most C // 2 of those: the totals rounded down to a
    multiple of g, which is what a tight packing of sizes on a grid leaves)."""
    out = sorted(sizes, reverse=True)[:SLOT_SIZES]
    g = math.gcd(*sizes)
    if g > 1 and g not in out:
        out.append(g)
    return out


def limit_count_conflict(p: Problem) -> Conflict | None:
    """A separation/spread limit whose tasks outnumber `limit x the nodes they may use`."""
    tagged: dict[str, list[Item]] = {}
    for it in p.items:
        for lid in it.tags:
            if lid in p.limits:
                tagged.setdefault(lid, []).append(it)
    for lid, its in tagged.items():
        lim, sid = p.limits[lid]
        replicas = sum(it.tags[lid] * it.mult for it in its)
        nodes = _candidate_count(p, its)
        if replicas > lim * nodes:
            text = p.statements[sid].text if sid else "a scenario"
            core = frozenset().union(*(it.stmts | it.allowed_stmts for it in its))
            return Conflict(
                "separation vs node count",
                core | ({sid} if sid else set()),
                f"{replicas} replicas of {_names(p, its[0])}"
                f"{' and others' if len(its) > 1 else ''} need {-(-replicas // lim)} nodes "
                f"({text} allows {lim} per node), but they may use only {nodes}",
            )
    return None


def _candidate_count(p: Problem, its: list[Item]) -> int:
    """How many nodes some of `its` may use (every node unless all are pinned)."""
    if any(it.allowed is None for it in its):
        return len(p.node_ids)
    return len(_candidate_nodes(p, its))


def _candidate_nodes(p: Problem, its: list[Item]) -> set[int]:
    if any(it.allowed is None for it in its):
        return set(range(len(p.node_ids)))
    out: set[int] = set()
    for it in its:
        assert it.allowed is not None
        out |= it.allowed
    return out


def clique_check(p: Problem, deadline: float = math.inf) -> Conflict | None:
    """Copies that must be pairwise apart (a clique of separations) outnumber their nodes."""
    found = clique_conflict(p, min(deadline, time.monotonic() + CLIQUE_SECONDS))
    if found is None:
        return None
    return Conflict("clique of separations", found.core, found.cause)


#: Seconds the clique search of the pre-checks may take at most.
CLIQUE_SECONDS = 0.2


def precheck(p: Problem, deadline: float = math.inf) -> Conflict | None:
    """The first exact conflict the cheap checks find, or None (also when `deadline`, a
    `time.monotonic()` value, passes between them)."""
    checks = (
        limit_conflict,
        limit_count_conflict,
        slot_conflict,
        totals_conflict,
        l2_conflict,
        slot_count_conflict,
    )
    for check in checks:
        if time.monotonic() >= deadline:
            return None
        found = check(p)
        if found is not None:
            return found
    return clique_check(p, deadline)
