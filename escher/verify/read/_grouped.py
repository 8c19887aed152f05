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
from escher.core.formats import paused_gc, schema
from escher.core.plan import Plan
from escher.core.planfile import PlanDocument, read_plan_file
from escher.verify.engines import decide
from escher.verify.model import Statement, named_statement, task_words

#: The most replicas a plan file's task entry may have: a group has at most as many (a
#: group of more stays as written, as a file of one entry could not say it).
MOST_PER_ENTRY: int = schema("plan")["properties"]["tasks"]["items"]["properties"]["count"][
    "maximum"
]

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
    #: Entry name -> its source as written ("" for none), built when called.
    _sources: Callable[[], Mapping[str, str]] = field(default=dict, repr=False)

    @functools.cached_property
    def written(self) -> Plan:
        """The plan as written (built on first use)."""
        return self._written()

    def statement(self, sid: str) -> Statement | None:
        """The statement of entry `sid` (``task:<name>``) of a group, as the plan as written
        has it; None for any other statement."""
        name = sid[5:]
        words = self._words_of.get(name) if sid.startswith("task:") else None
        if words is None:
            return None
        source = self._source_by_name.get(name) or f"task {name!r}"
        return named_statement(name, source, words)

    @functools.cached_property
    def _words_of(self) -> dict[str, str]:
        """Entry name -> what its statement says after its name, for entries in groups."""
        tasks = {t.name: t for t in self.plan.tasks if t.name in self.members}
        out: dict[str, str] = {}
        for group, (names, each) in self.members.items():
            out.update(dict.fromkeys(names, task_words(replace(tasks[group], count=each))))
        return out

    @functools.cached_property
    def _source_by_name(self) -> Mapping[str, str]:
        return self._sources()

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
            trial,
            state,
            deadline=time.monotonic() + seconds,
            active=core,
            memory_mb=memory_mb,
            side_by_side=False,  # one of many short tries
        )
        return {"infeasible": True, "feasible": False}.get(d.status)


def as_written(plan: Plan) -> Grouping:
    """A plan decided as it is."""
    return Grouping(plan, {}, lambda: plan)


def load_grouped(path: str | Path) -> Grouping:
    """Read a plan file (with `Plan.load`'s reader, `escher.core.planfile`), grouping its
    entries.

    Raises:
        PlanFormatError: unreadable file or bad content, naming the file and place (the
            same error `Plan.load` raises).
    """
    with paused_gc():
        return _grouping(read_plan_file(path))


def _grouping(doc: PlanDocument) -> Grouping:
    """The grouping of a checked plan document."""
    grouped = _group(doc.names, doc.shapes, doc.entry, _named(doc.rest))
    if grouped is not None:
        kept, members = grouped
        names = list(map(operator.itemgetter("name"), kept))
        sources = [e.get("source", "") for e in kept]
        # Each kept entry its own shape: a group's entry has the replicas of all.
        one = PlanDocument(doc.source, names, sources, names, kept.__getitem__, doc.rest)
        plan = Plan.from_document(one)

        def written() -> Plan:
            with paused_gc():
                return Plan.from_document(doc)

        def by_name() -> dict[str, str]:
            return dict(zip(doc.names, doc.sources, strict=True))

        return Grouping(plan, members, written, by_name)
    plan = Plan.from_document(doc)
    return Grouping(plan, {}, lambda: plan)


def _named(rest: dict[str, Any]) -> set[str]:
    """The task names the (checked) document's intents name."""
    return {n for i in rest.get("intents", ()) for n in i["tasks"]}


def _group(
    names: list[str],
    keys: Sequence[Hashable],
    entry: Callable[[int], dict[str, Any]],
    named: set[str],
) -> tuple[list[dict[str, Any]], Members] | None:
    """The task entries with one per group, and the groups of two entries or more; None when
    no two entries group (or two have one name: reported by `Plan.from_dict`, in document
    order). Entries group when their `keys` are equal, no intent names them and they create
    nothing; `entry(i)` is entry `i`."""
    if len(set(names)) != len(names):
        return None
    if named:
        keys = [
            ("alone", i) if n in named else k
            for i, (n, k) in enumerate(zip(names, keys, strict=True))
        ]
    groups: defaultdict[Hashable, list[int]] = defaultdict(list)
    for key, i in zip(keys, range(len(keys)), strict=True):
        groups[key].append(i)
    if len(groups) == len(names):
        return None
    kept: list[dict[str, Any]] = []
    members: Members = {}
    for group in groups.values():
        first = entry(group[0])
        count = first.get("count", 1)  # the shape has the count: one for all
        if len(group) == 1 or first.get("creates") or count * len(group) > MOST_PER_ENTRY:
            kept.extend(map(entry, group))
            continue
        kept.append({**first, "count": count * len(group)})
        members[first["name"]] = ([names[i] for i in group], count)
    return kept, members


def _chunks(nodes: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    return (nodes[pos : pos + size] for pos in range(0, len(nodes), size))
