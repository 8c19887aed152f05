"""`find_repairs`: the cheapest changes of each kind that make an infeasible plan feasible.

Per kind of change, within its share of the time budget:

1. *Find* a repair: each key the conflict implicates alone at its highest level; the first
   that is feasible has its level binary-searched down. If none alone does it, every key at
   once (keys the new conflicts implicate join, a few rounds), then each key's level
   binary-searched down in turn.
2. *Minimise* it: remove each change in turn and re-verify; a change whose removal keeps
   the plan feasible goes.
3. *Prove* it cheapest: a best-first search (cheapest first) from the plan as it is; a state
   that is infeasible branches into one more level of each key *its* conflict implicates
   (any repair must change a statement of every conflict), only below the cost of the
   repair in hand. The first feasible state is the cheapest repair of the kind; an empty
   queue proves the one in hand cheapest. The time budget can cut this step off: the notes
   say so.

Every state is decided by the verifier (`Verifier.verdict`): a repair's witness is the one
the verifier returned for the changed plan, accepted by its independent checker.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError, did_you_mean
from escher.core.plan import Plan
from escher.verify._result import Verdict, VerificationResult
from escher.verify._verify import Verifier
from escher.verify.repair._draft import Draft
from escher.verify.repair._kinds import KINDS, Base, ChangeKind, Conflict, Key, Mixed
from escher.verify.repair._model import Repair, RepairSet

#: Default time budget in seconds for `find_repairs`.
DEFAULT_REPAIR_TIMEOUT = 30.0

#: The kinds searched by default (a smaller request only for tasks marked adjustable).
DEFAULT_KINDS = ("replicas", "intent", "nodes", "node", "request")

#: Keys tried alone before all at once.
SINGLE_TRIES = 6

#: Rounds of "every key at once" (each adds the keys of the new conflict).
PROBE_ROUNDS = 4

#: Share of a kind's time for finding and minimising (the rest proves it cheapest).
FIND_SHARE = 0.6

#: The search stops min(WRAP_UP s, WRAP_SHARE x timeout) before its timeout: a verification
#: overruns its deadline a little, and the result is put together after it.
WRAP_UP = 0.5
WRAP_SHARE = 0.02

#: Proving a repair cheapest stops after max(PROVE_MIN, PROVE_FACTOR x the seconds finding
#: and minimising it took), within the kind's share: a search that does not end soon rarely
#: ends at all (the notes then say the repair is not proven cheapest).
PROVE_MIN = 2.0
PROVE_FACTOR = 20.0

State = frozenset[tuple[Key, int]]


@dataclass(frozen=True)
class _Outcome:
    status: Verdict
    witness: dict[str, list[str]] | None
    conflict: Conflict | None


class _KindSearch:
    """The search for one kind of change."""

    def __init__(self, kind: ChangeKind, base: Base, root: Conflict, memory_mb: int | None):
        self.kind = kind
        self.base = base
        self.root = root
        self.memory_mb = memory_mb
        self.seen: dict[State, _Outcome] = {}
        self.calls = 0
        self.exhausted = False  # set when the largest changes of every key were infeasible

    # -- deciding one state -------------------------------------------------------------
    def decide(self, state: State, deadline: float) -> _Outcome:
        if state in self.seen:
            return self.seen[state]
        if not state:
            return _Outcome(Verdict.INFEASIBLE, None, self.root)
        draft = Draft(self.base.plan, self.base.state)
        for key, level in sorted(state, key=repr):
            self.kind.change(self.base, key, level).edit(draft)
        plan, cluster, origins = draft.build()
        self.calls += 1
        try:
            result = Verifier(plan, cluster, deadline=deadline, memory_limit_mb=self.memory_mb)
            verdict = result.verdict()
        except ValidationError:  # a change the plan model refuses: not a repair
            out = _Outcome(Verdict.UNKNOWN, None, None)
        else:
            conflict = None
            if verdict.explanation is not None:
                conflict = Conflict(verdict.explanation.ids, tuple(origins))
            witness = {k: list(v) for k, v in verdict.witness.items()} if verdict.witness else None
            out = _Outcome(verdict.status, witness, conflict)
        if out.status is not Verdict.UNKNOWN:  # an unknown may be decided with more time
            self.seen[state] = out
        return out

    def feasible(self, state: State, deadline: float) -> bool:
        return self.decide(state, deadline).status is Verdict.FEASIBLE

    def cost(self, state: State) -> float:
        return sum(self.kind.cost(self.base, k, v) for k, v in state)

    # -- 1. find ------------------------------------------------------------------------
    def lowest(self, state: State, key: Key, high: int, deadline: float) -> State:
        """`state` with `key` at the lowest level that keeps it feasible (binary search;
        `state` with `key` at `high` is feasible)."""
        rest = frozenset(kv for kv in state if kv[0] != key)
        low = 0  # infeasible at `low` (or unknown), feasible at `high`
        while high - low > 1 and time.monotonic() < deadline:
            mid = (low + high) // 2
            if self.feasible(_with(rest, key, mid), deadline):
                high = mid
            else:
                low = mid
        if low == 0 and high == 1 and self.feasible(rest, deadline):
            high = 0
        return _with(rest, key, high)

    def find(self, deadline: float) -> State | None:
        keys = self.kind.keys(self.base, self.root)
        for key in keys[:SINGLE_TRIES]:
            if time.monotonic() >= deadline:
                return None
            top = self.kind.top(self.base, key)
            if top and self.feasible(_with(frozenset(), key, top), deadline):
                return self.lowest(frozenset(), key, top, deadline)
        return self.probe(keys, deadline)

    def probe(self, keys: list[Key], deadline: float) -> State | None:
        """Every key at its top at once (keys of one repair must be compatible: one probe
        per group of compatible keys), then each key's level lowered in turn."""
        tried: set[Key] = set()
        for first in keys:
            if first in tried:
                continue
            state = _with(frozenset(), first, self.kind.top(self.base, first))
            for _ in range(PROBE_ROUNDS):
                state = self._widen(state, keys)
                tried.update(k for k, _ in state)
                if time.monotonic() >= deadline:
                    return None
                out = self.decide(state, deadline)
                if out.status is Verdict.FEASIBLE:
                    return self.descend(state, deadline)
                if out.conflict is None:
                    return None  # undecided: not a proof that none exists
                more = [k for k in self.kind.keys(self.base, out.conflict) if k not in keys]
                if not more:
                    break
                keys = keys + more
            else:
                return None  # rounds used up: not a proof either
        self.exhausted = True  # every group at its largest stays infeasible
        return None

    def _widen(self, state: State, keys: list[Key]) -> State:
        for key in keys:
            held = [k for k, _ in state]
            if key not in held and self.kind.compatible(held, key):
                top = self.kind.top(self.base, key)
                if top:
                    state = state | {(key, top)}
        return state

    def descend(self, state: State, deadline: float) -> State | None:
        """Each key's level lowered in turn, the costliest first (so that what stays is
        cheap), keeping the plan feasible."""
        ordered = sorted(state, key=lambda kv: (-self.kind.cost(self.base, *kv), repr(kv)))
        for key, _ in ordered:
            if time.monotonic() >= deadline:
                return None
            state = self.lowest(state, key, dict(state)[key], deadline)
        return state

    # -- 2. minimise --------------------------------------------------------------------
    def minimise(self, state: State, deadline: float) -> tuple[State, bool]:
        """Drop changes whose removal keeps the plan feasible, until a whole pass drops
        none; True if that pass found every remaining change needed."""
        while len(state) > 1:
            needed = 0
            for kv in sorted(state, key=repr):
                if time.monotonic() >= deadline:
                    return state, False
                out = self.decide(state - {kv}, deadline)
                if out.status is Verdict.FEASIBLE:
                    state = state - {kv}
                    break
                needed += out.status is Verdict.INFEASIBLE
            else:
                return state, needed == len(state)
        return state, True  # one change: without it, the plan as it was (infeasible)

    # -- 3. prove cheapest --------------------------------------------------------------
    def cheapest(self, bound: float | None, deadline: float) -> tuple[State | None, bool]:
        """Best-first from the empty state below `bound`. Returns (a cheaper repair or
        None, True if the search finished: nothing cheaper than `bound` exists)."""
        tie = itertools.count()
        queue: list[tuple[float, int, State]] = [(0.0, next(tie), frozenset())]
        pushed: set[State] = {frozenset()}
        while queue:
            if time.monotonic() >= deadline:
                return None, False
            _, _, state = heapq.heappop(queue)
            out = self.decide(state, deadline)
            if out.status is Verdict.FEASIBLE:
                return state, True
            if out.conflict is None:
                return None, False  # undecided: the search cannot tell what to change
            levels = dict(state)
            for key in self.kind.keys(self.base, out.conflict):
                level = levels.get(key, 0) + 1
                if level > self.kind.top(self.base, key):
                    continue
                if key not in levels and not self.kind.compatible(levels, key):
                    continue
                child = _with(state, key, level)
                c = self.cost(child)
                if child in pushed or (bound is not None and c >= bound - 1e-9):
                    continue
                pushed.add(child)
                heapq.heappush(queue, (c, next(tie), child))
        return None, True

    # -- the whole ----------------------------------------------------------------------
    def run(self, deadline: float) -> tuple[Repair | None, str]:
        name = self.kind.name
        if not self.kind.keys(self.base, self.root):
            return None, f"{name}: no change of this kind touches the conflict"
        start = time.monotonic()
        until = start + FIND_SHARE * max(0.0, deadline - start)
        found = self.find(until)
        minimal = False
        if found is not None:
            found, minimal = self.minimise(found, until)
        if found is None and self.exhausted:
            return None, (
                f"{name}: none: even the largest change of every key the conflicts "
                "implicate leaves the plan infeasible"
            )
        bound = self.cost(found) if found is not None else None
        spent = time.monotonic() - start
        better, finished = self.cheapest(
            bound, min(deadline, time.monotonic() + max(PROVE_MIN, PROVE_FACTOR * spent))
        )
        if better is not None:
            found, minimal = better, True  # the cheapest: no change of it can go
        if found is None:
            if finished:
                return None, f"{name}: proven: no repair of this kind exists (within its bounds)"
            return None, f"{name}: none found before the time limit (raise --timeout)"
        repair = self.repair(found, minimal, finished)
        if finished:
            note = f"{name}: proven cheapest of its kind (cost {repair.cost:g})"
        else:
            note = (
                f"{name}: cost {repair.cost:g} found, not proven cheapest "
                "(the search for a cheaper one was cut off; a longer --timeout may prove it)"
            )
        return repair, note

    def repair(self, state: State, minimal: bool, cheapest: bool) -> Repair:
        out = self.seen[state]
        assert out.witness is not None
        changes = tuple(self.kind.change(self.base, k, v) for k, v in sorted(state, key=repr))
        return Repair(changes, out.witness, round(self.cost(state), 9), minimal, cheapest)


def _with(state: State, key: Key, level: int) -> State:
    rest = frozenset(kv for kv in state if kv[0] != key)
    return rest | {(key, level)} if level else rest


def _check(plan: object, state: object, timeout: object, kinds: Iterable[str]) -> None:
    if not isinstance(plan, Plan):
        raise ValidationError(f"find_repairs() needs a Plan, got {type(plan).__name__}.")
    if not isinstance(state, ClusterState):
        raise ValidationError(
            f"state must be a ClusterState (e.g. escher.get_cluster_state()), "
            f"got {type(state).__name__}."
        )
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < float("inf")
    ):
        raise ValidationError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ValidationError(f"unknown kind(s) of change {unknown}; choose from {sorted(KINDS)}.")


def find_repairs(
    plan: Plan,
    state: ClusterState,
    result: VerificationResult | None = None,
    *,
    timeout: float = DEFAULT_REPAIR_TIMEOUT,
    kinds: Collection[str] = DEFAULT_KINDS,
    adjustable_requests: bool | Collection[str] = (),
    memory_limit_mb: int | None = None,
) -> RepairSet:
    """The cheapest repair of each kind of change for an infeasible plan.

    Args:
        plan: The plan (infeasible on `state`).
        state: The cluster.
        result: `verify(plan, state)`'s result, if at hand (its explanation is the start).
        timeout: Seconds for the whole search, shared by the kinds.
        kinds: Which kinds of change (`KINDS`): ``replicas``, ``intent``, ``nodes``,
            ``node``, ``request``.
        adjustable_requests: Tasks whose requests may shrink (True: every task); a
            ``request`` repair only changes these.
        memory_limit_mb: Passed to the verifier.

    Returns:
        The repairs, cheapest first (at most one per kind), and notes saying per kind what
        was proven and what the time limit cut off. Empty for a plan that is not infeasible.

    Raises:
        ValidationError: a bad plan, state, timeout or kind.
    """
    kinds = tuple(kinds)
    _check(plan, state, timeout, kinds)
    t0 = time.monotonic()
    # A verification overruns its deadline a little: keep a margin for it and the result.
    deadline = t0 + float(timeout) - min(WRAP_UP, WRAP_SHARE * float(timeout))
    if result is None:
        result = Verifier(plan, state, deadline=deadline, memory_limit_mb=memory_limit_mb).explain()
    if result.status is not Verdict.INFEASIBLE or result.explanation is None:
        note = f"nothing to repair: the plan is {result.status.value}"
        return RepairSet((), (note,), time.monotonic() - t0)
    if adjustable_requests is True:
        adjustable: frozenset[str] | None = None
    else:
        adjustable = frozenset(adjustable_requests or ())
    if adjustable:
        names = {t.name for t in plan.tasks}
        unknown = sorted(adjustable - names)
        if unknown:
            raise ValidationError(
                f"adjustable_requests names no task of the plan: {unknown}."
                f"{did_you_mean(unknown[0], names)}"
            )
    base = Base(plan, state, adjustable)
    root = Conflict(result.explanation.ids, tuple(range(len(plan.intents))))
    found: list[Repair] = []
    notes: dict[str, str] = {}
    usable = [k for k in KINDS if k in kinds]
    if adjustable is not None and not adjustable and "request" in usable:
        usable.remove("request")
        notes["request"] = "request: no task's request was marked adjustable"
    # Kinds the conflict gives nothing to change take no time: the others share it.
    todo = [k for k in usable if KINDS[k].keys(base, root)]
    notes.update(
        (k, f"{k}: no change of this kind touches the conflict") for k in usable if k not in todo
    )
    for i, name in enumerate(todo):
        left = deadline - time.monotonic()
        if left <= 0:
            notes[name] = f"{name}: not searched: no time was left (raise --timeout)"
            continue
        search = _KindSearch(KINDS[name], base, root, memory_limit_mb)
        began = time.monotonic()
        repair, note = search.run(began + left / (len(todo) - i))
        notes[name] = f"{note} [{time.monotonic() - began:.2f} s, {search.calls} verifications]"
        if repair is not None:
            found.append(repair)
    left = deadline - time.monotonic()
    if not found and len(usable) > 1 and left > 0:  # no kind alone: changes of several
        search = _KindSearch(Mixed(usable), base, root, memory_limit_mb)
        began = time.monotonic()
        repair, note = search.run(deadline)
        notes["mixed"] = f"{note} [{time.monotonic() - began:.2f} s, {search.calls} verifications]"
        if repair is not None:
            found.append(repair)
    order = {k: i for i, k in enumerate(KINDS)}
    found.sort(key=lambda r: (r.cost, order.get(r.kind, len(order))))
    ordered = [notes[k] for k in [*KINDS, "mixed"] if k in notes]
    return RepairSet(tuple(found), tuple(ordered), time.monotonic() - t0)


def with_repairs(result: VerificationResult, repairs: RepairSet) -> VerificationResult:
    """`result` carrying `repairs` (as `VerificationResult.repairs` and `repair_notes`)."""
    return dataclasses.replace(result, repairs=repairs.repairs, repair_notes=repairs.notes)


def find_task_repairs(
    name: str,
    request: Mapping[str, float],
    state: ClusterState,
    *,
    timeout: float = DEFAULT_REPAIR_TIMEOUT,
    adjustable: bool = False,
) -> RepairSet:
    """The repairs for one task requesting `request` that cannot start on `state` (what
    `escher why --repairs` shows for a blocked task): more nodes, a grown node, and with
    `adjustable` a smaller request.

    Raises:
        ValidationError: a bad request, state or timeout.
    """
    plan = Plan()
    plan.add_task(name, request, source=f"task {name!r}")
    kinds = ("nodes", "node", "request") if adjustable else ("nodes", "node")
    return find_repairs(plan, state, timeout=timeout, kinds=kinds, adjustable_requests=adjustable)
