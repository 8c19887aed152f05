"""Stage 3 of `build`: interchangeable nodes grouped into node types."""

from __future__ import annotations

from typing import Any

from escher.core.plan import PinnedTo
from escher.verify.model._context import Ctx
from escher.verify.model._planned import type_label
from escher.verify.model._problem import Cap, NodeType
from escher.verify.model._statement import Statement, fmt


def pin_sets(ctx: Ctx) -> tuple[dict[int, frozenset[int]], dict[str, frozenset[int]]]:
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


def _type_name(ctx: Ctx, node_list: list[int], used: dict[str, int]) -> str:
    first = node_list[0]
    label = type_label(ctx.part.nodes[first])
    nid = ctx.part.ids[first]
    if len(node_list) == 1:
        name = f"{label} {nid!r}" if label else f"node {nid!r}"
    else:
        name = f"{label or 'nodes'} like {nid!r} ({len(node_list)} nodes)"
    used[name] = used.get(name, 0) + 1
    return name if used[name] == 1 else f"{name} #{used[name]}"


def _name_types(ctx: Ctx, types: list[NodeType], raw_keys: list[tuple[Any, ...]]) -> None:
    """Name capacity classes (same capacities and label, whatever the pins) and create their
    capacity statements; ids do not depend on which statements are active. `raw_keys` holds
    each type's key."""
    cls_of: dict[tuple[Any, ...], list[int]] = {}
    for ti in range(len(types)):
        cls_of.setdefault(raw_keys[ti][:4], []).append(ti)
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


def _grouped(
    ctx: Ctx, pins: dict[int, frozenset[int]], only: dict[str, frozenset[int]]
) -> dict[tuple[Any, ...], list[int]]:
    """Node indices by type key (capacities, held, sources, label, then pins, scenario
    nodes and domains). Nodes of one class of `NodePart` share the first four parts, so the
    capacities are hashed once per class; only pins, scenario nodes and domains are per node."""
    part = ctx.part
    pin_keys, only_keys = sorted(pins), sorted(only)
    dom_keys = sorted(ctx.domains)
    classes = part.classes or [[k] for k in range(len(part.keys))]
    by_key: dict[tuple[Any, ...], list[int]] = {}
    for members in classes:
        base = part.keys[members[0]]
        if not (pin_keys or only_keys or dom_keys):
            by_key.setdefault((*base, (), (), ()), []).extend(members)
            continue
        for k in members:
            key = (
                *base,
                tuple(k in pins[p] for p in pin_keys),
                tuple(k in only[u] for u in only_keys),
                tuple(ctx.domains[d].of.get(k) for d in dom_keys),
            )
            by_key.setdefault(key, []).append(k)
    return by_key


def node_types(
    ctx: Ctx, pins: dict[int, frozenset[int]], only: dict[str, frozenset[int]]
) -> tuple[list[NodeType], list[int]]:
    """Stage 3: group interchangeable nodes into types (numbered by their first node)."""
    by_key = _grouped(ctx, pins, only)
    for nodes in by_key.values():
        nodes.sort()  # classes of one key merge out of order
    ordered = sorted(by_key.items(), key=lambda kv: kv[1][0])
    types: list[NodeType] = []
    node_type: list[int] = [0] * len(ctx.part.keys)
    raw_keys: list[tuple[Any, ...]] = []
    for ti, (key, nodes) in enumerate(ordered):
        types.append(NodeType("", nodes, key[0], key[1], key[2]))
        raw_keys.append(key)
        for k in nodes:
            node_type[k] = ti
    _name_types(ctx, types, raw_keys)
    return types, node_type
