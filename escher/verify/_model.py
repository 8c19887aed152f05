"""Normalise a (Plan, ClusterState) pair into an integer placement problem, in named stages.

Every constraint is tracked by the id of the user's statement it comes from (`Statement`): a
task (``task:<name>``), an intent (``intent:<i>``), the capacity of a resource on a node type
(``cap:<resource>@<type>``) or the capacity set by a planned `set_resource` (``res:<i>``). A
sub-problem keeps only some statements: dropped tasks and intents disappear, dropped
capacities become unbounded.

Stages of `build`:
1. `scales`: per resource, the power of ten that makes every quantity an integer; the tolerance
   of `escher.core.resources.EPSILON` is added to capacities, so "fits" is `Resources.fits_in`.
2. `apply_planned`: node capacities after the planned `set_resource` calls.
3. `node_types`: interchangeable nodes (same capacities, statements, pins, domains).
4. `units`: identical tasks grouped (same request, creations, concurrency, intents), so one
   entry per task costs what replicas cost; scenario splits for intent proofs.
5. `items`: co-located units merged (one item per component), simultaneous groups (all
   concurrent tasks; each gang), limits (separation, spread) and allowed nodes.

Semantics (see docs/verify.md):
* Plan tasks use what nodes have *available* now; planned resources are applied in order
  first (a resource-vector node spec matches on availability at that point).
* `concurrent` tasks hold their resources together; each `Gang` intent is also a group whose
  members hold their resources together; any other replica only has to fit alone on its node.
* A replica that `creates` label L sets L's capacity on its node to the creation capacity
  (minus what running tasks hold of L there); with several creators the largest counts.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    PlannedTask,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.core.resources import EPSILON
from escher.verify._topology import Domains, domains_of, topology_key

CONC = "conc"

#: An integer capacity vector entry; None means unbounded (its statement was dropped).
Cap = int | None


@dataclass(frozen=True)
class Statement:
    """One thing the user said: a task, an intent, a capacity, a planned resource.

    Attributes:
        id: Stable key (e.g. ``task:ps``, ``intent:2``, ``cap:GPU@gpu8``, ``res:0``).
        kind: ``task``, ``intent``, ``capacity`` or ``resource``.
        text: A readable description in the user's terms.
        source: What made it (the ESL call, the node type, ...).
    """

    id: str
    kind: str
    text: str
    source: str = ""

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready description."""
        return {"id": self.id, "kind": self.kind, "text": self.text, "source": self.source}


@dataclass
class Item:
    """Replicas that are placed together on one node, `mult` identical copies of them.

    Attributes:
        members: (unit name, replicas) carried by one copy.
        mult: Number of identical copies (each copy goes to some node).
        loads: Group id -> per-resource load of one copy in that simultaneous group.
        single: Per-resource largest request of a replica that only has to fit alone.
        creates: Resource index -> capacity a copy creates on its node.
        tags: Limit id -> replicas of that limit's tasks in one copy.
        allowed: Node indices a copy may use (None = any).
        stmts: Statement ids this item depends on.
        allowed_stmts: Statement ids behind `allowed`.
    """

    members: list[tuple[str, int]]
    mult: int
    loads: dict[str, tuple[int, ...]]
    single: tuple[int, ...]
    creates: dict[int, int]
    tags: dict[str, int]
    allowed: frozenset[int] | None
    stmts: frozenset[str]
    allowed_stmts: frozenset[str] = frozenset()
    nonzero: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.nonzero:
            self.nonzero = tuple(
                r
                for r in range(len(self.single))
                if self.single[r] or any(load[r] for load in self.loads.values())
            )

    def shape(self) -> tuple[Any, ...]:
        """Key of the class of interchangeable items."""
        return (
            tuple(sorted(self.loads.items())),
            self.single,
            tuple(sorted(self.creates.items())),
            tuple(sorted(self.tags.items())),
            self.allowed,
        )

    def need(self, r: int) -> int:
        """The most of resource `r` one copy needs on its node at any instant."""
        return max([self.single[r], *(load[r] for load in self.loads.values())])


@dataclass
class NodeType:
    """Interchangeable nodes: same capacities, same statements, same pin sets and domains."""

    name: str
    nodes: list[int]
    cap: tuple[Cap, ...]
    held: tuple[int, ...]
    capsrc: tuple[str, ...]


@dataclass
class Problem:
    """An integer placement problem with every constraint tracked by a statement id."""

    resources: list[str]
    node_ids: list[str]
    cap: list[tuple[Cap, ...]]
    held: list[tuple[int, ...]]
    node_type: list[int]
    types: list[NodeType]
    items: list[Item]
    groups: dict[str, str | None]
    limits: dict[str, tuple[int, str | None]]
    statements: dict[str, Statement]
    created: frozenset[int]
    units: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    scales: list[int] = field(default_factory=list)
    domains: dict[str, Domains] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def totals(self) -> list[int]:
        """Per resource, the capacity of all nodes together (unbounded counts as 0), >= 1."""
        if "totals" not in self.memo:
            self.memo["totals"] = [
                sum(c[r] or 0 for c in self.cap) or 1 for r in range(len(self.resources))
            ]
        return list(self.memo["totals"])

    def type_spread(self, t: int) -> float:
        """Sum over the resources type `t` has of 1 / (nodes that have it): how much of what
        is rare a node of this type holds."""
        key = f"spread:{t}"
        if key not in self.memo:
            holders = self.holders()
            self.memo[key] = sum(
                1.0 / holders[r] for r, c in enumerate(self.types[t].cap) if c is None or c
            )
        return float(self.memo[key])

    def type_size(self, t: int) -> float:
        """Sum of type `t`'s capacities, each relative to its total."""
        key = f"size:{t}"
        if key not in self.memo:
            totals = self.totals()
            self.memo[key] = sum(
                (totals[r] if c is None else c) / totals[r] for r, c in enumerate(self.types[t].cap)
            )
        return float(self.memo[key])

    def holders(self) -> list[int]:
        """Per resource, how many nodes have some of it (unbounded counts), >= 1."""
        if "holders" not in self.memo:
            self.memo["holders"] = [
                sum(1 for c in self.cap if c[r] is None or c[r]) or 1
                for r in range(len(self.resources))
            ]
        return list(self.memo["holders"])

    def cap_stmt(self, node: int, r: int) -> str:
        """The statement that bounds resource `r` on `node`."""
        return self.types[self.node_type[node]].capsrc[r]

    def quantity(self, r: int, value: int | None) -> str:
        """An integer amount of resource `r` as a short decimal."""
        return fmt(value, self.scales[r] if self.scales else 1)


@dataclass
class Mods:
    """Extra scenario constraints used by intent proofs (not user statements).

    Attributes:
        split: Task -> number of replicas to split off as single-replica units
            (named ``task#0``, ``task#1``...).
        merge: Groups of unit names forced onto one node.
        apart: Pairs of unit names forced onto different nodes.
        only: Unit name -> the node ids it may use.
        drop_intents: Ignore every intent except gangs (placements the resources allow).
        require: Preferences (intents with a weight) to treat as requirements.
        domain_apart: (key, unit a, unit b): the two units in different domains of key.
        domain_merge: (key, units): the units all in one domain of key.
        excess: (key, tasks, (domain a, domain b), k): replicas of tasks in domain a exceed
            those in domain b by at least k.
    """

    split: dict[str, int] = field(default_factory=dict)
    merge: list[tuple[str, ...]] = field(default_factory=list)
    apart: list[tuple[str, str]] = field(default_factory=list)
    only: dict[str, frozenset[str]] = field(default_factory=dict)
    drop_intents: bool = False
    require: frozenset[int] = frozenset()
    domain_apart: list[tuple[str, str, str]] = field(default_factory=list)
    domain_merge: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    excess: list[tuple[str, tuple[str, ...], tuple[int, int], int]] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    """A constraint over the domains of a key, on the items tagged `tag`.

    Attributes:
        kind: ``together`` (all in one domain), ``limit`` (at most `value` per domain),
            ``even`` (max minus min count over all domains at most `value`) or ``excess``
            (domain pair[0] holds at least `value` more than domain pair[1]).
        key: The topology key (`_topology.EACH_NODE`: every node its own domain).
        value: The limit or skew.
        stmt: The statement it comes from (None for a scenario constraint).
        tag: The item tag that counts replicas under it.
    """

    kind: str
    key: str
    value: int
    stmt: str | None
    tag: str
    pair: tuple[int, int] = (-1, -1)


def fmt(value: int | None, scale: int = 1) -> str:
    """An integer amount (in units of 1/`scale`) as a short decimal."""
    if value is None:
        return "unbounded"
    q = value / scale
    return f"{q:g}" if abs(q) < 1e6 else f"{q:.6g}"


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


_TYPE_LABEL_KEYS = (
    "type",
    "node-type",
    "node_type",
    "instance-type",
    "node.kubernetes.io/instance-type",
)


def type_label(node: Node) -> str:
    """The node's type name from its labels ("" if none)."""
    for key in _TYPE_LABEL_KEYS:
        if key in node.labels:
            return str(node.labels[key])
    return ""


def intent_statement(index: int, intent: Intent) -> Statement:
    """The statement for the plan's `index`-th intent."""
    src = intent.source or "declared in the plan"
    return Statement(f"intent:{index}", "intent", f"{intent.describe()} ({src})", src)


@functools.lru_cache(maxsize=1 << 16)
def task_statement(task: PlannedTask) -> Statement:
    """The statement for a planned task (cached: explanations and intent proofs rebuild
    sub-problems of one plan many times)."""
    req = {k: (int(v) if float(v).is_integer() else v) for k, v in task.resources.items()}
    conc = "" if task.concurrent else ", not concurrent"
    text = f"task {task.name!r} x{task.count} requesting {req}{conc}"
    if task.creates:
        made = ", ".join(f"{c.label}={c.capacity:g}" for c in task.creates)
        text += f", creating {made} on its node"
    if task.source and task.source != f"task {task.name!r}":
        text += f" (from {task.source})"
    return Statement(f"task:{task.name}", "task", text, task.source)


# ---------------------------------------------------------------- stage 1: scales


def _decimals(x: float) -> int:
    """The fewest decimals (at most 9) that write `x` exactly (up to float noise)."""
    if x == 0:
        return 0
    for k in range(10):
        v = x * 10**k
        if round(v) and abs(v - round(v)) <= 1e-9 * abs(v):
            return k
    return 9


def scales(plan: Plan, state: ClusterState, rnames: list[str]) -> list[int]:
    """Per resource, the power of ten (at most 1e9) that makes its quantities integers."""
    wanted = set(rnames)
    digits = dict.fromkeys(rnames, 0)

    def see(name: str, q: float) -> None:
        if name in wanted and digits[name] < 9:
            digits[name] = max(digits[name], _decimals(q))

    for t in plan.tasks:
        for name, q in t.resources.items():
            see(name, q)
        for c in t.creates:
            see(c.label, c.capacity)
    for res in plan.resources:
        see(res.label, res.capacity)
    for node in state.nodes.values():
        if node.alive:
            for vec in (node.available, node.total):
                for name, q in vec.items():
                    see(name, q)
    return [10 ** digits[r] for r in rnames]


def to_units(q: float, scale: int) -> int:
    """A quantity in integer units of 1/`scale`."""
    return round(q * scale)


def cap_units(q: float, scale: int) -> int:
    """A capacity in integer units, with `EPSILON`'s tolerance (as `Resources.fits_in`)."""
    return round(q * scale) + math.floor(EPSILON * scale + 1e-12)


# ---------------------------------------------------------------- stage 2: planned resources


@dataclass
class NodePart:
    """Alive nodes after the planned resources: per node capacities, held amounts, sources."""

    nodes: list[Node]
    ids: list[str]
    index: dict[str, int]
    keys: list[tuple[Any, ...]]
    statements: dict[str, Statement]
    warnings: list[str]


def _select(
    spec: Any, nodes: list[Node], avail: list[dict[str, float]], memo: dict[Any, list[int]]
) -> list[int]:
    """Nodes a non-local, non-id spec picks now; `memo` keeps answers until a label they
    depend on changes."""
    key = (spec.having, tuple(sorted((spec.labels or {}).items())), spec.num_nodes)
    if key not in memo:
        memo[key] = _select_now(spec, nodes, avail)
    return memo[key]


def _select_now(spec: Any, nodes: list[Node], avail: list[dict[str, float]]) -> list[int]:
    from escher.core.resources import Resources

    chosen = []
    for k, node in enumerate(nodes):
        if spec.having is not None:
            ok = Resources.of(spec.having).fits_in(avail[k])
        else:
            ok = all(node.labels.get(a) == b for a, b in (spec.labels or {}).items())
        if ok:
            chosen.append(k)
            if spec.num_nodes is not None and len(chosen) >= spec.num_nodes:
                break
    return chosen


def apply_planned(
    plan: Plan, state: ClusterState, rnames: tuple[str, ...], scale: tuple[int, ...]
) -> NodePart:
    """Stage 2: apply the planned resources in order; integer capacity keys per node.

    Raises:
        ValidationError: a planned resource on "the caller's node" (a plan cannot resolve it).
    """
    warnings: list[str] = []
    nodes = [n for _, n in sorted(state.nodes.items()) if n.alive]
    ids = [n.id for n in nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    avail = [dict(n.available.items()) for n in nodes]
    total = [dict(n.total.items()) for n in nodes]
    src: list[dict[str, str]] = [{} for _ in nodes]
    statements: dict[str, Statement] = {}
    memo: dict[Any, list[int]] = {}
    for i, res in enumerate(plan.resources):
        spec = res.node_spec
        if spec.is_local:
            raise ValidationError(
                f"planned resource {res.label!r} ({res.source}) has node_spec=None (the "
                "caller's node), which a plan cannot resolve; declare it with creates= on the "
                "task that makes it, or give a node id, resource vector or labels."
            )
        if spec.node_id is not None:
            chosen = [index[spec.node_id]] if spec.node_id in index else []
        else:
            chosen = _select(spec, nodes, avail, memo)
        if not chosen:
            warnings.append(f"{res.source}: {spec.describe()} selects no node; it creates nothing.")
        sid = f"res:{i}"
        statements[sid] = Statement(
            sid,
            "resource",
            f"capacity {res.capacity:g} of {res.label!r} on {spec.describe()} "
            f"({len(chosen)} node(s), {res.source})",
            res.source,
        )
        for key in [k for k in memo if k[0] is not None and res.label in k[0]]:
            del memo[key]  # availability of this label changes below
        for k in chosen:
            held = max(0.0, total[k].get(res.label, 0.0) - avail[k].get(res.label, 0.0))
            total[k][res.label] = res.capacity
            avail[k][res.label] = max(0.0, res.capacity - held)
            src[k][res.label] = sid
    ridx = {r: i for i, r in enumerate(rnames)}
    zero = [cap_units(0.0, sc) for sc in scale]
    keys = [
        _node_key(node, avail[k], total[k], src[k], ridx, scale, zero)
        for k, node in enumerate(nodes)
    ]
    return NodePart(nodes, ids, index, keys, statements, warnings)


def _node_key(
    node: Node,
    avail: dict[str, float],
    total: dict[str, float],
    src: dict[str, str],
    ridx: dict[str, int],
    scale: tuple[int, ...],
    zero: list[int],
) -> tuple[Any, ...]:
    """(capacities, held, capacity sources, type label) of one node, in integer units."""
    c = list(zero)
    h = [0] * len(ridx)
    s = [""] * len(ridx)
    for r, q in avail.items():
        if r in ridx:
            c[ridx[r]] = cap_units(q, scale[ridx[r]])
    for r, q in total.items():
        if r in ridx and q > avail.get(r, 0.0):
            h[ridx[r]] = to_units(q - avail.get(r, 0.0), scale[ridx[r]])
    for r, sid in src.items():
        if r in ridx:
            s[ridx[r]] = sid
    return (tuple(c), tuple(h), tuple(s), type_label(node))


_cache: list[tuple[ClusterState, tuple[Any, ...], tuple[str, ...], NodePart, list[int]]] = []


def _node_part(
    plan: Plan, state: ClusterState, rnames: tuple[str, ...]
) -> tuple[NodePart, list[int]]:
    """`apply_planned`, cached for the last few (state, planned resources, resource names):
    minimisation and intent proofs rebuild sub-problems of one plan many times."""
    resources = tuple(plan.resources)
    for c_state, c_res, c_rn, c_part, c_scale in _cache:
        if c_state is state and c_rn == rnames and c_res == resources:
            return c_part, c_scale
    scale = scales(plan, state, list(rnames))
    part = apply_planned(plan, state, rnames, tuple(scale))
    _cache.insert(0, (state, resources, rnames, part, scale))
    del _cache[4:]
    return part, scale


# ---------------------------------------------------------------- stage 3: node types


@dataclass
class _Ctx:
    """What the stages share while building one problem."""

    plan: Plan
    state: ClusterState
    active: frozenset[str] | None
    mods: Mods
    rnames: list[str]
    part: NodePart
    scale: list[int]
    intents: list[tuple[int, Intent]]
    statements: dict[str, Statement]
    warnings: list[str]
    domains: dict[str, Domains] = field(default_factory=dict)
    members: dict[str, list[tuple[str, int]]] = field(default_factory=dict)

    def on(self, sid: str) -> bool:
        return self.active is None or sid in self.active


def _pin_sets(ctx: _Ctx) -> tuple[dict[int, frozenset[int]], dict[str, frozenset[int]]]:
    index = ctx.part.index
    pins: dict[int, frozenset[int]] = {}
    for i, intent in ctx.intents:
        if isinstance(intent, PinnedTo) and ctx.on(f"intent:{i}"):
            missing = [n for n in intent.nodes if n not in index]
            if missing:
                ctx.warnings.append(
                    f"{intent.describe()}: no alive node(s) {missing} in the cluster."
                )
            pins[i] = frozenset(index[n] for n in intent.nodes if n in index)
    only = {u: frozenset(index[n] for n in ns if n in index) for u, ns in ctx.mods.only.items()}
    return pins, only


def _type_name(ctx: _Ctx, node_list: list[int], used: dict[str, int]) -> str:
    first = node_list[0]
    label = type_label(ctx.part.nodes[first])
    nid = ctx.part.ids[first]
    if len(node_list) == 1:
        name = f"{label} {nid!r}" if label else f"node {nid!r}"
    else:
        name = f"{label or 'nodes'} like {nid!r} ({len(node_list)} nodes)"
    used[name] = used.get(name, 0) + 1
    return name if used[name] == 1 else f"{name} #{used[name]}"


def _name_types(ctx: _Ctx, types: list[NodeType], raw_keys: list[tuple[Any, ...]]) -> None:
    """Name capacity classes (same capacities and label, whatever the pins) and create their
    capacity statements; ids do not depend on which statements are active."""
    cls_of: dict[tuple[Any, ...], list[int]] = {}
    for ti, nt in enumerate(types):
        cls_of.setdefault(raw_keys[nt.nodes[0]][:4], []).append(ti)
    used: dict[str, int] = {}
    for tids in sorted(cls_of.values(), key=lambda ts: min(types[j].nodes[0] for j in ts)):
        name = _type_name(ctx, sorted(n for j in tids for n in types[j].nodes), used)
        for ti in tids:
            nt = types[ti]
            nt.name = name
            ids: list[str] = []
            caps: list[Cap] = []
            for r, rname in enumerate(ctx.rnames):
                sid = nt.capsrc[r] or f"cap:{rname}@{name}"
                if not nt.capsrc[r]:
                    amount = fmt(nt.cap[r], ctx.scale[r])
                    text = f"{name}: {amount} {rname} available per node"
                    ctx.statements.setdefault(sid, Statement(sid, "capacity", text, name))
                ids.append(sid)
                caps.append(nt.cap[r] if ctx.on(sid) else None)
            nt.capsrc = tuple(ids)
            nt.cap = tuple(caps)


def node_types(
    ctx: _Ctx, pins: dict[int, frozenset[int]], only: dict[str, frozenset[int]]
) -> tuple[list[NodeType], list[int]]:
    """Stage 3: group interchangeable nodes into types."""
    pin_keys, only_keys = sorted(pins), sorted(only)
    dom_keys = sorted(ctx.domains)
    type_of: dict[tuple[Any, ...], int] = {}
    types: list[NodeType] = []
    node_type: list[int] = []
    raw_keys: list[tuple[Any, ...]] = []
    for k, base in enumerate(ctx.part.keys):
        key = (
            *base,
            tuple(k in pins[p] for p in pin_keys),
            tuple(k in only[u] for u in only_keys),
            tuple(ctx.domains[d].of.get(k) for d in dom_keys),
        )
        raw_keys.append(key)
        if key not in type_of:
            type_of[key] = len(types)
            types.append(NodeType("", [], base[0], base[1], base[2]))
        types[type_of[key]].nodes.append(k)
        node_type.append(type_of[key])
    _name_types(ctx, types, raw_keys)
    return types, node_type


# ---------------------------------------------------------------- stage 4: units


def _identity(ctx: _Ctx) -> tuple[dict[str, tuple[int, ...]], set[str]]:
    """Per task, the active intents naming it; and tasks that must keep their identity."""
    named: dict[str, list[int]] = {}
    for i, intent in ctx.intents:
        if ctx.on(f"intent:{i}"):
            for name in intent.tasks:
                named.setdefault(name, []).append(i)
    gangs = [
        i
        for i, intent in enumerate(ctx.plan.intents)
        if ctx.mods.drop_intents and isinstance(intent, Gang) and ctx.on(f"intent:{i}")
    ]
    for i in gangs:
        for name in ctx.plan.intents[i].tasks:
            named.setdefault(name, []).append(i)
    for j, (_key, names, _pair, _k) in enumerate(ctx.mods.excess):
        for name in names:
            named.setdefault(name, []).append(-1 - j)
    keep = set(ctx.mods.split) | {u.split("#")[0] for u in ctx.mods.only}
    return {k: tuple(sorted(set(v))) for k, v in named.items()}, keep


def units(
    ctx: _Ctx,
) -> tuple[
    dict[str, tuple[PlannedTask, int]], dict[str, list[str]], dict[str, list[tuple[str, int]]]
]:
    """Stage 4: identical tasks grouped into units; split-off replicas for scenarios.

    Returns:
        unit -> (representative task, replicas); task -> its units; unit -> member tasks
        with their replicas (in plan order).
    """
    named, keep = _identity(ctx)
    out: dict[str, tuple[PlannedTask, int]] = {}
    task_units: dict[str, list[str]] = {}
    members: dict[str, list[tuple[str, int]]] = {}
    by_key: dict[tuple[Any, ...], str] = {}
    for task in ctx.plan.tasks:
        if not ctx.on(f"task:{task.name}"):
            continue
        n_split = min(ctx.mods.split.get(task.name, 0), task.count)
        task_units[task.name] = []
        for j in range(n_split):
            u = f"{task.name}#{j}"
            out[u] = (task, 1)
            members[u] = [(task.name, 1)]
            task_units[task.name].append(u)
        rest = task.count - n_split
        if not rest:
            continue
        key: tuple[Any, ...] = (
            task.resources,
            task.creates,
            task.concurrent,
            named.get(task.name, ()),
            task.name if task.name in keep else "",
        )
        found = by_key.get(key)
        if found is None:
            u = by_key[key] = task.name
            out[u] = (task, 0)
            members[u] = []
        else:
            u = found
        out[u] = (out[u][0], out[u][1] + rest)
        members[u].append((task.name, rest))
        task_units[task.name].append(u)
    return out, task_units, members


# ---------------------------------------------------------------- stage 5: items


@dataclass
class _Groups:
    gang_of: dict[str, list[str]]
    groups: dict[str, str | None]
    limits: dict[str, tuple[int, str | None]]
    rules: list[Rule]
    limit_tasks: dict[str, set[str]]
    unit_limits: dict[str, set[str]]
    pins_of: dict[str, list[int]]
    keyed: dict[str, list[tuple[str, str]]]


def _rules(ctx: _Ctx, g: _Groups) -> None:
    """Domain rules and per-node limits of the active intents, and the tags that count them."""
    for i, intent in ctx.intents:
        sid = f"intent:{i}"
        if not ctx.on(sid):
            continue
        key = topology_key(intent)
        if isinstance(intent, Separated | SpreadAtMost):
            k = 1 if isinstance(intent, Separated) else int(intent.per_node)
            if key is None:
                g.limits[f"lim:{i}"] = (k, sid)
            else:
                g.rules.append(Rule("limit", key, k, sid, f"lim:{i}"))
            g.limit_tasks[f"lim:{i}"] = set(intent.tasks)
        elif isinstance(intent, Colocated) and key is not None:
            g.rules.append(Rule("together", key, 0, sid, f"col:{i}"))
            g.limit_tasks[f"col:{i}"] = set(intent.tasks)
        elif isinstance(intent, SpreadEvenly):
            assert key is not None
            g.rules.append(Rule("even", key, int(intent.max_skew), sid, f"even:{i}"))
            g.limit_tasks[f"even:{i}"] = set(intent.tasks)
        if key is not None:
            for name in intent.tasks:
                g.keyed.setdefault(name, []).append((key, sid))


def _groups(ctx: _Ctx, pins: dict[int, frozenset[int]]) -> _Groups:
    groups: dict[str, str | None] = {CONC: None}
    gang_of: dict[str, list[str]] = {}
    gang_src = ctx.intents if not ctx.mods.drop_intents else list(enumerate(ctx.plan.intents))
    for i, intent in gang_src:
        if isinstance(intent, Gang) and ctx.on(f"intent:{i}"):
            groups[f"gang:{i}"] = f"intent:{i}"
            for name in intent.tasks:
                gang_of.setdefault(name, []).append(f"gang:{i}")
    g = _Groups(gang_of, groups, {}, [], {}, {}, {}, {})
    _rules(ctx, g)
    for j, (a, b) in enumerate(ctx.mods.apart):
        g.limits[f"apart:{j}"] = (1, None)
        g.unit_limits.setdefault(a, set()).add(f"apart:{j}")
        g.unit_limits.setdefault(b, set()).add(f"apart:{j}")
    for j, (key, a, b) in enumerate(ctx.mods.domain_apart):
        g.rules.append(Rule("limit", key, 1, None, f"dapart:{j}"))
        g.unit_limits.setdefault(a, set()).add(f"dapart:{j}")
        g.unit_limits.setdefault(b, set()).add(f"dapart:{j}")
    for j, (key, us) in enumerate(ctx.mods.domain_merge):
        g.rules.append(Rule("together", key, 0, None, f"dmerge:{j}"))
        for u in us:
            g.unit_limits.setdefault(u, set()).add(f"dmerge:{j}")
    for j, (key, names, pair, k) in enumerate(ctx.mods.excess):
        g.rules.append(Rule("excess", key, k, None, f"excess:{j}", pair))
        g.limit_tasks[f"excess:{j}"] = set(names)
    for i in sorted(pins):
        for name in ctx.plan.intents[i].tasks:
            g.pins_of.setdefault(name, []).append(i)
    return g


def _components(
    ctx: _Ctx, unit_map: Mapping[str, tuple[PlannedTask, int]], task_units: dict[str, list[str]]
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
    ctx: _Ctx,
    unit_map: Mapping[str, tuple[PlannedTask, int]],
    task_units: dict[str, list[str]],
    g: _Groups,
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
    for root in sorted(comps):
        us = comps[root]
        is_merged = any(u in merged for u in us)
        b = _ItemBuilder(nres)
        for u in us:
            task, reps = unit_map[u]
            per = reps if is_merged else 1
            b.members.append((u, per))
            b.stmts.update(merge_stmts[u])
            b.stmts.update(f"task:{name}" for name, _ in ctx.members[u])
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
    ctx: _Ctx, b: _ItemBuilder, name: str, g: _Groups, pins: dict[int, frozenset[int]]
) -> None:
    """Pins and topology keys of the intents naming task `name` restrict where it goes."""
    for p in g.pins_of.get(name, []):
        b.restrict(pins[p])
        b.allowed_stmts.add(f"intent:{p}")
    for key, sid in g.keyed.get(name, []):
        b.restrict(frozenset(ctx.domains[key].of))
        b.allowed_stmts.add(sid)


# ---------------------------------------------------------------- build


def _statements(ctx: _Ctx) -> None:
    for task in ctx.plan.tasks:
        st = task_statement(task)
        ctx.statements[st.id] = st
    for i, intent in enumerate(ctx.plan.intents):
        st = intent_statement(i, intent)
        ctx.statements[st.id] = st


def build(
    plan: Plan,
    state: ClusterState,
    *,
    active: frozenset[str] | None = None,
    mods: Mods | None = None,
) -> Problem:
    """Build the problem of `plan` on `state`, keeping only `active` statements (None = all).

    Raises:
        ValidationError: the plan is not well-formed for verification.
    """
    mods = mods or Mods()
    rnames = sorted({r for t in plan.tasks for r in t.resources})
    part, scale = _node_part(plan, state, tuple(rnames))
    ctx = _Ctx(
        plan=plan,
        state=state,
        active=active,
        mods=mods,
        rnames=rnames,
        part=part,
        scale=scale,
        intents=[
            (i, x)
            for i, x in enumerate(plan.intents)
            if not mods.drop_intents and (not x.preferred or i in mods.require)
        ],
        statements=dict(part.statements),
        warnings=list(part.warnings),
    )
    scenario_keys = [k for k, *_ in mods.domain_apart] + [k for k, _ in mods.domain_merge]
    scenario_keys += [k for k, *_ in mods.excess]
    ctx.domains = domains_of(plan, part.nodes, ctx.intents, ctx.on, scenario_keys)
    pins, only = _pin_sets(ctx)
    types, node_type = node_types(ctx, pins, only)
    _statements(ctx)
    unit_map, task_units, members = units(ctx)
    ctx.members = members
    g = _groups(ctx, pins)
    its = items(ctx, unit_map, task_units, g, pins, only)
    ridx = {r: i for i, r in enumerate(rnames)}
    created = frozenset(ridx[c.label] for t in plan.tasks for c in t.creates if c.label in ridx)
    return Problem(
        resources=rnames,
        node_ids=part.ids,
        cap=[types[node_type[k]].cap for k in range(len(part.ids))],
        held=[types[node_type[k]].held for k in range(len(part.ids))],
        node_type=node_type,
        types=types,
        items=its,
        groups=g.groups,
        limits=g.limits,
        statements=ctx.statements,
        created=created,
        units=members,
        scales=scale,
        domains=ctx.domains,
        rules=g.rules,
        warnings=ctx.warnings,
    )


def all_statement_ids(plan: Plan, state: ClusterState) -> frozenset[str]:
    """Every statement id of the full problem."""
    return frozenset(build(plan, state).statements)
