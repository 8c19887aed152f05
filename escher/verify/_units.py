"""Stage 4 of `build`: identical tasks grouped into units; replicas split off for scenarios."""

from __future__ import annotations

from typing import Any

from escher.core.plan import Gang, PlannedTask
from escher.verify._context import Ctx
from escher.verify._facts import plan_facts

#: Unit -> its member tasks with their replicas.
Members = dict[str, list[tuple[str, int]]]


def _identity(ctx: Ctx) -> tuple[dict[str, tuple[int, ...]], set[str]]:
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


def _split_off(
    task: PlannedTask, n_split: int, out: dict[str, tuple[PlannedTask, int]], members: Members
) -> list[str]:
    """Single-replica units ``task#0``, ``task#1``... for the first `n_split` replicas."""
    made = []
    for j in range(n_split):
        u = f"{task.name}#{j}"
        out[u] = (task, 1)
        members[u] = [(task.name, 1)]
        made.append(u)
    return made


def units(
    ctx: Ctx,
) -> tuple[dict[str, tuple[PlannedTask, int]], dict[str, list[str]], Members]:
    """Stage 4: identical tasks grouped into units; split-off replicas for scenarios.

    Returns:
        unit -> (representative task, replicas); task -> its units; unit -> member tasks
        with their replicas (in plan order).
    """
    named, keep = _identity(ctx)
    facts = plan_facts(ctx.plan)
    out: dict[str, tuple[PlannedTask, int]] = {}
    task_units: dict[str, list[str]] = {}
    members: Members = {}
    by_key: dict[tuple[Any, ...], str] = {}
    split, active = ctx.mods.split, ctx.active
    for task in ctx.plan.tasks:
        name = task.name
        if active is not None and facts.sid[name] not in active:
            continue
        rest = task.count
        mine = task_units[name] = []
        if name in split:
            mine += _split_off(task, min(split[name], rest), out, members)
            rest -= len(mine)
            if not rest:
                continue
        key = (facts.cls[name], named.get(name, ()), name if name in keep else "")
        u = by_key.get(key)
        if u is None:
            u = by_key[key] = name
            out[u] = (task, 0)
            members[u] = []
        out[u] = (out[u][0], out[u][1] + rest)
        members[u].append((name, rest))
        mine.append(u)
    return out, task_units, members
