"""Facts of a plan's tasks, computed once per plan.

Minimisation and intent proofs build many sub-problems of one plan, and a plan written one
entry per task has thousands of tasks with a few distinct requests: what only depends on the
tasks (their distinct requests, statements, resource names, decimals) is worked out once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from escher.core.plan import Plan, PlannedTask, ResourceCreation
from escher.core.resources import Resources
from escher.verify._statement import Statement, task_statement


@dataclass
class PlanFacts:
    """What the problem builder needs of a plan's tasks.

    Attributes:
        requests: The distinct requests, in plan order.
        creations: The distinct creations, in plan order.
        rnames: Every resource some task requests, sorted.
        tasks: Statement id (``task:<name>``) -> the task.
        sid: Task name -> its statement id (``task:<name>``).
        cls: Task name -> its class: tasks of one class have the same request, creations
            and concurrency.
        pos: Task name -> its position in the plan.
        makers: Label -> the tasks that create it, in plan order.
    """

    requests: list[Resources]
    creations: list[ResourceCreation]
    rnames: list[str]
    tasks: dict[str, PlannedTask]
    sid: dict[str, str]
    cls: dict[str, int]
    pos: dict[str, int]
    makers: dict[str, list[str]]
    written: dict[str, Statement] = field(default_factory=dict)

    def statement(self, sid: str) -> Statement | None:
        """The statement of the task with statement id `sid` (None if there is none)."""
        if sid not in self.written:
            task = self.tasks.get(sid)
            if task is None:
                return None
            self.written[sid] = task_statement(task)
        return self.written[sid]


_memo: list[tuple[Plan, tuple[PlannedTask, ...], PlanFacts]] = []


def plan_facts(plan: Plan) -> PlanFacts:
    """The facts of `plan`'s tasks (remembered for the last few plans, while their task
    lists stay the same)."""
    tasks = tuple(plan.tasks)
    for j, (known, known_tasks, facts) in enumerate(_memo):
        if known is plan and known_tasks == tasks:
            _memo.insert(0, _memo.pop(j))
            return facts
    # Tasks read from one file share their request objects: tell classes apart by identity
    # first (cheap), by value once per distinct object.
    distinct = {id(t.resources): t.resources for t in tasks}
    requests = list(dict.fromkeys(distinct.values()))
    names = [t.name for t in tasks]
    sid = {name: "task:" + name for name in names}
    classes: dict[tuple[Any, ...], int] = {}
    by_id: dict[tuple[int, int, bool], int] = {}
    of_task = []
    for t in tasks:
        ident = (id(t.resources), id(t.creates), t.concurrent)
        got = by_id.get(ident)
        if got is None:
            key = (t.resources, t.creates, t.concurrent)
            got = by_id[ident] = classes.setdefault(key, len(classes))
        of_task.append(got)
    facts = PlanFacts(
        requests,
        list(dict.fromkeys(c for t in tasks for c in t.creates)),
        sorted({r for req in requests for r in req}),
        dict(zip(sid.values(), tasks, strict=True)),
        sid,
        dict(zip(names, of_task, strict=True)),
        dict(zip(names, range(len(names)), strict=True)),
        {},
    )
    for t in tasks:
        for c in t.creates:
            facts.makers.setdefault(c.label, []).append(t.name)
    _memo.insert(0, (plan, tasks, facts))
    del _memo[8:]
    return facts
