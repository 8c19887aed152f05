"""Stage 5a of `build`: simultaneous groups, per-node limits and domain rules of the intents."""

from __future__ import annotations

from dataclasses import dataclass

from escher.core.plan import Colocated, Gang, Separated, SpreadAtMost, SpreadEvenly
from escher.verify.model._context import Ctx
from escher.verify.model._problem import CONC, Rule
from escher.verify.model._topology import topology_key


@dataclass
class Groups:
    gang_of: dict[str, list[str]]
    groups: dict[str, str | None]
    limits: dict[str, tuple[int, str | None]]
    rules: list[Rule]
    limit_tasks: dict[str, set[str]]
    unit_limits: dict[str, set[str]]
    pins_of: dict[str, list[int]]
    keyed: dict[str, list[tuple[str, str]]]


def _rules(ctx: Ctx, g: Groups) -> None:
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


def groups(ctx: Ctx, pins: dict[int, frozenset[int]]) -> Groups:
    groups: dict[str, str | None] = {CONC: None}
    gang_of: dict[str, list[str]] = {}
    gang_src = ctx.intents if not ctx.mods.drop_intents else list(enumerate(ctx.plan.intents))
    for i, intent in gang_src:
        if isinstance(intent, Gang) and ctx.on(f"intent:{i}"):
            groups[f"gang:{i}"] = f"intent:{i}"
            for name in intent.tasks:
                gang_of.setdefault(name, []).append(f"gang:{i}")
    g = Groups(gang_of, groups, {}, [], {}, {}, {}, {})
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
