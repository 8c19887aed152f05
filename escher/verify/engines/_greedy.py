"""Fast witness search on a `Problem`: first-fit decreasing over classes of identical items.

A placement found here proves feasibility only once a checker accepts it. `check` is the
problem-level checker (used for sub-problems); the plan-level independent checker is
`escher.verify.check._check`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence

from escher.verify.check import Placement
from escher.verify.engines import _domainfill
from escher.verify.model import Item, Problem, Timeout


def classes(p: Problem) -> dict[tuple[object, ...], list[int]]:
    """Shape -> indices of the interchangeable items of that shape."""
    out: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, it in enumerate(p.items):
        out[it.shape()].append(i)
    return out


class _Packer:
    """Mutable per-node usage during a greedy pass or a check (sparse: only the resources
    an item uses are looked at, so many labels cost nothing to items that do not use them)."""

    def __init__(self, p: Problem) -> None:
        self.p = p
        self.used: dict[str, dict[int, dict[int, int]]] = {g: {} for g in p.groups}
        self.creators: dict[int, dict[int, int]] = {}
        self.tags: dict[int, dict[str, int]] = {}

    def cap(self, n: int, r: int, extra: dict[int, int] | None = None) -> int | None:
        """Capacity of resource `r` on node `n` (with creations there, and `extra` ones)."""
        made = self.creators.get(n, {}).get(r)
        if extra and r in extra:
            made = max(made or 0, extra[r])
        if made is None:
            return self.p.cap[n][r]
        return max(0, made - self.p.held[n][r])

    def capn(self, n: int, extra: dict[int, int] | None = None) -> list[int | None]:
        return [self.cap(n, r, extra) for r in range(len(self.p.resources))]

    def fit(self, it: Item, n: int, want: int) -> int:
        """How many copies of `it` (up to `want`) fit on node `n` now."""
        if it.allowed is not None and n not in it.allowed:
            return 0
        for r in it.nonzero:
            q, c = it.single[r], self.cap(n, r, it.creates)
            if q and c is not None and q > c:
                return 0
        k = min(want, self._room(it, n))
        if k > 0 and it.creates and not self._creation_ok(it, n, k):
            return 0
        if k > 0 and it.tags:
            have = self.tags.get(n, {})
            for lid, cnt in it.tags.items():
                if lid in self.p.limits:  # domain rules are checked on the whole placement
                    k = min(k, (self.p.limits[lid][0] - have.get(lid, 0)) // cnt)
        return max(k, 0)

    def _room(self, it: Item, n: int) -> int:
        k = 1 << 62
        for g, load in it.loads.items():
            u = self.used[g].get(n, {})
            for r in it.nonzero:
                q = load[r]
                c = self.cap(n, r, it.creates)
                if q and c is not None:
                    k = min(k, (c - u.get(r, 0)) // q)
        return k

    def _creation_ok(self, it: Item, n: int, k: int) -> bool:
        """A creation replaces the label's capacity: what is already there must still fit."""
        for g in self.p.groups:
            u = self.used[g].get(n)
            if u is None:
                continue
            load = it.loads.get(g)
            for r in it.creates:
                c = self.cap(n, r, it.creates)
                if c is not None and u.get(r, 0) + k * (load[r] if load else 0) > c:
                    return False
        return True

    def place(self, it: Item, n: int, k: int) -> None:
        for g, load in it.loads.items():
            u = self.used[g].setdefault(n, {})
            for r in it.nonzero:
                if load[r]:
                    u[r] = u.get(r, 0) + load[r] * k
        if it.creates:
            made = self.creators.setdefault(n, {})
            for r, c in it.creates.items():
                made[r] = max(made.get(r, 0), c)
        if it.tags:
            have = self.tags.setdefault(n, {})
            for lid, cnt in it.tags.items():
                have[lid] = have.get(lid, 0) + cnt * k


#: Node types (or nodes) scored or dealt between two looks at the deadline.
DEADLINE_STRIDE = 64


def _order_nodes(
    p: Problem, it: Item, strategy: str = "align", deadline: float | None = None
) -> list[int]:
    """Candidate nodes for `it`, type by type.

    Types that waste the fewest scarce resources (ones the item does not need) come first;
    ties go to the type whose capacity vector is best aligned with the request ("align"),
    the largest ("big") or the type order ("plain").

    Raises:
        Timeout: `deadline` passed (scoring is per node type, and a tight packing at 1,000
            nodes has about as many types as nodes, for each class).
    """
    holders = p.holders()
    totals = p.totals()
    need = {r: it.need(r) for r in it.nonzero if it.need(r)}
    scored = []
    for t, nt in enumerate(p.types):
        if deadline is not None and t % DEADLINE_STRIDE == 0 and time.monotonic() > deadline:
            raise Timeout
        # what the type has that the item does not need, weighted by how rare it is
        waste = p.type_spread(t) - sum(
            1.0 / holders[r] for r in need if nt.cap[r] is None or nt.cap[r]
        )
        capn = {r: (totals[r] if (cr := nt.cap[r]) is None else cr) / totals[r] for r in need}
        if strategy == "align":
            reqn = {r: need[r] / totals[r] for r in need}
            dot = sum(reqn[r] * capn[r] for r in need)
            # the angle within the resources the item needs (what else a type has is the
            # waste above; hundreds of labels would otherwise drown CPU and memory)
            norm = (sum(a * a for a in reqn.values()) * sum(c * c for c in capn.values())) ** 0.5
            norm = norm or 1.0
            tie = -dot / norm
        elif strategy == "big":
            tie = -p.type_size(t)
        else:
            tie = 0.0
        scored.append((round(waste, 9), tie, t))
    scored.sort()
    out: list[int] = []
    for *_, t in scored:
        out.extend(p.types[t].nodes)
    return out


#: `_spread` stops looking at more nodes once they hold this many times the copies wanted.
SPREAD_ROOM = 4

#: Node and class orders `greedy` can use; `decide` tries them in turn.
STRATEGIES = ("spread", "align", "big", "plain", "spread-size", "align-size")


def _size(p: Problem, it: Item) -> float:
    totals = p.totals()
    best = max((it.need(r) / totals[r] for r in it.nonzero), default=0.0)
    return best * len(it.members)


def _class_order(p: Problem, constrained_first: bool = True) -> list[list[int]]:
    """Classes of identical items: creators first, then (optionally) constrained ones, those
    allowed on the fewest nodes first (in tenths of the cluster), then largest first."""
    created = p.created
    nodes = max(1, len(p.node_ids))

    def key(idxs: list[int]) -> tuple[float, ...]:
        it = p.items[idxs[0]]
        requests_created = any(it.need(r) for r in created)
        constrained = constrained_first and (it.allowed is not None or bool(it.tags))
        share = 1.0
        if constrained_first and it.allowed is not None:
            share = round(len(it.allowed) / nodes, 1)
        return (
            0 if it.creates else 1,
            int(requests_created),
            int(not constrained),
            share,
            -_size(p, it),
        )

    return sorted(classes(p).values(), key=key)


def _first_fit(
    packer: _Packer,
    it: Item,
    jobs: Sequence[tuple[Sequence[int], int]],
    deadline: float | None,
) -> list[int] | None:
    spots: list[int] = []
    for nodes, want in jobs:
        left = want
        for n in nodes:
            if left == 0:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise Timeout
            k = packer.fit(it, n, left)
            if k:
                packer.place(it, n, k)
                spots.extend([n] * k)
                left -= k
        if left:
            return None
    return spots


def _place_class(
    p: Problem,
    packer: _Packer,
    idxs: list[int],
    targets: Mapping[int, Sequence[tuple[Sequence[int], int]]] | None,
    strategy: str,
    deadline: float | None,
    offsets: dict[int, int],
) -> list[int] | None:
    it = p.items[idxs[0]]
    want = sum(p.items[i].mult for i in idxs)
    if targets is None:
        order = _order_nodes(p, it, "align" if strategy == "spread" else strategy, deadline)
        rule = _domainfill.class_rule(p, idxs)
        if rule is not None:  # deal the copies to the domains first
            return _domainfill.fill(p, it, order, want, rule, packer.fit, packer.place, deadline)
        if strategy == "spread":
            return _spread(p, packer, it, order, want, deadline)
        return _first_fit(packer, it, [(order, want)], deadline)
    jobs = [job for i in idxs for job in targets.get(i, ())]
    spots: list[int] = []
    if strategy == "spread":
        leftovers: list[tuple[Sequence[int], int]] = []
        for nodes, n_want in jobs:
            got, left = _even(p, packer, it, nodes, n_want, offsets, deadline)
            spots.extend(got)
            if left:
                leftovers.append((nodes, left))
        jobs = leftovers
    more = _first_fit(packer, it, jobs, deadline)
    return None if more is None else spots + more


def greedy(
    p: Problem,
    *,
    targets: Mapping[int, Sequence[tuple[Sequence[int], int]]] | None = None,
    deadline: float | None = None,
    strategy: str = "align",
    fixed: Placement | None = None,
) -> Placement | None:
    """First-fit decreasing. `targets`: item -> [(nodes, copies)] to pack into given nodes.

    Strategies: the node orders of `STRATEGIES`; a ``-size`` suffix orders classes by size
    only (not constrained ones first). `fixed`: a placement of some items (non-empty
    entries) that is kept as it is; the other items are placed around it.

    Returns:
        A placement (not yet checked) or None when the heuristic got stuck.

    Raises:
        Timeout: `deadline` (a `time.monotonic()` value) passed; it is looked at before
            each class and inside the loops over node types and nodes, so a greedy pass
            ends within a few node visits of it.
    """
    packer = _Packer(p)
    placement: Placement = [[] for _ in p.items]
    offsets: dict[int, int] = {}
    order_all = not strategy.endswith("-size")
    strategy = strategy.removesuffix("-size")
    for i, given in enumerate(fixed or ()):
        for n in given:
            packer.place(p.items[i], n, 1)
        placement[i] = list(given)
    for idxs in _class_order(p, order_all):
        if fixed and fixed[idxs[0]]:
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise Timeout
        spots = _place_class(p, packer, idxs, targets, strategy, deadline, offsets)
        if spots is None:
            return None
        pos = 0
        for i in idxs:
            m = p.items[i].mult
            placement[i] = spots[pos : pos + m]
            pos += m
        if pos != len(spots):
            return None
    return placement


def _spread(
    p: Problem,
    packer: _Packer,
    it: Item,
    nodes: Sequence[int],
    want: int,
    deadline: float | None,
) -> list[int] | None:
    """Spread `want` copies over the shortest prefix of node types that can hold them,
    in proportion to what each node can take (keeps nodes balanced for later classes)."""
    room: list[tuple[int, int]] = []
    cum = 0
    for j, n in enumerate(nodes):
        if deadline is not None and j % 256 == 0 and time.monotonic() > deadline:
            raise Timeout
        k = packer.fit(it, n, want)
        if k:
            room.append((n, k))
            cum += k
        last = j + 1 == len(nodes) or p.node_type[nodes[j + 1]] != p.node_type[n]
        if cum >= want and (last or cum >= SPREAD_ROOM * want):
            break
    if cum < want:
        return None
    # A node's `k` assumes it alone takes copies; limits are per node, so they add up.
    shares = [(n, k, k * want / cum) for n, k in room]
    out = {n: int(share) for n, _, share in shares}
    left = want - sum(out.values())
    for n, k, _share in sorted(shares, key=lambda x: x[2] - int(x[2]), reverse=True):
        if left == 0:
            break
        if out[n] < k:
            out[n] += 1
            left -= 1
    if left:
        return None
    spots: list[int] = []
    for n, k in out.items():
        if k:
            packer.place(it, n, k)
            spots.extend([n] * k)
    return spots


def _even(
    p: Problem,
    packer: _Packer,
    it: Item,
    nodes: Sequence[int],
    want: int,
    offsets: dict[int, int],
    deadline: float | None = None,
) -> tuple[list[int], int]:
    """Deal `want` copies evenly over `nodes` (identical ones); extras rotate so that no node
    collects the remainder of every class. Returns (spots, copies that did not fit)."""
    m = len(nodes)
    if not m:
        return [], want
    key = nodes[0]
    off = offsets.get(key, 0)
    base, rem = divmod(want, m)
    spots: list[int] = []
    left = 0
    for j, n in enumerate(nodes):
        if deadline is not None and j % DEADLINE_STRIDE == 0 and time.monotonic() > deadline:
            raise Timeout
        k = base + (1 if (j - off) % m < rem else 0)
        if not k:
            continue
        got = packer.fit(it, n, k)
        if got:
            packer.place(it, n, got)
            spots.extend([n] * got)
        left += k - got
    offsets[key] = (off + rem) % m
    return spots, left


def check(p: Problem, placement: Placement) -> list[str]:
    """Problem-level violations of `placement` (empty when it is valid)."""
    if len(placement) != len(p.items):
        return ["placement does not cover every item"]
    errors: list[str] = []
    packer = _Packer(p)
    for i, it in enumerate(p.items):
        if len(placement[i]) != it.mult:
            errors.append(f"item {i} has {len(placement[i])} copies placed, needs {it.mult}")
        for n in placement[i]:
            if it.allowed is not None and n not in it.allowed:
                errors.append(f"item {i} on a node it may not use")
            packer.place(it, n, 1)
    for n in range(len(p.node_ids)):
        errors.extend(_node_errors(p, packer, n))
    for i, it in enumerate(p.items):
        for n in placement[i]:
            for r in it.nonzero:
                q, c = it.single[r], packer.cap(n, r)
                if q and c is not None and q > c:
                    errors.append(f"item {i} does not fit alone on {p.node_ids[n]}")
                    break
    errors.extend(rule_errors(p, placement))
    return errors


def _node_errors(p: Problem, packer: _Packer, n: int) -> list[str]:
    errors = []
    for g in p.groups:
        u = packer.used[g].get(n)
        for r, q in (u or {}).items():
            c = packer.cap(n, r)
            if c is not None and q > c:
                errors.append(f"{p.node_ids[n]}: {p.resources[r]} over capacity ({g})")
    for lid, have in packer.tags.get(n, {}).items():
        if lid in p.limits and have > p.limits[lid][0]:
            errors.append(f"{p.node_ids[n]}: limit {lid} exceeded")
    return errors


def rule_errors(p: Problem, placement: Placement) -> list[str]:
    """Domain rules that `placement` breaks."""
    errors = []
    for rule in p.rules:
        dom = p.domains[rule.key]
        counts = [0] * len(dom.names)
        for it, spots in zip(p.items, placement, strict=True):
            k = it.tags.get(rule.tag, 0)
            for n in spots if k else ():
                d = dom.of.get(n)
                if d is None:
                    errors.append(f"{rule.tag}: {p.node_ids[n]} is in no {rule.key!r} domain")
                else:
                    counts[d] += k
        if rule.kind == "limit" and counts and max(counts) > rule.value:
            errors.append(f"{rule.tag}: over {rule.value} in one {rule.key!r} domain")
        elif rule.kind == "together" and sum(1 for c in counts if c) > 1:
            errors.append(f"{rule.tag}: spread over several {rule.key!r} domains")
        elif rule.kind == "excess" and counts[rule.pair[0]] - counts[rule.pair[1]] < rule.value:
            errors.append(f"{rule.tag}: no excess of {rule.value}")
        elif rule.kind == "even" and counts and max(counts) - min(counts) > rule.value:
            errors.append(f"{rule.tag}: skew over {rule.value} across {rule.key!r} domains")
    return errors
