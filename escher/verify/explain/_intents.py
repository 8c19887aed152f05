"""Intent proofs: does every placement the resources allow keep a declared intent?

An intent is proven on its *policy structure*, not on the whole plan: the sub-plan of the
tasks it names, the tasks that create labels they request, and the planned resources of
those labels (`intent_subplan`). Other tasks only take room away, so a proof on the sub-plan
holds for the whole plan, and a counterexample shows the policy's resources alone do not
enforce the intent. Each proof asks for placements of scenario sub-problems that would break
the intent (two co-located replicas apart, k+1 separated ones together, ...); identical tasks
are one class, so scenarios grow with shapes, not tasks. Results are cached by the shape of
the sub-plan (labels and task names renamed), so a policy used many times is proven once.
"""

from __future__ import annotations

import itertools
import operator
import time
from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass

from escher.core.cluster import ClusterState
from escher.core.plan import (
    Colocated,
    Gang,
    Intent,
    PinnedTo,
    Plan,
    PlannedTask,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.verify._result import IntentResult, IntentStatus
from escher.verify.check import check_placement, intent_violation, to_witness
from escher.verify.engines import decide
from escher.verify.explain._structural import settled_by_creation
from escher.verify.model import (
    EACH_NODE,
    Mods,
    PlanFacts,
    domains_for,
    plan_facts,
    topology_key,
)

#: Scenarios tried per intent before it is reported unknown ("too many cases").
SCENARIO_LIMIT = 200


def intent_subplan(plan: Plan, intent: Intent) -> Plan:
    """The policy structure of `intent`: its tasks, the tasks that create labels they
    request, the tasks that request labels they create (a group's members follow the one
    that creates its label), the planned resources of those labels, and gangs among them.

    Every placement of the whole plan, cut to these tasks, is a placement of the subplan (it
    holds every task that makes a label one of its tasks requests), so an intent that holds
    on the subplan holds on the plan."""
    facts = plan_facts(plan)
    return _subplan(plan, intent, facts, _takers(plan, facts.makers))


def _subplan(plan: Plan, intent: Intent, facts: PlanFacts, takers: Mapping[str, list[str]]) -> Plan:
    """`intent_subplan`, given the plan's facts and takers (read once per plan, not per
    intent: that was quadratic in the intents)."""
    keep: set[str] = set()
    todo = [n for n in intent.tasks if n in facts.pos]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        task = plan.tasks[facts.pos[name]]
        for r in task.resources:
            todo.extend(m for m in facts.makers.get(r, ()) if m not in keep)
        for c in task.creates:
            todo.extend(m for m in takers.get(c.label, ()) if m not in keep)
    tasks = [plan.tasks[i] for i in sorted(facts.pos[n] for n in keep)]
    labels = {r for t in tasks for r in t.resources} | {c.label for t in tasks for c in t.creates}
    sub = Plan(topologies={k: dict(v) for k, v in plan.topologies.items()})
    for res in plan.resources:
        if res.label in labels:
            sub.resources.append(res)
    sub.tasks.extend(tasks)
    for other in _gangs(plan):
        names = tuple(n for n in other.tasks if n in keep)
        if names:
            sub.intents.append(Gang(names, source=other.source))
    return sub


def _takers(plan: Plan, makers: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Label made by a task -> the tasks that request it, in plan order."""
    takers: dict[str, list[str]] = {}
    if makers:
        for t in plan.tasks:
            for r in t.resources:
                if r in makers:
                    takers.setdefault(r, []).append(t.name)
    return takers


_gang_memo: list[tuple[Plan, tuple[Intent, ...], list[Gang]]] = []


def _gangs(plan: Plan) -> list[Gang]:
    """The plan's required gangs (remembered for the last plan while its intents stay the
    same: a sub-plan per intent read them all, quadratic in the intents)."""
    intents = plan.intents
    if _gang_memo:
        known, known_intents, gangs = _gang_memo[0]
        if (
            known is plan
            and len(known_intents) == len(intents)
            and all(map(operator.is_, known_intents, intents))
        ):
            return gangs
    gangs = [g for g in intents if isinstance(g, Gang) and not g.preferred]
    _gang_memo[:] = [(plan, tuple(intents), gangs)]
    return gangs


def _classes(sub: Plan, names: list[str]) -> list[list[PlannedTask]]:
    """The intent's tasks in classes of interchangeable ones (same request, creations,
    concurrency and gangs)."""
    gangs = {n: tuple(i for i, g in enumerate(sub.intents) if n in g.tasks) for n in names}
    out: dict[Hashable, list[PlannedTask]] = {}
    for name in names:
        t = sub.task(name)
        out.setdefault((t.resources, t.creates, t.concurrent, gangs[name]), []).append(t)
    return list(out.values())


def _take(cls: list[PlannedTask], k: int) -> dict[str, int]:
    """Replicas to split off to pick `k` replicas of a class (first tasks first)."""
    out: dict[str, int] = {}
    for t in cls:
        if k <= 0:
            break
        j = min(k, t.count)
        out[t.name] = j
        k -= j
    return out


def _units(split: dict[str, int]) -> list[str]:
    return [f"{n}#{j}" for n, c in split.items() for j in range(c)]


def _merge(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


def _pairs(classes: list[list[PlannedTask]]) -> Iterator[tuple[dict[str, int], str, str]]:
    """Two replicas from the classes (one scenario per pair of classes)."""
    size = [sum(t.count for t in c) for c in classes]
    for i, j in itertools.combinations_with_replacement(range(len(classes)), 2):
        if i == j:
            if size[i] >= 2:
                u = _units(_take(classes[i], 2))
                yield _take(classes[i], 2), u[0], u[1]
        else:
            a, b = _take(classes[i], 1), _take(classes[j], 1)
            yield _merge(a, b), _units(a)[0], _units(b)[0]


def _groups_of(classes: list[list[PlannedTask]], k: int) -> Iterator[dict[str, int]]:
    """Multisets of `k` replicas from the classes, one per way to count them by class."""
    size = [sum(t.count for t in c) for c in classes]
    for combo in itertools.combinations_with_replacement(range(len(classes)), k):
        want: dict[int, int] = {}
        for c in combo:
            want[c] = want.get(c, 0) + 1
        if all(want[c] <= size[c] for c in want):
            split: dict[str, int] = {}
            for c, n in want.items():
                split = _merge(split, _take(classes[c], n))
            yield split


@dataclass
class _Scenarios:
    sub: Plan
    intent: Intent
    state: ClusterState

    def __iter__(self) -> Iterator[Mods]:
        names = list(
            dict.fromkeys(n for n in self.intent.tasks if n in {t.name for t in self.sub.tasks})
        )
        classes = _classes(self.sub, names)
        key = topology_key(self.intent)
        if key is not None and key != EACH_NODE:
            yield from self._outside(classes, key)
        intent = self.intent
        if isinstance(intent, Colocated):
            for split, u, v in _pairs(classes):
                if key is None:
                    yield Mods(split=split, apart=[(u, v)], drop_intents=True)
                else:
                    yield Mods(split=split, domain_apart=[(key, u, v)], drop_intents=True)
        elif isinstance(intent, Separated | SpreadAtMost):
            k = 1 if isinstance(intent, Separated) else intent.per_node
            for split in _groups_of(classes, k + 1):
                units = tuple(_units(split))
                if key is None:
                    yield Mods(split=split, merge=[units], drop_intents=True)
                else:
                    yield Mods(split=split, domain_merge=[(key, units)], drop_intents=True)
        elif isinstance(intent, SpreadEvenly):
            yield from self._skews(names, key or EACH_NODE, intent.max_skew)
        elif isinstance(intent, PinnedTo):
            others = frozenset(
                n for n, x in self.state.nodes.items() if x.alive and n not in intent.nodes
            )
            for cls in classes:
                split = _take(cls, 1)
                yield Mods(split=split, only={_units(split)[0]: others}, drop_intents=True)

    def _outside(self, classes: list[list[PlannedTask]], key: str) -> Iterator[Mods]:
        alive = [n for _, n in sorted(self.state.nodes.items()) if n.alive]
        doms = domains_for(self.sub, alive, key)
        outside = frozenset(n.id for k, n in enumerate(alive) if k not in doms.of)
        if outside:
            for cls in classes:
                split = _take(cls, 1)
                yield Mods(split=split, only={_units(split)[0]: outside}, drop_intents=True)

    def _skews(self, names: list[str], key: str, skew: int) -> Iterator[Mods]:
        alive = [n for _, n in sorted(self.state.nodes.items()) if n.alive]
        doms = domains_for(self.sub, alive, key)
        for a, b in itertools.permutations(range(len(doms.names)), 2):
            yield Mods(excess=[(key, tuple(names), (a, b), skew + 1)], drop_intents=True)


def _canon(sub: Plan, intent: Intent, state_labels: frozenset[str]) -> Hashable:
    """A key equal for sub-plans that differ only in task names and ephemeral label names."""
    rename: dict[str, str] = {}
    ephemeral = {r.label for r in sub.resources} | {c.label for t in sub.tasks for c in t.creates}

    def lab(name: str) -> str:
        if name not in ephemeral:
            return name
        if name in state_labels:
            return name  # capacities already on nodes: the name matters
        return rename.setdefault(name, f"#{len(rename)}")

    tasks = tuple(
        (
            tuple(sorted((lab(r), q) for r, q in t.resources.items())),
            t.count,
            tuple((lab(c.label), c.capacity) for c in t.creates),
            t.concurrent,
            t.name in intent.tasks,
        )
        for t in sub.tasks
    )
    resources = tuple((lab(r.label), r.capacity, r.node_spec) for r in sub.resources)
    index = {t.name: i for i, t in enumerate(sub.tasks)}
    gangs = tuple(tuple(index[n] for n in g.tasks) for g in sub.intents)
    params = tuple(
        (k, v) for k, v in sorted(vars(intent).items()) if k not in ("tasks", "source", "weight")
    )
    return (
        type(intent).__name__,
        params,
        tuple(index[n] for n in intent.tasks if n in index),
        tasks,
        resources,
        gangs,
    )


class IntentProver:
    """Proves a plan's intents on one state, caching results by policy shape."""

    def __init__(
        self,
        plan: Plan,
        state: ClusterState,
        *,
        memory_mb: int | None = None,
        feasible: bool = False,
    ) -> None:
        """`feasible`: the whole plan is proven feasible on `state` (a checked witness).
        Every intent's sub-plan then has a placement too (the witness cut to its tasks), so
        no proof decides that again."""
        self.plan = plan
        self.state = state
        self.memory_mb = memory_mb
        self.feasible = feasible
        self.cache: dict[Hashable, tuple[IntentStatus, str, list[list[str]] | None]] = {}
        self.labels = frozenset(r for n in state.nodes.values() if n.alive for r in n.total)
        self._subs: dict[int, tuple[Plan, Hashable]] = {}
        self._facts = plan_facts(plan)
        self._takers = _takers(plan, self._facts.makers)

    def shape(self, index: int) -> Hashable:
        """The policy shape of the plan's `index`-th intent (equal shapes share one proof)."""
        intent = self.plan.intents[index]
        if index not in self._subs:
            sub = _subplan(self.plan, intent, self._facts, self._takers)
            self._subs[index] = (sub, _canon(sub, intent, self.labels))
        return self._subs[index][1]

    def known(self, index: int) -> bool:
        """True if a proof of the same shape is cached."""
        return self.shape(index) in self.cache

    def prove(self, index: int, *, deadline: float) -> IntentResult:
        """The result for the plan's `index`-th intent, deciding by `deadline`."""
        intent = self.plan.intents[index]
        key = self.shape(index)
        sub = self._subs[index][0]
        hit = self.cache.get(key)
        if hit is not None:
            return self._from_cache(intent, sub, hit)
        result = self._prove(intent, sub, deadline)
        if result.status is not IntentStatus.UNKNOWN:
            order = [t.name for t in sub.tasks]
            cex = (
                [list(result.counterexample.get(n, [])) for n in order]
                if result.counterexample
                else None
            )
            self.cache[key] = (result.status, result.detail, cex)
        return result

    def _from_cache(
        self, intent: Intent, sub: Plan, hit: tuple[IntentStatus, str, list[list[str]] | None]
    ) -> IntentResult:
        status, detail, cex = hit
        if cex is None:
            # a proof by the resource model names labels and tasks: worded for this intent's
            why = settled_by_creation(intent, sub, self.labels)
            if why is not None and status is IntentStatus.PROVEN:
                detail = why
            return IntentResult(
                intent, status, detail=detail + " (same policy shape as one proven before)"
            )
        placement = {t.name: nodes for t, nodes in zip(sub.tasks, cex, strict=True) if nodes}
        why = intent_violation(intent, placement, self.state, self.plan.topologies)
        return IntentResult(intent, status, placement, why or detail)

    def _prove(self, intent: Intent, sub: Plan, deadline: float) -> IntentResult:
        if isinstance(intent, Gang):
            return self._gang(intent, sub, deadline)
        why = settled_by_creation(intent, sub, self.labels)
        if why is not None:  # the resource model settles it: no scenario to decide
            return self._base(intent, sub, deadline, why)
        unknown = ""
        scenarios = list(itertools.islice(_Scenarios(sub, intent, self.state), SCENARIO_LIMIT + 1))
        if len(scenarios) > SCENARIO_LIMIT:
            return IntentResult(intent, IntentStatus.UNKNOWN, detail="too many cases to enumerate")
        for j, mods in enumerate(scenarios):
            left = deadline - time.monotonic()
            if left <= 0:
                return IntentResult(intent, IntentStatus.UNKNOWN, detail="timed out")
            until = time.monotonic() + left / (len(scenarios) - j)
            d = decide(
                sub,
                self.state,
                deadline=until,
                mods=mods,
                memory_mb=self.memory_mb,
                side_by_side=False,  # many short sub-decisions: cheaper in this process
            )
            if d.status == "feasible":
                assert d.placement is not None
                cex = to_witness(d.problem, d.placement)
                bad = check_placement(sub, self.state, cex, intents=False)
                why = intent_violation(intent, cex, self.state, self.plan.topologies)
                if not bad and why:
                    return IntentResult(intent, IntentStatus.VIOLATED, cex, why)
                unknown = "internal: a counterexample did not check"
            elif d.status == "unknown":
                unknown = "timed out" if d.reason == "time limit reached" else d.reason
        if unknown:
            return IntentResult(intent, IntentStatus.UNKNOWN, detail=unknown)
        return self._base(intent, sub, deadline)

    def _placeable(self, intent: Intent, sub: Plan, deadline: float) -> IntentResult | str:
        """VACUOUS if the resources allow no placement of the intent's tasks at all, else
        the status of deciding that ("feasible" or "unknown")."""
        if self.feasible:  # the plan's witness, cut to the sub-plan's tasks, places them
            return "feasible"
        base = decide(
            sub,
            self.state,
            deadline=deadline,
            mods=Mods(drop_intents=True),
            memory_mb=self.memory_mb,
            side_by_side=False,
        )
        if base.status == "infeasible":
            return IntentResult(
                intent,
                IntentStatus.VACUOUS,
                detail="the resources allow no placement of its tasks at all",
            )
        return base.status

    def _base(
        self,
        intent: Intent,
        sub: Plan,
        deadline: float,
        detail: str = "no placement the resources allow violates it",
    ) -> IntentResult:
        base = self._placeable(intent, sub, deadline)
        if isinstance(base, IntentResult):
            return base
        return IntentResult(intent, IntentStatus.PROVEN, detail=detail)

    def _gang(self, intent: Intent, sub: Plan, deadline: float) -> IntentResult:
        base = self._placeable(intent, sub, deadline)
        if isinstance(base, IntentResult):
            return base
        if base == "feasible":
            return IntentResult(
                intent,
                IntentStatus.PROVEN,
                detail=(
                    "the gang's members fit on the cluster together; all-or-nothing launch is "
                    "the backend's atomic gang launch"
                ),
            )
        return IntentResult(intent, IntentStatus.UNKNOWN, detail="timed out")


def preference_met(
    intent: Intent, witness: Mapping[str, list[str]], state: ClusterState, plan: Plan
) -> bool:
    """True if `witness` meets the preference `intent`."""
    return intent_violation(intent, witness, state, plan.topologies) is None
