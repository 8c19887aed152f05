"""Greedy placement of a class under one domain rule (spread evenly, at most k per domain,
all in one domain): copies are dealt to the domains first, then packed first-fit inside each.

Without it the greedy stage packs such a class as if the rule were absent and its placement
fails the rule check (a zone spread of 50 replicas lands on the first nodes of one zone), so
every spread went to the slower exact stages. A placement from here is still checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from escher.verify.model import Item, Problem, Rule, Timeout

#: Rules `fill` deals with.
KINDS = ("even", "limit", "together")


def class_rule(p: Problem, idxs: Sequence[int]) -> Rule | None:
    """The one domain rule on the class `idxs` if no other item counts under it (else None:
    the class is packed as before and the rule checked on the whole placement)."""
    it = p.items[idxs[0]]
    rules = [r for r in p.rules if it.tags.get(r.tag)]
    if len(rules) != 1 or rules[0].kind not in KINDS:
        return None
    rule = rules[0]
    members = set(idxs)
    if any(other.tags.get(rule.tag) for j, other in enumerate(p.items) if j not in members):
        return None
    if rule.kind != "together" and it.tags[rule.tag] != 1:
        return None
    return rule


def _level(caps: list[int], want: int) -> list[int] | None:
    """Counts at most `caps` summing to `want`, as level as possible (water filling; the
    remainder goes to the domains with the most room)."""
    if sum(caps) < want:
        return None
    lo, hi = 0, max(caps, default=0)
    while lo < hi:  # the least level L with sum(min(cap, L)) >= want
        mid = (lo + hi) // 2
        if sum(min(c, mid) for c in caps) >= want:
            hi = mid
        else:
            lo = mid + 1
    counts = [min(c, lo - 1) if lo else 0 for c in caps]
    left = want - sum(counts)
    for d in sorted(range(len(caps)), key=lambda d: -caps[d]):
        if left == 0:
            break
        if caps[d] > counts[d]:
            counts[d] += 1
            left -= 1
    return counts if left == 0 else None


def _room(it: Item, nodes: Sequence[int], want: int, fit: Callable[[Item, int, int], int]) -> int:
    """Copies of `it` the nodes of one domain can take (counted up to `want`)."""
    room = 0
    for n in nodes:
        room += fit(it, n, want - room)
        if room >= want:
            break
    return room


def _counts(rule: Rule, room: list[int], want: int) -> list[int] | None:
    """Copies per domain that keep `rule`, given what each domain has room for."""
    if rule.kind == "together":
        fits = [d for d in range(len(room)) if room[d] >= want]
        if not fits:
            return None
        best = min(fits, key=lambda d: room[d])
        return [want if d == best else 0 for d in range(len(room))]
    if rule.kind == "limit":
        return _level([min(r, rule.value) for r in room], want)
    got = _level(room, want)
    return None if got is None or max(got) - min(got) > rule.value else got


def fill(
    p: Problem,
    it: Item,
    order: Sequence[int],
    want: int,
    rule: Rule,
    fit: Callable[[Item, int, int], int],
    place: Callable[[Item, int, int], None],
    deadline: float | None,
) -> list[int] | None:
    """Nodes for `want` copies of `it` (in `order` within each domain) that keep `rule`, or
    None when this heuristic finds none."""
    dom = p.domains[rule.key]
    by_dom: list[list[int]] = [[] for _ in dom.names]
    for n in order:
        d = dom.of.get(n)
        if d is not None:
            by_dom[d].append(n)
    if deadline is not None and time.monotonic() > deadline:
        raise Timeout
    counts = _counts(rule, [_room(it, nodes, want, fit) for nodes in by_dom], want)
    if counts is None:
        return None
    spots: list[int] = []
    for d, need in enumerate(counts):
        for n in by_dom[d]:
            if need == 0:
                break
            k = fit(it, n, need)
            if k:
                place(it, n, k)
                spots.extend([n] * k)
                need -= k
        if need:
            return None
    return spots
