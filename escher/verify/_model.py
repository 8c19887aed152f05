"""Normalise a (Plan, ClusterState) pair into an integer placement problem.

Every constraint of the problem is tracked by the id of the user's statement it comes from
(`Statement`): a task (`task:<name>`), an intent (`intent:<i>`), the capacity of a resource on a
node type (`cap:<resource>@<type>`) or the capacity set by a planned `set_resource`
(`res:<i>`). A sub-problem keeps only some statements: dropped tasks and intents disappear,
dropped capacities become unbounded. Quantities are scaled to integers (micro-units).

Semantics (see docs/verify.md):
* Plan tasks use what nodes have *available* now; planned resources are applied in order
  first (a resource-vector node spec matches on availability at that point).
* `concurrent` tasks hold their resources together; each `Gang` intent is also a group whose
  members hold their resources together; any other replica only has to fit alone on its node.
* A replica that `creates` label L sets L's capacity on its node to the creation capacity
  (minus what running tasks hold of L there); with several creators the largest counts.
* Colocated/Separated/SpreadAtMost/PinnedTo intents constrain where replicas go.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    Separated,
    SpreadAtMost,
)

SCALE = 1_000_000
CONC = "conc"

#: An integer capacity vector entry; None means unbounded (its statement was dropped).
Cap = int | None


def to_int(quantity: float) -> int:
    """A quantity in integer micro-units."""
    return round(quantity * SCALE)


def fmt(value: int | None) -> str:
    """A micro-unit integer as a short decimal."""
    if value is None:
        return "unbounded"
    q = value / SCALE
    return f"{q:g}" if abs(q) < 1e6 else f"{q:.6g}"


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
        members: (task name, replicas) carried by one copy.
        mult: Number of identical copies (each copy goes to some node).
        loads: Group id -> per-resource load of one copy in that simultaneous group.
        single: Per-resource largest request of a replica that only has to fit alone.
        creates: Resource index -> capacity a copy creates on its node.
        tags: Limit id -> replicas of that limit's tasks in one copy.
        allowed: Node indices a copy may use (None = any).
        stmts: Statement ids this item depends on.
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

    def shape(self) -> tuple[Any, ...]:
        """Key of the class of interchangeable items."""
        return (
            tuple(sorted(self.loads.items())),
            self.single,
            tuple(sorted(self.creates.items())),
            tuple(sorted(self.tags.items())),
            self.allowed,
        )


@dataclass
class NodeType:
    """Interchangeable nodes: same capacities, same statements, same pin sets."""

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
    warnings: list[str] = field(default_factory=list)

    def cap_stmt(self, node: int, r: int) -> str:
        """The statement that bounds resource `r` on `node`."""
        return self.types[self.node_type[node]].capsrc[r]


@dataclass
class Mods:
    """Extra scenario constraints used by intent checks (not user statements).

    Attributes:
        split: Task -> number of replicas to split off as single-replica units
            (named ``task#0``, ``task#1``...).
        merge: Groups of unit names forced onto one node.
        apart: Pairs of unit names forced onto different nodes.
        forbid: Unit name -> node ids it must avoid... inverted: unit -> allowed node ids.
        drop_intents: Ignore every intent except gangs (placements the resources allow).
    """

    split: dict[str, int] = field(default_factory=dict)
    merge: list[tuple[str, ...]] = field(default_factory=list)
    apart: list[tuple[str, str]] = field(default_factory=list)
    only: dict[str, frozenset[str]] = field(default_factory=dict)
    drop_intents: bool = False


class _UF:
    def __init__(self, keys: Iterable[str]) -> None:
        self.parent = {k: k for k in keys}

    def find(self, k: str) -> str:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: str, b: str) -> None:
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


def intent_statement(index: int, intent: Intent) -> Statement:
    """The statement for the plan's `index`-th intent."""
    src = intent.source or "declared in the plan"
    return Statement(f"intent:{index}", "intent", f"{intent.describe()} ({src})", src)


def task_statement(task: Any) -> Statement:
    """The statement for a planned task."""
    req = {k: (int(v) if float(v).is_integer() else v) for k, v in task.resources.items()}
    conc = "" if task.concurrent else ", not concurrent"
    text = f"task {task.name!r} x{task.count} requesting {req}{conc}"
    if task.creates:
        made = ", ".join(f"{c.label}={c.capacity:g}" for c in task.creates)
        text += f", creating {made} on its node"
    if task.source and task.source != f"task {task.name!r}":
        text += f" (from {task.source})"
    return Statement(f"task:{task.name}", "task", text, task.source)


@dataclass
class _NodePart:
    nodes: list[Any]
    ids: list[str]
    index: dict[str, int]
    keys: list[tuple[Any, ...]]
    statements: dict[str, Statement]
    warnings: list[str]


_cache: list[tuple[ClusterState, tuple[Any, ...], tuple[str, ...], _NodePart]] = []


def _node_part(plan: Plan, state: ClusterState, rnames: tuple[str, ...]) -> _NodePart:
    """Nodes after the planned resources: per node (capacities, held, sources, label).

    Cached for the last few (state, planned resources, resource names): core minimisation
    and intent checks rebuild sub-problems of one plan many times.
    """
    resources = tuple(plan.resources)
    for c_state, c_res, c_rn, c_part in _cache:
        if c_state is state and c_rn == rnames and c_res == resources:
            return c_part
    warnings: list[str] = []
    node_objs = [n for _, n in sorted(state.nodes.items()) if n.alive]
    node_ids = [n.id for n in node_objs]
    index = {nid: i for i, nid in enumerate(node_ids)}

    # Apply planned resources (always; their capacity statement may be dropped).
    avail = [dict(n.available.items()) for n in node_objs]
    total = [dict(n.total.items()) for n in node_objs]
    src: list[dict[str, str]] = [{} for _ in node_objs]
    statements: dict[str, Statement] = {}
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
            chosen = []
            for k, node in enumerate(node_objs):
                if spec.having is not None:
                    ok = all(avail[k].get(r, 0.0) + 1e-9 >= q for r, q in spec.having.items())
                else:
                    ok = all(node.labels.get(a) == b for a, b in (spec.labels or {}).items())
                if ok:
                    chosen.append(k)
                    if spec.num_nodes is not None and len(chosen) >= spec.num_nodes:
                        break
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
        for k in chosen:
            held = max(0.0, total[k].get(res.label, 0.0) - avail[k].get(res.label, 0.0))
            total[k][res.label] = res.capacity
            avail[k][res.label] = max(0.0, res.capacity - held)
            src[k][res.label] = sid

    def type_label(k: int) -> str:
        labels = node_objs[k].labels
        for key in _TYPE_LABEL_KEYS:
            if key in labels:
                return str(labels[key])
        return ""

    keys = []
    for k in range(len(node_objs)):
        c = tuple(to_int(avail[k].get(r, 0.0)) for r in rnames)
        h = tuple(to_int(max(0.0, total[k].get(r, 0.0) - avail[k].get(r, 0.0))) for r in rnames)
        s = tuple(src[k].get(r, "") for r in rnames)
        keys.append((c, h, s, type_label(k)))
    part = _NodePart(node_objs, node_ids, index, keys, statements, warnings)
    _cache.insert(0, (state, resources, rnames, part))
    del _cache[3:]
    return part


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

    def on(sid: str) -> bool:
        return active is None or sid in active

    warnings: list[str] = []

    tasks = [t for t in plan.tasks if on(f"task:{t.name}")]
    names = {t.name for t in plan.tasks}
    rnames: list[str] = sorted({r for t in plan.tasks for r in t.resources})
    ridx = {r: i for i, r in enumerate(rnames)}
    nres = len(rnames)
    base = _node_part(plan, state, tuple(rnames))
    node_objs, node_ids, index, base_keys = base.nodes, base.ids, base.index, base.keys
    statements: dict[str, Statement] = dict(base.statements)
    warnings.extend(base.warnings)

    # Per node integer capacities, held amounts and capacity statement sources.
    created_names = {c.label for t in plan.tasks for c in t.creates}
    created = frozenset(ridx[c] for c in created_names if c in ridx)

    # Pins: node index sets per active PinnedTo intent.
    intents = [] if mods.drop_intents else list(enumerate(plan.intents))
    pin_sets: dict[int, frozenset[int]] = {}
    for i, intent in intents:
        if isinstance(intent, PinnedTo) and on(f"intent:{i}"):
            missing = [n for n in intent.nodes if n not in index]
            if missing:
                warnings.append(f"{intent.describe()}: no alive node(s) {missing} in the cluster.")
            pin_sets[i] = frozenset(index[n] for n in intent.nodes if n in index)
    only_sets = {u: frozenset(index[n] for n in ns if n in index) for u, ns in mods.only.items()}
    pin_keys = sorted(pin_sets)
    only_keys = sorted(only_sets)

    def type_label(k: int) -> str:
        labels = node_objs[k].labels
        for key in _TYPE_LABEL_KEYS:
            if key in labels:
                return str(labels[key])
        return ""

    type_of: dict[tuple[Any, ...], int] = {}
    types: list[NodeType] = []
    node_type: list[int] = []
    caps: list[tuple[Cap, ...]] = []
    helds: list[tuple[int, ...]] = []
    raw_keys: list[tuple[Any, ...]] = []
    for k in range(len(node_objs)):
        c, h, s, _label = base_keys[k]
        key = (
            *base_keys[k],
            tuple(k in pin_sets[p] for p in pin_keys),
            tuple(k in only_sets[u] for u in only_keys),
        )
        raw_keys.append(key)
        if key not in type_of:
            type_of[key] = len(types)
            types.append(NodeType("", [], c, h, s))
        ti = type_of[key]
        types[ti].nodes.append(k)
        node_type.append(ti)
    # Name capacity classes (same capacities and label, whatever the pins) and create their
    # capacity statements; ids must not depend on which statements are active.
    cls_of: dict[tuple[Any, ...], list[int]] = {}
    for ti, nt in enumerate(types):
        key = raw_keys[nt.nodes[0]][:4]
        cls_of.setdefault(key, []).append(ti)
    used_names: dict[str, int] = {}
    for tids in sorted(cls_of.values(), key=lambda ts: min(types[j].nodes[0] for j in ts)):
        node_list = sorted(n for j in tids for n in types[j].nodes)
        first = node_list[0]
        label = type_label(first)
        if len(node_list) == 1:
            name = f"{label} {node_ids[first]!r}" if label else f"node {node_ids[first]!r}"
        else:
            name = f"{label or 'nodes'} like {node_ids[first]!r} ({len(node_list)} nodes)"
        if name in used_names:
            used_names[name] += 1
            name = f"{name} #{used_names[name]}"
        else:
            used_names[name] = 1
        for ti in tids:
            nt = types[ti]
            nt.name = name
            ids: list[str] = []
            cap_list: list[Cap] = []
            for r, rname in enumerate(rnames):
                sid = nt.capsrc[r] or f"cap:{rname}@{name}"
                if not nt.capsrc[r]:
                    statements.setdefault(
                        sid,
                        Statement(
                            sid,
                            "capacity",
                            f"{name}: {fmt(nt.cap[r])} {rname} available per node",
                            name,
                        ),
                    )
                ids.append(sid)
                cap_list.append(nt.cap[r] if on(sid) else None)
            nt.capsrc = tuple(ids)
            nt.cap = tuple(cap_list)
    for k in range(len(node_objs)):
        caps.append(types[node_type[k]].cap)
        helds.append(types[node_type[k]].held)

    # Statements for tasks and intents.
    for task in plan.tasks:
        st = task_statement(task)
        statements[st.id] = st
    for i, intent in enumerate(plan.intents):
        st = intent_statement(i, intent)
        statements[st.id] = st

    # Units: tasks, with split-off replicas for scenarios.
    units: dict[str, tuple[str, int]] = {}  # unit -> (task, replicas)
    task_units: dict[str, list[str]] = {}
    for task in tasks:
        n_split = min(mods.split.get(task.name, 0), task.count)
        task_units[task.name] = []
        for j in range(n_split):
            units[f"{task.name}#{j}"] = (task.name, 1)
            task_units[task.name].append(f"{task.name}#{j}")
        if task.count > n_split:
            units[task.name] = (task.name, task.count - n_split)
            task_units[task.name].append(task.name)
    by_name = {t.name: t for t in tasks}

    uf = _UF(units)
    merged: set[str] = set()
    merge_stmts: dict[str, set[str]] = {u: set() for u in units}
    for i, intent in intents:
        if isinstance(intent, Colocated) and on(f"intent:{i}"):
            us = [u for name in intent.tasks if name in by_name for u in task_units[name]]
            for u in us:
                merged.add(u)
                merge_stmts[u].add(f"intent:{i}")
            for u in us[1:]:
                uf.union(us[0], u)
    for group in mods.merge:
        us = [u for u in group if u in units]
        merged.update(us)
        for u in us[1:]:
            uf.union(us[0], u)

    # Simultaneous groups.
    groups: dict[str, str | None] = {CONC: None}
    gang_of: dict[str, list[str]] = {}
    for i, intent in intents:
        if isinstance(intent, Gang) and on(f"intent:{i}"):
            gid = f"gang:{i}"
            groups[gid] = f"intent:{i}"
            for name in intent.tasks:
                gang_of.setdefault(name, []).append(gid)
    # Also keep gangs when intents are dropped for scenarios (gangs are about feasibility).
    if mods.drop_intents:
        for i, intent in enumerate(plan.intents):
            if isinstance(intent, Gang) and on(f"intent:{i}"):
                gid = f"gang:{i}"
                groups[gid] = f"intent:{i}"
                for name in intent.tasks:
                    gang_of.setdefault(name, []).append(gid)

    # Limits: separation and spread.
    limits: dict[str, tuple[int, str | None]] = {}
    limit_tasks: dict[str, set[str]] = {}
    for i, intent in intents:
        if isinstance(intent, Separated | SpreadAtMost) and on(f"intent:{i}"):
            k = 1 if isinstance(intent, Separated) else int(intent.per_node)
            limits[f"lim:{i}"] = (k, f"intent:{i}")
            limit_tasks[f"lim:{i}"] = set(intent.tasks)
    unit_limits: dict[str, set[str]] = {}
    for j, (a, b) in enumerate(mods.apart):
        lid = f"apart:{j}"
        limits[lid] = (1, None)
        unit_limits.setdefault(a, set()).add(lid)
        unit_limits.setdefault(b, set()).add(lid)

    pins_of: dict[str, list[int]] = {}
    for i in pin_keys:
        intent = plan.intents[i]
        for name in intent.tasks:
            pins_of.setdefault(name, []).append(i)

    def vec(req: Any) -> list[int]:
        v = [0] * nres
        for r, q in req.items():
            v[ridx[r]] += to_int(q)
        return v

    comps: dict[str, list[str]] = {}
    for u in units:
        comps.setdefault(uf.find(u), []).append(u)
    items: list[Item] = []
    for root in sorted(comps):
        us = comps[root]
        is_merged = any(u in merged for u in us)
        loads: dict[str, list[int]] = {}
        single = [0] * nres
        creates: dict[int, int] = {}
        tags: dict[str, int] = {}
        allowed: frozenset[int] | None = None
        allowed_stmts: set[str] = set()
        stmts: set[str] = set()
        members: list[tuple[str, int]] = []
        for u in us:
            tname, reps = units[u]
            t = by_name[tname]
            per = reps if is_merged else 1
            members.append((tname, per))
            stmts.add(f"task:{tname}")
            stmts.update(merge_stmts[u])
            v = vec(t.resources)
            gids = list(gang_of.get(tname, []))
            if t.concurrent:
                gids.append(CONC)
            for g in gids:
                cur = loads.setdefault(g, [0] * nres)
                for r in range(nres):
                    cur[r] += v[r] * per
            if not gids:
                single = [max(a, b) for a, b in zip(single, v, strict=True)]
            for c in t.creates:
                if c.label in ridx:
                    r = ridx[c.label]
                    creates[r] = max(creates.get(r, 0), to_int(c.capacity))
            for lid, lt in limit_tasks.items():
                if tname in lt:
                    tags[lid] = tags.get(lid, 0) + per
            for lid in unit_limits.get(u, ()):
                tags[lid] = tags.get(lid, 0) + per
            for p in pins_of.get(tname, []):
                allowed = pin_sets[p] if allowed is None else allowed & pin_sets[p]
                allowed_stmts.add(f"intent:{p}")
            if u in only_sets:
                allowed = only_sets[u] if allowed is None else allowed & only_sets[u]
        mult = 1 if is_merged else units[us[0]][1]
        items.append(
            Item(
                members=members,
                mult=mult,
                loads={g: tuple(v) for g, v in loads.items() if any(v)},
                single=tuple(single),
                creates=creates,
                tags=tags,
                allowed=allowed,
                stmts=frozenset(stmts),
                allowed_stmts=frozenset(allowed_stmts),
            )
        )
    _ = names
    return Problem(
        resources=rnames,
        node_ids=node_ids,
        cap=caps,
        held=helds,
        node_type=node_type,
        types=types,
        items=items,
        groups=groups,
        limits=limits,
        statements=statements,
        created=created,
        warnings=warnings,
    )


def all_statement_ids(plan: Plan, state: ClusterState) -> frozenset[str]:
    """Every statement id of the full problem."""
    return frozenset(build(plan, state).statements)
