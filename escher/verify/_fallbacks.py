"""Plans with fallback requests (a `FirstOf`): which alternative each replica runs with.

Every engine decides plans whose tasks have one request each, so a plan with fallbacks is
decided through such plans (*candidates*), in this order:

1. the preferred requests: feasible -> the witness uses every preferred request;
2. the least requests (per resource, the least any alternative asks): a task needs at least
   that whichever alternative it runs with, so infeasible -> infeasible under every
   alternative (sound, however many replicas there are);
3. the candidates in order of preference (fewest and earliest fallbacks first): the
   replicas of a task split over its alternatives, the part on fallback i named
   ``NAME@fallback-i``; the first feasible one is the answer. When every candidate was
   decided infeasible, so is the plan; when the candidates ran out (`MAX_CANDIDATES`) or
   one was undecided, the plan is unknown, not infeasible.

A requirement about a task holds for each of its parts; a preference (e.g. what only the
preferred alternative of a `FirstOf` promises) only for its part on the preferred request.
`Verifier` decides the chosen candidate and `Choice.witness` names the parts by their task
again.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from escher.core.cluster import ClusterState
from escher.core.plan import Plan, PlannedTask
from escher.core.resources import Resources
from escher.verify.engines import decide

#: At most this many candidates (splits of replicas over alternatives) are decided.
MAX_CANDIDATES = 64

#: Share of the time left the preferred requests and the least requests may use each.
FIRST_SHARE = 0.3


@dataclass(frozen=True)
class Choice:
    """The candidate to decide for a plan with fallbacks, and how to read its answer.

    Attributes:
        plan: A plan whose tasks have one request each.
        parts: Task of the plan as written -> (task of `plan`, alternative index) per part.
        preferences: For a feasible candidate: which alternative each task runs with.
        warnings: What the user should know about how the alternatives were decided.
        undecided: Non-empty when an infeasible answer on `plan` does not make the plan
            infeasible (why; the verdict is then unknown).
        names: The tasks of the plan as written, in order.
    """

    plan: Plan
    parts: Mapping[str, tuple[tuple[str, int], ...]]
    preferences: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    undecided: str = ""
    names: tuple[str, ...] = ()

    def witness(self, witness: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
        """`witness` (for `plan`) with each task's parts under the task's own name."""
        out: dict[str, list[str]] = {}
        for name in self.names:
            parts = self.parts.get(name)
            if parts is None:
                out[name] = list(witness.get(name, ()))
            else:
                out[name] = [n for part, _ in parts for n in witness.get(part, ())]
        return out


def has_fallbacks(plan: Plan) -> bool:
    """True if a task of `plan` has fallback requests."""
    return any(t.fallbacks for t in plan.tasks)


def _text(request: Resources) -> str:
    return str({k: round(v, 6) for k, v in request.items()})


def _alternatives(task: PlannedTask) -> str:
    return " | ".join(_text(r) for r in task.alternatives)


def least_request(task: PlannedTask) -> Resources:
    """Per resource, the least any alternative of `task` asks (0 where one asks none)."""
    alts = task.alternatives
    keys = set(alts[0]).intersection(*alts[1:])
    return Resources({k: min(r[k] for r in alts) for k in sorted(keys) if min(r[k] for r in alts)})


def _with(
    plan: Plan, tasks: list[PlannedTask], parts: Mapping[str, tuple[tuple[str, int], ...]]
) -> Plan:
    """`plan` with `tasks`; a requirement about a split task holds for each of its parts, a
    preference only for its part on the preferred request (dropped if none is left)."""
    intents = []
    for intent in plan.intents:
        names = tuple(
            part
            for t in intent.tasks
            for part, index in parts.get(t, ((t, 0),))
            if index == 0 or not intent.preferred
        )
        if names:
            intents.append(dataclasses.replace(intent, tasks=names))
    topologies = {k: dict(v) for k, v in plan.topologies.items()}
    return Plan(list(plan.resources), tasks, intents, topologies)


def _single(plan: Plan, pick: Mapping[str, Resources]) -> Plan:
    """`plan` with each task of `pick` asking only its request there."""
    tasks = [
        dataclasses.replace(t, resources=pick[t.name], fallbacks=()) if t.name in pick else t
        for t in plan.tasks
    ]
    return _with(plan, tasks, {})


def _part_name(name: str, index: int) -> str:
    return name if index == 0 else f"{name}@fallback-{index}"


def _splits(task: PlannedTask) -> list[tuple[int, ...]]:
    """Splits of the task's replicas over its alternatives, fewest and earliest fallbacks
    first (each step moves one replica one alternative later), at most `MAX_CANDIDATES`."""
    start = (task.count,) + (0,) * len(task.fallbacks)
    found, level, seen = [start], [start], {start}
    while level and len(found) < MAX_CANDIDATES:
        nxt = []
        for split in level:
            for i in range(len(split) - 1):
                if split[i]:
                    moved = (*split[:i], split[i] - 1, split[i + 1] + 1, *split[i + 2 :])
                    if moved not in seen:
                        seen.add(moved)
                        nxt.append(moved)
        found.extend(nxt)
        level = nxt
    return found[:MAX_CANDIDATES]


def _candidates(tasks: list[PlannedTask]) -> Iterator[tuple[tuple[int, ...], ...]]:
    """Splits for `tasks` together, fewest and earliest fallbacks first (best first over
    the product of each task's splits)."""
    options = [_splits(t) for t in tasks]
    depth = [[sum(i * n for i, n in enumerate(s)) for s in opts] for opts in options]
    start = (0,) * len(tasks)
    heap = [(0, start)]
    seen = {start}
    while heap:
        cost, at = heapq.heappop(heap)
        yield tuple(options[j][i] for j, i in enumerate(at))
        for j in range(len(at)):
            if at[j] + 1 < len(options[j]):
                nxt = (*at[:j], at[j] + 1, *at[j + 1 :])
                if nxt not in seen:
                    seen.add(nxt)
                    new = cost - depth[j][at[j]] + depth[j][at[j] + 1]
                    heapq.heappush(heap, (new, nxt))


def _exhaustive(tasks: list[PlannedTask]) -> bool:
    """True if `_candidates` lists every split of these tasks within `MAX_CANDIDATES`."""
    total = 1
    for t in tasks:
        total *= math.comb(t.count + len(t.fallbacks), len(t.fallbacks))
        if total > MAX_CANDIDATES:
            return False
    return True


def _split_plan(
    plan: Plan, tasks: list[PlannedTask], splits: tuple[tuple[int, ...], ...]
) -> tuple[Plan, dict[str, tuple[tuple[str, int], ...]]]:
    chosen = dict(zip((t.name for t in tasks), splits, strict=True))
    taken = {t.name for t in plan.tasks}
    out: list[PlannedTask] = []
    parts: dict[str, tuple[tuple[str, int], ...]] = {}
    for t in plan.tasks:
        split = chosen.get(t.name)
        if split is None:
            out.append(t)
            continue
        mine: list[tuple[str, int]] = []
        for i, n in enumerate(split):
            if not n:
                continue
            name = _part_name(t.name, i)
            while name != t.name and name in taken:
                name += "'"
            taken.add(name)
            out.append(
                dataclasses.replace(
                    t, name=name, resources=t.alternatives[i], count=n, fallbacks=()
                )
            )
            mine.append((name, i))
        parts[t.name] = tuple(mine)
    return _with(plan, out, parts), parts


def _describe(task: PlannedTask, split: tuple[int, ...]) -> str:
    if split[0] == task.count:
        return f"task {task.name!r} runs with its preferred request {_text(task.resources)}"
    used = ", ".join(
        f"{n} on {'the preferred request' if i == 0 else f'fallback {i}'} "
        f"{_text(task.alternatives[i])}"
        for i, n in enumerate(split)
        if n
    )
    return f"task {task.name!r} runs {task.count} replica(s): {used}"


def choose(
    plan: Plan, state: ClusterState, *, deadline: float, memory_mb: int | None = None
) -> Choice:
    """The candidate that decides `plan` (see the module doc).

    Args:
        plan: A plan with fallbacks (`has_fallbacks`).
        state: The cluster.
        deadline: A `time.monotonic()` value; what is left after the choice goes to
            deciding the chosen candidate.
        memory_mb: Z3's memory limit.
    """
    tasks = [t for t in plan.tasks if t.fallbacks]
    names = tuple(t.name for t in plan.tasks)
    named = ", ".join(f"{t.name!r} ({_alternatives(t)})" for t in tasks)

    def until(share: float) -> float:
        return time.monotonic() + max(deadline - time.monotonic(), 0.0) * share

    preferred = tuple((t.count,) + (0,) * len(t.fallbacks) for t in tasks)
    first, parts = _split_plan(plan, tasks, preferred)
    d = decide(first, state, deadline=until(FIRST_SHARE), memory_mb=memory_mb)
    undecided = "" if d.status == "infeasible" else f"the preferred requests of {named} undecided"
    if d.status == "feasible":
        lines = tuple(_describe(t, s) for t, s in zip(tasks, preferred, strict=True))
        return Choice(first, parts, lines, names=names)
    least = _single(plan, {t.name: least_request(t) for t in tasks})
    d = decide(least, state, deadline=until(FIRST_SHARE), memory_mb=memory_mb)
    if d.status == "infeasible":
        note = (
            f"infeasible under every alternative of {named}: the explanation names each "
            "task with the least any of its alternatives asks"
        )
        return Choice(least, {}, (), (note,), names=names)
    tried = 0
    for splits in _candidates(tasks):
        if splits == preferred:
            continue
        if tried >= MAX_CANDIDATES or time.monotonic() >= deadline:
            undecided = f"only {tried} combination(s) of the alternatives of {named} tried"
            break
        tried += 1
        candidate, parts = _split_plan(plan, tasks, splits)
        left = max(deadline - time.monotonic(), 0.0)
        d = decide(
            candidate,
            state,
            deadline=time.monotonic() + left / max(2, MAX_CANDIDATES - tried),
            memory_mb=memory_mb,
        )
        if d.status == "feasible":
            lines = tuple(_describe(t, s) for t, s in zip(tasks, splits, strict=True))
            return Choice(candidate, parts, lines, names=names)
        if d.status != "infeasible":
            undecided = undecided or f"a combination of the alternatives of {named} undecided"
    else:
        if not _exhaustive(tasks):  # a task's splits were cut at MAX_CANDIDATES
            undecided = f"not every combination of the alternatives of {named} was tried"
    first, parts = _split_plan(plan, tasks, preferred)
    if undecided:
        return Choice(first, parts, (), (), f"{undecided}; give more time (--timeout)", names)
    note = (
        f"infeasible under every combination of the alternatives of {named}; the "
        "explanation is for the preferred requests"
    )
    return Choice(first, parts, (), (note,), names=names)
