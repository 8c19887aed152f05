"""Stage 2 of `build`: node capacities after the plan's planned `set_resource` calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.plan import Plan
from escher.verify._scales import cap_units, scales, to_units
from escher.verify._statement import Statement

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


def node_part(
    plan: Plan, state: ClusterState, rnames: tuple[str, ...]
) -> tuple[NodePart, list[int]]:
    """`apply_planned`, cached for the last few (state, planned resources, resource names,
    scales): minimisation and intent proofs rebuild sub-problems of one plan many times."""
    resources = tuple(plan.resources)
    scale = scales(plan, state, list(rnames))
    for c_state, c_res, c_rn, c_part, c_scale in _cache:
        if c_state is state and c_rn == rnames and c_res == resources and c_scale == scale:
            return c_part, c_scale
    part = apply_planned(plan, state, rnames, tuple(scale))
    _cache.insert(0, (state, resources, rnames, part, scale))
    del _cache[4:]
    return part, scale
