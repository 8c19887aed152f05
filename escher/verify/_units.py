"""Stage 4 of `build`: identical tasks grouped into units; replicas split off for scenarios."""

from __future__ import annotations

from typing import Any

from escher.core.plan import Gang, PlannedTask
from escher.verify._context import Ctx


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


def units(
    ctx: Ctx,
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
