"""Facts of a plan's tasks, computed once per plan.

Minimisation and intent proofs build many sub-problems of one plan, and a plan written one
entry per task has thousands of tasks with a few distinct requests: what only depends on the
tasks (their distinct requests, statements, resource names, decimals) is worked out once.
"""

from __future__ import annotations

import functools
import itertools
import operator
from typing import Any

from escher.core.plan import Plan, PlannedTask, ResourceCreation
from escher.core.resources import Resources
from escher.verify.model._statement import Statement, task_statement

#: A unit of identical tasks: its first task, its replicas in all, its members and theirs.
ClassUnit = tuple[PlannedTask, int, list[tuple[str, int]]]


class PlanFacts:
    """What the problem builder needs of a plan's tasks.

    A plan written one entry per task has thousands of tasks: what maps every task (`sid`,
    `tasks`, `pos`) is made on first use; `cls` and the class units in one pass.

    Attributes:
        requests: The distinct requests, in plan order.
        creations: The distinct creations, in plan order.
        rnames: Every resource some task requests, sorted.
        cls: Task name -> its class: tasks of one class have the same request, creations
            and concurrency.
        makers: Label -> the tasks that create it, in plan order.
    """

    def __init__(self, tasks: tuple[PlannedTask, ...]) -> None:
        self._all = tasks
        names = list(map(_name, tasks))
        # Tasks read from one file share their request and creation objects: classes are
        # told apart by identity first (cheap), by value once per distinct identity.
        by_id: dict[tuple[int, int, bool], int] = {}
        classes: dict[tuple[Any, ...], int] = {}
        members: list[list[tuple[str, int]]] = []
        firsts: list[PlannedTask] = []
        of_task = []
        for t in tasks:
            ident = (id(t.resources), id(t.creates), t.concurrent)
            c = by_id.get(ident)
            if c is None:
                key = (t.resources, t.creates, t.concurrent)
                c = by_id[ident] = classes.setdefault(key, len(classes))
                if c == len(members):
                    members.append([])
                    firsts.append(t)
            of_task.append(c)
            members[c].append((t.name, t.count))
        self.requests: list[Resources] = list(dict.fromkeys(t.resources for t in firsts))
        made = dict.fromkeys(m for t in firsts for m in t.creates)
        self.creations: list[ResourceCreation] = list(made)
        self.rnames: list[str] = sorted({r for req in self.requests for r in req})
        self.cls: dict[str, int] = dict(zip(names, of_task, strict=True))
        self.makers: dict[str, list[str]] = {}
        for t in itertools.compress(tasks, map(_made, tasks)):
            for m in t.creates:
                self.makers.setdefault(m.label, []).append(t.name)
        self._units: list[ClassUnit] = [
            (t, sum(n for _, n in ms), ms) for t, ms in zip(firsts, members, strict=True)
        ]
        self._unit_lists = {id(ms) for _, _, ms in self._units}
        self._unit_sids: dict[int, frozenset[str]] = {}
        self.written: dict[str, Statement] = {}

    @functools.cached_property
    def sid(self) -> dict[str, str]:
        """Task name -> its statement id (``task:<name>``)."""
        names = self.cls.keys()
        return dict(zip(names, map("task:".__add__, names), strict=True))

    @functools.cached_property
    def tasks(self) -> dict[str, PlannedTask]:
        """Statement id (``task:<name>``) -> the task."""
        return dict(zip(self.sid.values(), self._all, strict=True))

    @functools.cached_property
    def pos(self) -> dict[str, int]:
        """Task name -> its position in the plan."""
        return dict(zip(self.cls, range(len(self.cls)), strict=True))

    def class_units(self) -> list[ClassUnit]:
        """Per class, in order of first appearance: its first task, its replicas in all and
        its member tasks with their replicas (the units of a plan when no intent or scenario
        names a task)."""
        return self._units

    def member_sids(self, members: list[tuple[str, int]]) -> frozenset[str]:
        """The statement ids of `members` (remembered for the member lists of
        `class_units`)."""
        got = self._unit_sids.get(id(members))
        if got is None:
            got = frozenset("task:" + name for name, _ in members)
            if id(members) in self._unit_lists:
                self._unit_sids[id(members)] = got
        return got

    def statement(self, sid: str) -> Statement | None:
        """The statement of the task with statement id `sid` (None if there is none)."""
        if sid not in self.written:
            task = self.tasks.get(sid)
            if task is None:
                return None
            self.written[sid] = task_statement(task)
        return self.written[sid]


_memo: list[tuple[Plan, tuple[PlannedTask, ...], PlanFacts]] = []

_name = operator.attrgetter("name")
_made = operator.attrgetter("creates")


def plan_facts(plan: Plan) -> PlanFacts:
    """The facts of `plan`'s tasks (remembered for the last few plans, while their task
    lists stay the same)."""
    tasks = plan.tasks
    for j, (known, known_tasks, facts) in enumerate(_memo):
        if (
            known is plan
            and len(known_tasks) == len(tasks)
            and all(map(operator.is_, known_tasks, tasks))
        ):
            _memo.insert(0, _memo.pop(j))
            return facts
    facts = PlanFacts(tuple(tasks))
    _memo.insert(0, (plan, facts._all, facts))
    del _memo[8:]
    return facts
