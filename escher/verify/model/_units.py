"""Stage 4 of `build`: identical tasks grouped into units; replicas split off for scenarios."""

from __future__ import annotations

from typing import Any

from escher.core.plan import Gang, PlannedTask
from escher.verify.model._context import Ctx

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
    task: PlannedTask,
    n_split: int,
    first: dict[str, PlannedTask],
    reps: dict[str, int],
    members: Members,
) -> list[str]:
    """Single-replica units ``task#0``, ``task#1``... for the first `n_split` replicas."""
    made = []
    for j in range(n_split):
        u = f"{task.name}#{j}"
        first[u], reps[u], members[u] = task, 1, [(task.name, 1)]
        made.append(u)
    return made


def units(
    ctx: Ctx,
) -> tuple[dict[str, tuple[PlannedTask, int]], dict[str, list[str]], Members]:
    """Stage 4: identical tasks grouped into units; split-off replicas for scenarios.

    Returns:
        unit -> (representative task, replicas); task -> its units, for every task an
        intent or a scenario names (the others are found through the members); unit ->
        member tasks with their replicas (in plan order).
    """
    named, keep = _identity(ctx)
    facts = ctx.facts
    reps: dict[str, int] = {}
    first: dict[str, PlannedTask] = {}
    task_units: dict[str, list[str]] = {}
    members: Members = {}
    by_key: dict[Any, str] = {}
    split, active, sid, cls = ctx.mods.split, ctx.active, facts.sid, facts.cls
    special = named.keys() | keep | split.keys()
    if not special and active is None:  # one unit per class: worked out once per plan
        layout = facts.class_units()
        return {t.name: (t, n) for t, n, _ in layout}, {}, {t.name: ms for t, _, ms in layout}
    for task in ctx.plan.tasks:
        name = task.name
        if active is not None and sid[name] not in active:
            continue
        rest = task.count
        if name not in special:  # one unit per class (as the key below with no intents)
            key: Any = cls[name]
        else:
            mine = task_units[name] = []
            if name in split:
                mine += _split_off(task, min(split[name], rest), first, reps, members)
                rest -= len(mine)
                if not rest:
                    continue
            key = (cls[name], named.get(name, ()), name if name in keep else "")
            mine.append(by_key.get(key, name))
        u = by_key.get(key)
        if u is None:
            u = by_key[key] = name
            first[u], reps[u], members[u] = task, 0, []
        reps[u] += rest
        members[u].append((name, rest))
    return {u: (task, reps[u]) for u, task in first.items()}, task_units, members
