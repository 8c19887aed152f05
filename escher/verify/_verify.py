"""`verify` and `Verifier`: the public entry points, in stages with one deadline.

Stages: the verdict (feasible with a checked witness / infeasible with a cause / unknown with
what was proven), then the explanation (minimised until the deadline), then the intent proofs
(one at a time, each with its share of what is left). `verify` runs them all; the CLI prints
each stage as it completes.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError, VerificationError
from escher.core.plan import Plan
from escher.verify._fallbacks import Choice, choose, has_fallbacks
from escher.verify._result import (
    Explanation,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
)
from escher.verify.check import to_witness, witness_problems
from escher.verify.engines import Decision, decide
from escher.verify.explain import IntentProver, minimise, preference_met
from escher.verify.model import Mods, Problem, plan_facts
from escher.verify.read import Grouping, as_written, load_grouped

#: Default time budget in seconds for one `verify` call.
DEFAULT_TIMEOUT = 60.0

#: Share of the time left after the verdict that explanation shrinking may use when intent
#: proofs follow (they get the rest).
EXPLAIN_SHARE = 0.5

#: When intent proofs follow, explanation shrinking stops after max(EXPLAIN_MIN,
#: EXPLAIN_FACTOR x the verdict's seconds) even before the deadline, saying the set is not
#: proven minimal: the cause line and the statements found are already the answer.
EXPLAIN_MIN = 2.0
EXPLAIN_FACTOR = 10.0

#: A plan file written one entry per task is explained in groups of alike entries first,
#: then, when that set is proven minimal, with the fewest entries of each group: that step
#: stops after max(ENTRIES_MIN, ENTRIES_SHARE x the seconds spent so far), so the file
#: costs about what it would grouped (the explanation is then marked not proven minimal).
ENTRIES_MIN = 0.25
ENTRIES_SHARE = 0.25

#: Share of the time left after the verdict for meeting more preferences (at most 2 s).
PREFER_SHARE = 0.1


def _check_arguments(plan: Any, state: Any, timeout: Any, memory_limit_mb: Any) -> None:
    if not isinstance(plan, Plan):
        raise ValidationError(f"verify() needs a Plan, got {type(plan).__name__}.")
    plan.check()
    if not isinstance(state, ClusterState):
        raise ValidationError(
            f"state must be a ClusterState (e.g. escher.get_cluster_state()), "
            f"got {type(state).__name__}."
        )
    bad_timeout = isinstance(timeout, bool) or not isinstance(timeout, int | float)
    if bad_timeout or not 0 < timeout < float("inf"):
        raise ValidationError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if memory_limit_mb is not None and (
        isinstance(memory_limit_mb, bool)
        or not isinstance(memory_limit_mb, int)
        or memory_limit_mb < 1
    ):
        raise ValidationError(
            f"memory_limit_mb must be a positive int or None, got {memory_limit_mb!r}."
        )


class Verifier:
    """One verification in stages: `verdict`, `explain`, `intents`, then `result`.

    Every stage stops at `deadline` (a `time.monotonic()` value) with what it proved.
    `Verifier.from_file` reads a plan file so that one written one entry per task costs
    what it would with replicas.

    Raises:
        ValidationError: a bad plan, state or option (from the constructor).
    """

    def __init__(
        self,
        plan: Plan,
        state: ClusterState,
        *,
        deadline: float,
        memory_limit_mb: int | None = None,
    ) -> None:
        self._setup(as_written(plan), state, deadline, memory_limit_mb)

    @classmethod
    def from_file(
        cls,
        path: str | Path,
        state: ClusterState,
        *,
        deadline: float,
        memory_limit_mb: int | None = None,
    ) -> Verifier:
        """A verification of the plan file at `path` (the format of `Plan.load`).

        Entries that differ only in name and source, that no intent names and that create
        nothing are decided as one task with the replicas of all; the witness and the
        explanation name the entries as written (docs/verify.md).

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
            ValidationError: a bad state or option.
        """
        return cls._grouped(load_grouped(path), state, deadline, memory_limit_mb)

    @classmethod
    def _grouped(
        cls, grouping: Grouping, state: ClusterState, deadline: float, memory_mb: int | None
    ) -> Verifier:
        run = cls.__new__(cls)
        run._setup(grouping, state, deadline, memory_mb)
        return run

    def _setup(
        self, grouping: Grouping, state: ClusterState, deadline: float, memory_mb: int | None
    ) -> None:
        self._grouping = grouping
        self._decided = grouping.plan  # what is decided: the plan as written, or its groups
        left = max(deadline - time.monotonic(), 1e-9)
        _check_arguments(self._decided, state, left, memory_mb)
        # A plan with fallback requests is decided as the candidate `choose` picks.
        self._choice: Choice | None = None
        if has_fallbacks(self._decided):
            self._choice = choose(self._decided, state, deadline=deadline, memory_mb=memory_mb)
            self._grouping = as_written(self._choice.plan)
            self._decided = self._choice.plan
        self.state = state
        self.deadline = deadline
        self.memory_mb = memory_mb
        self._decision: Decision | None = None
        self._result: VerificationResult | None = None
        self._intents: list[IntentResult] = []
        self._explained = False
        self._times: dict[str, float] = {}

    @property
    def plan(self) -> Plan:
        """The plan as written."""
        return self._grouping.written

    def verdict(self) -> VerificationResult:
        """Decide feasibility; an infeasible verdict comes with its cause, not yet minimised."""
        if self._result is not None:
            return self._result
        t0 = time.perf_counter()
        d = decide(self._decided, self.state, deadline=self.deadline, memory_mb=self.memory_mb)
        witness = None
        if d.status == "feasible":
            assert d.placement is not None
            witness = to_witness(d.problem, d.placement)
            problems = witness_problems(self._decided, self.state, witness)
            if problems:  # pragma: no cover - an encoder bug; never report an unchecked witness
                d = Decision("unknown", d.problem, reason="witness rejected: " + problems[0])
                witness = None
        self._decision = d
        self._times.update(d.times)
        self._times["verdict"] = time.perf_counter() - t0
        prefs: tuple[str, ...] = ()
        if witness is not None:
            t1 = time.perf_counter()
            witness, prefs = self._prefer(witness)
            self._times["preferences"] = time.perf_counter() - t1
            witness = self._grouping.deal(witness)
        status = {"feasible": Verdict.FEASIBLE, "infeasible": Verdict.INFEASIBLE}.get(
            d.status, Verdict.UNKNOWN
        )
        explanation = None
        if status is Verdict.INFEASIBLE:
            explanation = self._explanation(self._core(), False, "not minimised yet")
        self._result = VerificationResult(
            status=status,
            witness=witness,
            explanation=explanation,
            proven=tuple(_proven(d)),
            warnings=tuple(d.problem.warnings),
            stats=self._stats(d.problem, d.method),
            cause=d.cause,
            preferences=prefs,
            decide_by=(d.decide_by or "more time (--timeout)") if status is Verdict.UNKNOWN else "",
        )
        if self._choice is not None:
            self._result = _chosen(self._result, self._choice)
        return self._result

    def _prefer(
        self, witness: dict[str, list[str]]
    ) -> tuple[dict[str, list[str]], tuple[str, ...]]:
        """Meet as many preferences (by weight) as is cheap; report which the witness meets."""
        plan = self._decided
        prefs = sorted(
            (i for i, x in enumerate(plan.intents) if x.preferred),
            key=lambda i: -plan.intents[i].weight,
        )
        if not prefs:
            return witness, ()
        met = {i for i in prefs if preference_met(plan.intents[i], witness, self.state, plan)}
        left = max(0.0, self.deadline - time.monotonic())
        until = time.monotonic() + min(2.0, left * PREFER_SHARE)
        for i in prefs:
            if i in met or time.monotonic() >= until:
                continue
            want = frozenset(met | {i})
            d = decide(
                plan,
                self.state,
                deadline=until,
                mods=Mods(require=want),
                memory_mb=self.memory_mb,
                side_by_side=False,  # one short try per preference
            )
            if d.status == "feasible" and d.placement is not None:
                better = to_witness(d.problem, d.placement)
                if not witness_problems(plan, self.state, better):
                    witness = better
                    met = {
                        j
                        for j in prefs
                        if preference_met(plan.intents[j], witness, self.state, plan)
                    }
        lines = tuple(
            f"{plan.intents[i].describe()}: {'met' if i in met else 'not met'} by the witness"
            for i in prefs
        )
        return witness, lines

    def _core(self) -> frozenset[str]:
        """The decision's conflicting statements, as ids of the plan as written."""
        assert self._decision is not None
        return self._grouping.written_sids(self._decision.core)

    def _explanation(self, core: frozenset[str], minimal: bool, note: str) -> Explanation:
        assert self._decision is not None
        decided = self._decision.problem.statements
        # An entry of a group is worded as written (its group's task stands for several).
        words = [self._grouping.statement(sid) or decided[sid] for sid in core]
        stmts = tuple(sorted(words, key=lambda s: (s.kind != "task", s.kind, s.id)))
        text = f"found by: {self._decision.method}"
        if note:
            text += f" ({note})"
        return Explanation(stmts, minimal, text)

    def explain(self, share: float = 1.0, *, capped: bool = False) -> VerificationResult:
        """Shrink an infeasible verdict's statements to a minimal set, within `share` of the
        time left (and, when `capped`, within max(EXPLAIN_MIN, EXPLAIN_FACTOR x the verdict's
        time): intent proofs follow). Stops at that limit saying the set is not proven
        minimal."""
        result = self.verdict()
        if self._explained or result.status is not Verdict.INFEASIBLE:
            self._explained = True
            return result
        self._explained = True
        assert self._decision is not None
        t0 = time.perf_counter()
        left = max(0.0, self.deadline - time.monotonic())
        cap = max(EXPLAIN_MIN, EXPLAIN_FACTOR * self._times.get("verdict", 0.0))
        until = time.monotonic() + (min(left * share, cap) if capped else left * share)
        # Shrunk in the terms decided, then (a plan file read in groups) to the fewest
        # entries of each group, which costs at most max(ENTRIES_MIN, ENTRIES_SHARE x spent).
        decided, minimal = minimise(
            self._decided, self.state, self._decision.core, deadline=until, memory_mb=self.memory_mb
        )
        if minimal:
            spent = time.perf_counter() - t0 + self._times.get("verdict", 0.0)
            last = min(until, time.monotonic() + max(ENTRIES_MIN, ENTRIES_SHARE * spent))
            core, minimal = self._grouping.fewest_entries(
                self.state, decided, deadline=last, memory_mb=self.memory_mb
            )
        else:  # a set not proven minimal is not refined: every entry of its groups
            core = self._grouping.written_sids(decided)
        self._times["explain"] = time.perf_counter() - t0
        note = "" if minimal else "not proven minimal: shrinking stopped at its time limit"
        self._result = _replace(
            result,
            explanation=self._explanation(core, minimal, note),
            stats=self._stats(self._decision.problem, self._decision.method),
        )
        return self._result

    def intents(self) -> Iterator[IntentResult]:
        """Prove the declared intents one by one. Intents of one policy shape share a proof;
        each shape not proven yet gets its share of the time left."""
        self.verdict()
        assert self._decision is not None
        prover = IntentProver(
            self._decided,
            self.state,
            memory_mb=self.memory_mb,
            feasible=self._decision.status == "feasible",
        )
        pending = [i for i, x in enumerate(self._decided.intents) if not x.preferred]
        t0 = time.perf_counter()
        shapes: dict[int, Any] = {}
        for i in pending:  # sub-plans and their shapes cost time too: only while there is some
            if time.monotonic() >= self.deadline:
                break
            shapes[i] = prover.shape(i)
        # pending intents per shape not proven yet: each such shape gets a share of the time
        # (kept as counts: recounting the shapes per intent was quadratic in the intents)
        waiting: dict[Any, int] = {}
        for i in pending:
            if i in shapes:
                waiting[shapes[i]] = waiting.get(shapes[i], 0) + 1
        pending.reverse()  # popped from the end, in the plan's order
        while pending:
            index = pending.pop()
            left = self.deadline - time.monotonic()
            if left <= 0 or index not in shapes:
                r = IntentResult(
                    self._decided.intents[index],
                    IntentStatus.UNKNOWN,
                    detail="timed out: no time was left for this proof (raise --timeout)",
                )
            else:
                todo = sum(1 for k in waiting if k not in prover.cache)
                until = time.monotonic() + left / max(1, todo)
                r = prover.prove(index, deadline=until)
            if index in shapes:
                key = shapes[index]
                waiting[key] -= 1
                if not waiting[key]:
                    del waiting[key]
            self._intents.append(r)
            yield r
        self._times["intents"] = time.perf_counter() - t0

    def result(self) -> VerificationResult:
        """Everything established so far, as one `VerificationResult`."""
        result = self.verdict()
        assert self._decision is not None
        return _replace(
            result,
            intents=tuple(self._intents),
            stats=self._stats(self._decision.problem, self._decision.method),
        )

    def _stats(self, p: Problem, method: str) -> dict[str, Any]:
        times = dict(self._times)
        times["total"] = sum(times.get(k, 0.0) for k in ("verdict", "explain", "intents"))
        return {
            "method": method,
            "nodes": len(p.node_ids),
            "node_types": len(p.types),
            "replicas": sum(n for _, n, _ in plan_facts(self._decided).class_units()),
            "items": len(p.items),
            "seconds": {k: round(v, 4) for k, v in times.items()},
        }


def _chosen(result: VerificationResult, choice: Choice) -> VerificationResult:
    """The verdict on a plan with fallbacks, from the verdict on its chosen candidate."""
    warnings = (*choice.warnings, *result.warnings)
    if result.witness is not None:
        return _replace(
            result,
            witness=choice.witness(result.witness),
            preferences=(*choice.preferences, *result.preferences),
            warnings=warnings,
        )
    if result.status is Verdict.INFEASIBLE and choice.undecided:
        return _replace(
            result,
            status=Verdict.UNKNOWN,
            explanation=None,
            decide_by=choice.undecided,
            warnings=warnings,
        )
    return _replace(result, warnings=warnings)


def _replace(result: VerificationResult, **changes: Any) -> VerificationResult:
    from dataclasses import replace

    return replace(result, **changes)


def _proven(d: Decision) -> list[str]:
    if d.status == "infeasible":
        return ["no placement satisfies all the statements listed in the explanation"]
    if d.status == "feasible":
        return []
    out = list(d.proven) or [
        "no exact pre-check (co-location vs separation, per-resource totals, largest free "
        "slot, packing bounds) found a conflict"
    ]
    if d.reason:
        out.append(f"stopped: {d.reason}")
    return out


def verify(
    plan: Plan,
    state: ClusterState,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit_mb: int | None = None,
    check_intents: bool = True,
    refuse: bool = False,
) -> VerificationResult:
    """Prove `plan` feasible on `state`, or explain why not, and try to prove its intents.

    Args:
        plan: The tasks, planned resources and intents.
        state: A cluster snapshot (e.g. ``escher.get_cluster_state()``, or
            `ClusterState.load` of a cluster file). Tasks use what nodes have *available* now.
        timeout: Seconds for the whole call (verdict, explanation, intent proofs). On the
            limit the verdict is UNKNOWN with what was proven so far, an explanation is
            marked not minimal, and unfinished intents are UNKNOWN.
        memory_limit_mb: Z3's memory limit (global to the process's Z3), None for Z3's own.
        check_intents: Also prove each declared intent (after the verdict).
        refuse: Raise `VerificationError` unless the plan is proven feasible.

    Returns:
        A `VerificationResult`.

    Raises:
        ValidationError: a bad argument or a plan that cannot be verified (with the reason).
        VerificationError: `refuse=True` and the verdict is not FEASIBLE (its `result`
            attribute holds the `VerificationResult`).
    """
    _check_arguments(plan, state, timeout, memory_limit_mb)
    run = Verifier(
        plan, state, deadline=time.monotonic() + float(timeout), memory_limit_mb=memory_limit_mb
    )
    run.verdict()
    proofs = check_intents and any(not i.preferred for i in plan.intents)
    run.explain(EXPLAIN_SHARE if proofs else 1.0, capped=proofs)
    if check_intents:
        for _ in run.intents():
            pass
    result = run.result()
    if refuse and not result.feasible:
        msg = f"refusing to launch: the plan is {result.status.value}."
        if result.cause:
            msg += f"\ncause: {result.cause}"
        if result.explanation is not None:
            msg += "\n" + result.explanation.render()
        raise VerificationError(msg, result)
    return result


def ensure_feasible(plan: Plan, state: ClusterState, **options: Any) -> VerificationResult:
    """`verify(..., refuse=True)`: the result if proven feasible, else `VerificationError`."""
    return verify(plan, state, refuse=True, **options)
