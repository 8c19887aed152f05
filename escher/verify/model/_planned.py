"""Stage 2 of `build`: node capacities after the plan's planned `set_resource` calls."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.plan import Plan, PlannedResource
from escher.verify.model._facts import PlanFacts
from escher.verify.model._scales import cap_units, scales, to_units
from escher.verify.model._statement import Statement

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


@dataclass
class NodePart:
    """Alive nodes after the planned resources: per node capacities, held amounts, sources."""

    nodes: list[Node]
    ids: list[str]
    index: dict[str, int]
    keys: list[tuple[Any, ...]]
    statements: dict[str, Statement]
    warnings: list[str]
    #: The nodes in classes of one key each (ascending indices): stages that group nodes
    #: work per class, not per node (10,000 nodes are a few classes).
    classes: list[list[int]] = field(default_factory=list)


@dataclass
class _Class:
    """Nodes that are the same for the planned resources so far: availability, totals,
    labels, and which planned resource set each label."""

    members: list[int]
    avail: dict[str, float]
    total: dict[str, float]
    labels: Mapping[str, str]
    src: dict[str, str] = field(default_factory=dict)

    def split(self, chosen: list[int]) -> _Class:
        """The `chosen` members as a class of their own (self keeps the others)."""
        if len(chosen) == len(self.members):
            return self
        gone = set(chosen)
        self.members = [k for k in self.members if k not in gone]
        return _Class(chosen, dict(self.avail), dict(self.total), self.labels, dict(self.src))


def _classes(nodes: list[Node]) -> list[_Class]:
    """Alive nodes grouped by availability, totals and labels (in node order)."""
    by_key: dict[tuple[Any, ...], _Class] = {}
    for k, node in enumerate(nodes):
        key = (
            tuple(sorted(node.available.items())),
            tuple(sorted(node.total.items())),
            tuple(sorted(node.labels.items())),
        )
        cls = by_key.get(key)
        if cls is None:
            by_key[key] = _Class(
                [k], dict(node.available.items()), dict(node.total.items()), node.labels
            )
        else:
            cls.members.append(k)
    return list(by_key.values())


def _matches(spec: NodeSpec, cls: _Class) -> bool:
    if spec.having is not None:
        return spec.having.fits_in(cls.avail)
    return all(cls.labels.get(a) == b for a, b in (spec.labels or {}).items())


def _choose(
    spec: NodeSpec, classes: list[_Class], index: dict[str, int], owner: list[_Class]
) -> list[tuple[_Class, list[int]]]:
    """The classes a spec picks now, each with the members it picks (the first
    `num_nodes` matching nodes in node order, all of them without a limit)."""
    if spec.node_id is not None:
        k = index.get(spec.node_id)
        return [] if k is None else [(owner[k], [k])]
    hits = [c for c in classes if _matches(spec, c)]
    if spec.num_nodes is None:
        return [(c, c.members) for c in hits]
    first = list(itertools.islice(heapq.merge(*(c.members for c in hits)), spec.num_nodes))
    chosen = set(first)
    picked = [(c, [k for k in c.members if k in chosen]) for c in hits]
    return [(c, ks) for c, ks in picked if ks]


def _resource_statement(i: int, res: PlannedResource, count: int) -> Statement:
    sid = f"res:{i}"
    text = (
        f"capacity {res.capacity:g} of {res.label!r} on {res.node_spec.describe()} "
        f"({count} node(s), {res.source})"
    )
    return Statement(sid, "resource", text, res.source)


def apply_planned(
    plan: Plan, state: ClusterState, rnames: tuple[str, ...], scale: tuple[int, ...]
) -> NodePart:
    """Stage 2: apply the planned resources in order, to classes of identical nodes (not
    node by node); integer capacity keys per node.

    Raises:
        ValidationError: a planned resource on "the caller's node" (a plan cannot resolve it).
    """
    warnings: list[str] = []
    nodes = [n for _, n in sorted(state.nodes.items()) if n.alive]
    ids = [n.id for n in nodes]
    index = {nid: i for i, nid in enumerate(ids)}
    classes = _classes(nodes)
    owner = [classes[0]] * len(nodes) if classes else []
    for c in classes:
        for k in c.members:
            owner[k] = c
    statements: dict[str, Statement] = {}
    for i, res in enumerate(plan.resources):
        spec = res.node_spec
        if spec.is_local:
            raise ValidationError(
                f"planned resource {res.label!r} ({res.source}) has node_spec=None (the "
                "caller's node), which a plan cannot resolve; declare it with creates= on the "
                "task that makes it, or give a node id, resource vector or labels."
            )
        chosen = [cls.split(ks) for cls, ks in _choose(spec, classes, index, owner)]
        for c in chosen:
            if all(c is not d for d in classes):
                classes.append(c)
                for k in c.members:
                    owner[k] = c
        count = sum(len(c.members) for c in chosen)
        if not count:
            warnings.append(f"{res.source}: {spec.describe()} selects no node; it creates nothing.")
        st = statements[f"res:{i}"] = _resource_statement(i, res, count)
        for c in chosen:
            held = max(0.0, c.total.get(res.label, 0.0) - c.avail.get(res.label, 0.0))
            c.total[res.label] = res.capacity
            c.avail[res.label] = max(0.0, res.capacity - held)
            c.src[res.label] = st.id
    ridx = {r: i for i, r in enumerate(rnames)}
    zero = [cap_units(0.0, sc) for sc in scale]
    keys: list[tuple[Any, ...]] = [()] * len(nodes)
    for c in classes:
        key = _node_key(nodes[c.members[0]], c.avail, c.total, c.src, ridx, scale, zero)
        for k in c.members:
            keys[k] = key
    members = [list(c.members) for c in classes if c.members]
    return NodePart(nodes, ids, index, keys, statements, warnings, members)


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


def node_part(
    plan: Plan, state: ClusterState, rnames: tuple[str, ...], facts: PlanFacts
) -> tuple[NodePart, list[int]]:
    """`apply_planned`, cached for the last few (state, planned resources, resource names,
    scales): minimisation and intent proofs rebuild sub-problems of one plan many times."""
    resources = tuple(plan.resources)
    scale = scales(plan, state, list(rnames), facts)
    for c_state, c_res, c_rn, c_part, c_scale in _cache:
        if c_state is state and c_rn == rnames and c_res == resources and c_scale == scale:
            return c_part, c_scale
    part = apply_planned(plan, state, rnames, tuple(scale))
    _cache.insert(0, (state, resources, rnames, part, scale))
    del _cache[4:]
    return part, scale
