"""Stage 5b of `build`: one item per co-location component (loads, tags, allowed nodes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from escher.core.plan import Colocated, PlannedTask
from escher.verify.model._context import Ctx
from escher.verify.model._groups import Groups
from escher.verify.model._problem import CONC, Item
from escher.verify.model._scales import cap_units, to_units


class UnionFind:
    """Disjoint sets of string keys (co-location components)."""

    def __init__(self, keys: Iterable[str]) -> None:
        self.parent = {k: k for k in keys}

    def find(self, k: str) -> str:
        """The representative of `k`'s set."""
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: str, b: str) -> None:
        """Merge the sets of `a` and `b`."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _components(
    ctx: Ctx, unit_map: Mapping[str, tuple[PlannedTask, int]], task_units: dict[str, list[str]]
) -> tuple[dict[str, list[str]], set[str], dict[str, set[str]]]:
    uf = UnionFind(unit_map)
    merged: set[str] = set()
    merge_stmts: dict[str, set[str]] = {u: set() for u in unit_map}
    for i, intent in ctx.intents:
        if isinstance(intent, Colocated) and intent.topology_key is None and ctx.on(f"intent:{i}"):
            us = [u for name in intent.tasks for u in task_units.get(name, ())]
            for u in us:
                merged.add(u)
                merge_stmts[u].add(f"intent:{i}")
            for u in us[1:]:
                uf.union(us[0], u)
    for group in ctx.mods.merge:
        us = [u for u in group if u in unit_map]
        merged.update(us)
        for u in us[1:]:
            uf.union(us[0], u)
    comps: dict[str, list[str]] = {}
    for u in unit_map:
        comps.setdefault(uf.find(u), []).append(u)
    return comps, merged, merge_stmts


@dataclass
class _ItemBuilder:
    nres: int
    loads: dict[str, list[int]] = field(default_factory=dict)
    single: list[int] = field(default_factory=list)
    creates: dict[int, int] = field(default_factory=dict)
    tags: dict[str, int] = field(default_factory=dict)
    allowed: frozenset[int] | None = None
    allowed_stmts: set[str] = field(default_factory=set)
    stmts: set[str] = field(default_factory=set)
    members: list[tuple[str, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.single = [0] * self.nres

    def add_load(self, gids: list[str], v: list[int], per: int) -> None:
        for g in gids:
            cur = self.loads.setdefault(g, [0] * self.nres)
            for r in range(self.nres):
                cur[r] += v[r] * per
        if not gids:
            self.single = [max(a, b) for a, b in zip(self.single, v, strict=True)]

    def restrict(self, nodes: frozenset[int]) -> None:
        self.allowed = nodes if self.allowed is None else self.allowed & nodes

    def item(self, mult: int) -> Item:
        return Item(
            members=self.members,
            mult=mult,
            loads={k: tuple(v) for k, v in self.loads.items() if any(v)},
            single=tuple(self.single),
            creates=self.creates,
            tags=self.tags,
            allowed=self.allowed,
            stmts=frozenset(self.stmts),
            allowed_stmts=frozenset(self.allowed_stmts),
        )


def _vec(task: PlannedTask, ridx: dict[str, int], scale: list[int], nres: int) -> list[int]:
    v = [0] * nres
    for r, q in task.resources.items():
        v[ridx[r]] += to_units(q, scale[ridx[r]])
    return v


def items(
    ctx: Ctx,
    unit_map: Mapping[str, tuple[PlannedTask, int]],
    task_units: dict[str, list[str]],
    g: Groups,
    pins: dict[int, frozenset[int]],
    only: dict[str, frozenset[int]],
) -> list[Item]:
    """Stage 5: one item per co-location component (copies of a lone unit stay apart)."""
    comps, merged, merge_stmts = _components(ctx, unit_map, task_units)
    tag_of: dict[str, list[str]] = {}
    for lid, names in g.limit_tasks.items():
        for name in names:
            tag_of.setdefault(name, []).append(lid)
    nres = len(ctx.rnames)
    ridx = {r: i for i, r in enumerate(ctx.rnames)}
    out: list[Item] = []
    facts = ctx.facts
    for root in sorted(comps):
        us = comps[root]
        is_merged = any(u in merged for u in us)
        b = _ItemBuilder(nres)
        for u in us:
            task, reps = unit_map[u]
            per = reps if is_merged else 1
            b.members.append((u, per))
            b.stmts.update(merge_stmts[u])
            b.stmts.update(facts.member_sids(ctx.members[u]))
            v = _vec(task, ridx, ctx.scale, nres)
            b.add_load(list(g.gang_of.get(task.name, [])) + [CONC] * task.concurrent, v, per)
            for c in task.creates:
                if c.label in ridx:
                    r = ridx[c.label]
                    b.creates[r] = max(b.creates.get(r, 0), cap_units(c.capacity, ctx.scale[r]))
            for lid in [*tag_of.get(task.name, ()), *g.unit_limits.get(u, ())]:
                b.tags[lid] = b.tags.get(lid, 0) + per
            _restrict(ctx, b, task.name, g, pins)
            if u in only:
                b.restrict(only[u])
        out.append(b.item(1 if is_merged else unit_map[us[0]][1]))
    return out


def _restrict(
    ctx: Ctx, b: _ItemBuilder, name: str, g: Groups, pins: dict[int, frozenset[int]]
) -> None:
    """Pins and topology keys of the intents naming task `name` restrict where it goes."""
    for p in g.pins_of.get(name, []):
        b.restrict(pins[p])
        b.allowed_stmts.add(f"intent:{p}")
    for key, sid in g.keyed.get(name, []):
        b.restrict(frozenset(ctx.domains[key].of))
        b.allowed_stmts.add(sid)
