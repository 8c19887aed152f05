"""A plan file written one entry per task, decided at the cost of its distinct tasks.

Entries that differ only in name and source, that no intent names and that create nothing
are one group: the verdict is decided on a plan with one task per group (the group's first
entry, with the replicas of all), and its witness is dealt back to the entries. The plan as
written is built only when an answer needs its own tasks (an explanation).
"""

from __future__ import annotations

import functools
import operator
import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError
from escher.core.formats import load_json, paused_gc, validate_document
from escher.core.plan import Plan
from escher.verify._engine import decide

#: Group task name -> the names of the entries it stands for (in file order) and the
#: replicas of each (entries of a group are alike but for name and source).
Members = dict[str, tuple[list[str], int]]


@dataclass
class Grouping:
    """A plan to decide (`plan`) and how its tasks stand for the plan as written.

    Attributes:
        plan: One task per group; tasks not grouped are as written.
        members: Per task of `plan` that stands for two entries or more, those entries.
    """

    plan: Plan
    members: Members
    _written: Callable[[], Plan] = field(repr=False)

    @functools.cached_property
    def written(self) -> Plan:
        """The plan as written (built on first use)."""
        return self._written()

    def deal(self, witness: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """`witness` of `plan` as one of the written plan: each group's nodes (in order)
        dealt to its entries in order."""
        if not self.members:
            return dict(witness)  # type: ignore[arg-type]
        out: dict[str, list[str]] = {}
        for task, nodes in witness.items():
            group = self.members.get(task)
            if group is None:
                out[task] = list(nodes)
                continue
            names, count = group
            if count == 1:
                out.update(zip(names, [[node] for node in nodes], strict=True))
            else:
                out.update(zip(names, map(list, _chunks(nodes, count)), strict=True))
        return out

    def written_sids(self, sids: frozenset[str]) -> frozenset[str]:
        """Statement ids of `plan` as ids of the written plan (a group's task: its
        entries')."""
        if not self.members:
            return sids
        out: set[str] = set()
        for sid in sids:
            group = self.members.get(sid[5:]) if sid.startswith("task:") else None
            if group is None:
                out.add(sid)
            else:
                out.update(map("task:".__add__, group[0]))
        return frozenset(out)

    def fewest_entries(
        self,
        state: ClusterState,
        core: frozenset[str],
        *,
        deadline: float,
        memory_mb: int | None = None,
    ) -> tuple[frozenset[str], bool]:
        """`core` (ids of `plan`, a conflicting set) as ids of the written plan, keeping of
        each group the fewest entries that still conflict with the rest: a binary search per
        group (its entries are alike, and fewer tasks never make a plan harder: groups
        create nothing). True when every search finished by `deadline`.

        The result is minimal when `core` is minimal for `plan`: dropping one more entry of
        a group makes it feasible by the search, and a statement that `core` needs with
        whole groups is needed with fewer entries too.
        """
        if not self.members:
            return core, True
        counts = {t.name: t.count for t in self.plan.tasks}
        kept: dict[str, int] = {}
        finished = True
        for sid in sorted(core):
            group = self.members.get(sid[5:]) if sid.startswith("task:") else None
            if group is None:
                continue
            name, (names, each) = sid[5:], group
            lo, hi = 1, len(names)  # hi entries: known to conflict
            while finished and lo < hi:
                # All but one first: a group a conflict needs whole takes one decision.
                mid = hi - 1 if hi == len(names) else (lo + hi) // 2
                counts[name] = mid * each
                left = deadline - time.monotonic()
                got = self._conflicts(counts, state, core, left, memory_mb) if left > 0 else None
                if got is None:
                    finished = False
                elif got:
                    hi = mid
                else:
                    lo = mid + 1
            counts[name] = hi * each
            kept[name] = hi
        out = {sid for sid in core if sid[5:] not in kept or not sid.startswith("task:")}
        for name, k in kept.items():
            out.update("task:" + entry for entry in self.members[name][0][:k])
        return frozenset(out), finished

    def _conflicts(
        self,
        counts: Mapping[str, int],
        state: ClusterState,
        core: frozenset[str],
        seconds: float,
        memory_mb: int | None,
    ) -> bool | None:
        """Whether the statements `core` of `plan` with these replicas conflict (None:
        undecided in `seconds`)."""
        tasks = [
            t if t.count == counts[t.name] else replace(t, count=counts[t.name])
            for t in self.plan.tasks
        ]
        trial = Plan(self.plan.resources, tasks, self.plan.intents, self.plan.topologies)
        d = decide(
            trial, state, deadline=time.monotonic() + seconds, active=core, memory_mb=memory_mb
        )
        return {"infeasible": True, "feasible": False}.get(d.status)


def as_written(plan: Plan) -> Grouping:
    """A plan decided as it is."""
    return Grouping(plan, {}, lambda: plan)


def load_grouped(path: str | Path) -> Grouping:
    """Read a plan file (like `Plan.load`), grouping its entries.

    Raises:
        PlanFormatError: unreadable file or bad content, naming the file and place (the
            same error `Plan.load` raises).
    """
    source = str(path)
    data = load_json(path, "plan")
    with paused_gc():
        shapes = validate_document(data, "plan", source=source)
        assert shapes is not None  # a valid plan has a list of tasks

        def written() -> Plan:
            return Plan.from_dict(data, source=source)

        reduced, members = _reduce(data, shapes)
        if not members:
            plan = written()
            return Grouping(plan, {}, lambda: plan)
        try:
            plan = Plan.from_dict(reduced, source=source)
        except PlanFormatError:  # a duplicate name, too many replicas: say it as written
            plan = written()
            return Grouping(plan, {}, lambda: plan)
        return Grouping(plan, members, written)


def _reduce(data: dict[str, Any], shapes: list[Hashable]) -> tuple[dict[str, Any], Members]:
    """`data` with one entry per group, and the groups of two entries or more."""
    entries: list[dict[str, Any]] = data["tasks"]
    names: list[str] = list(map(operator.itemgetter("name"), entries))
    if len(set(names)) != len(names):  # reported by Plan.from_dict, in document order
        return data, {}
    keys: list[Hashable] = shapes
    named = {n for i in data.get("intents", ()) for n in i.get("tasks", ())}
    if named:
        keys = [
            ("alone", i) if n in named else k
            for i, (n, k) in enumerate(zip(names, keys, strict=True))
        ]
    groups: defaultdict[Hashable, list[int]] = defaultdict(list)
    for key, i in zip(keys, range(len(keys)), strict=True):
        groups[key].append(i)
    if len(groups) == len(entries):
        return data, {}
    kept: list[dict[str, Any]] = []
    members: Members = {}
    for group in groups.values():
        first = entries[group[0]]
        if len(group) == 1 or first.get("creates"):
            kept.extend(entries[i] for i in group)
            continue
        count = first.get("count", 1)  # the shape has the count: one for all
        kept.append({**first, "count": count * len(group)})
        members[first["name"]] = ([names[i] for i in group], count)
    return {**data, "tasks": kept}, members


def _chunks(nodes: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    return (nodes[pos : pos + size] for pos in range(0, len(nodes), size))
