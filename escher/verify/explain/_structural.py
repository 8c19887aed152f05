"""Intents the resource model settles by itself, proven without a solver.

`CoLocation` writes a group as one task that creates a label on its own node and members
that request it. When that label exists nowhere else (no node has it, no planned resource
makes it) and exactly one replica creates it, every replica that requests it runs on that
replica's node: the intent holds in every placement, and no scenario needs deciding (the
scenarios would each load and run Z3 on a sub-problem the argument settles at once).
"""

from __future__ import annotations

from collections.abc import Set

from escher.core.plan import Colocated, Intent, Plan, PlannedTask

__all__ = ["settled_by_creation"]


def _always_requests(task: PlannedTask, label: str) -> bool:
    """Every request the task may run with (its own and each fallback) asks for `label`."""
    return all(req.get(label, 0) > 0 for req in (task.resources, *task.fallbacks))


def settled_by_creation(intent: Intent, sub: Plan, node_labels: Set[str]) -> str | None:
    """Why every placement of `sub` keeps the per-node `Colocated` `intent`, or None.

    Holds when some label is made by exactly one replica of `sub` (on its own node), by no
    planned resource and on no node already (`node_labels`), and each of the intent's tasks
    is that replica or requests the label whatever request it runs with.

    Args:
        intent: The intent (only a `Colocated` without a topology key is ever settled here).
        sub: Its sub-plan (`intent_subplan`): every task making a label its tasks request.
        node_labels: Every resource name on a live node of the cluster.
    """
    if not isinstance(intent, Colocated) or intent.topology_key is not None:
        return None
    by_name = {t.name: t for t in sub.tasks}
    tasks = [by_name[n] for n in dict.fromkeys(intent.tasks) if n in by_name]
    if len(tasks) < 1:
        return None
    planned = {r.label for r in sub.resources}
    first = tasks[0]
    for label in sorted({*first.resources, *(c.label for c in first.creates)}):
        if label in node_labels or label in planned:
            continue
        makers = [t for t in sub.tasks if any(c.label == label for c in t.creates)]
        if len(makers) != 1 or makers[0].count != 1:
            continue
        maker = makers[0]
        if all(t is maker or _always_requests(t, label) for t in tasks):
            return (
                f"every replica requests {label!r}, which only the one replica of "
                f"{maker.name!r} creates, on its own node: all run on that node"
            )
    return None
