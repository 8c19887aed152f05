"""`KindSearch`: the search for the cheapest repair built of one kind of change.

Find a repair (each implicated key alone at its largest change, its level then
binary-searched down; else every key at once, then each lowered in turn), minimise it
(drop each change whose removal keeps the plan feasible), then prove it cheapest by a
best-first search below its cost. docs/repairs.md describes the steps.
"""

from __future__ import annotations

import heapq
import itertools
import time
from dataclasses import dataclass

from escher.core.errors import ValidationError
from escher.verify._result import Verdict
from escher.verify._verify import Verifier
from escher.verify.repair._draft import Draft
from escher.verify.repair._kinds import Base, ChangeKind, Conflict, Key
from escher.verify.repair._model import Repair

#: Keys tried alone before all at once.
SINGLE_TRIES = 6

#: Rounds of "every key at once" (each adds the keys of the new conflict).
PROBE_ROUNDS = 4

#: Share of a kind's time for finding and minimising (the rest proves it cheapest).
FIND_SHARE = 0.6

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


class KindSearch:
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
