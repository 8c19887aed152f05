"""`verify`: the public entry point."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError, VerificationError
from escher.core.plan import Gang, Plan
from escher.verify._check import check_placement, intent_violation
from escher.verify._engine import Decision, decide, intent_scenarios, minimise
from escher.verify._model import Problem
from escher.verify._result import (
    Explanation,
    IntentResult,
    IntentStatus,
    Verdict,
    VerificationResult,
)

#: Default solver budget in seconds for one `verify` call.
DEFAULT_TIMEOUT = 60.0


def _to_witness(p: Problem, placement: list[list[int]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for it, spots in zip(p.items, placement, strict=True):
        for n in spots:
            for task, reps in it.members:
                out[task].extend([p.node_ids[n]] * reps)
    return {k: sorted(v) for k, v in sorted(out.items())}


def verify(
    plan: Plan,
    state: ClusterState | None = None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit_mb: int | None = None,
    check_intents: bool = True,
    refuse: bool = False,
) -> VerificationResult:
    """Prove `plan` feasible on `state`, or explain why not, and try to prove its intents.

    Args:
        plan: The tasks, planned resources and intents.
        state: A cluster snapshot; None takes `escher.get_cluster_state()` of the active
            backend. Tasks use what nodes have *available* now.
        timeout: Seconds for the whole call (model building, search, every Z3 call).
            On the limit the verdict is UNKNOWN with what was proven so far.
        memory_limit_mb: Z3's memory limit (global to the process's Z3), None for Z3's own.
        check_intents: Also ask, for each declared intent, for a resource-feasible placement
            that violates it.
        refuse: Raise `VerificationError` unless the plan is proven feasible.

    Returns:
        A `VerificationResult`.

    Raises:
        ValidationError: a bad argument or a plan that cannot be verified (with the reason).
        VerificationError: `refuse=True` and the verdict is not FEASIBLE (its `result`
            attribute holds the `VerificationResult`).
    """
    if not isinstance(plan, Plan):
        raise ValidationError(f"verify() needs a Plan, got {type(plan).__name__}.")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise ValidationError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    if memory_limit_mb is not None and (
        isinstance(memory_limit_mb, bool)
        or not isinstance(memory_limit_mb, int)
        or memory_limit_mb < 1
    ):
        raise ValidationError(
            f"memory_limit_mb must be a positive int or None, got {memory_limit_mb!r}."
        )
    if state is None:
        from escher._api import get_cluster_state

        state = get_cluster_state()
    if not isinstance(state, ClusterState):
        raise ValidationError(f"state must be a ClusterState, got {type(state).__name__}.")

    start = time.monotonic()
    deadline = start + float(timeout)
    result = _verify(plan, state, deadline, memory_limit_mb, check_intents)
    if refuse and not result.feasible:
        msg = f"refusing to launch: the plan is {result.status.value}."
        if result.explanation is not None:
            msg += "\n" + result.explanation.render()
        raise VerificationError(msg, result)
    return result


def ensure_feasible(
    plan: Plan, state: ClusterState | None = None, **options: Any
) -> VerificationResult:
    """`verify(..., refuse=True)`: the result if proven feasible, else `VerificationError`."""
    return verify(plan, state, refuse=True, **options)


def _verify(
    plan: Plan,
    state: ClusterState,
    deadline: float,
    memory_mb: int | None,
    check_intents: bool,
) -> VerificationResult:
    t0 = time.perf_counter()
    d = decide(plan, state, deadline=deadline, memory_mb=memory_mb)
    p = d.problem
    stats: dict[str, Any] = {
        "method": d.method,
        "nodes": len(p.node_ids),
        "node_types": len(p.types),
        "replicas": sum(t.count for t in plan.tasks),
        "items": len(p.items),
        "seconds": {k: round(v, 4) for k, v in d.times.items()},
    }
    proven: list[str] = []
    witness = None
    explanation = None
    if d.status == "feasible":
        assert d.placement is not None
        witness = _to_witness(p, d.placement)
        problems = check_placement(plan, state, witness)
        if problems:  # pragma: no cover - an encoder bug; never report an unchecked witness
            d = Decision("unknown", p, reason="witness rejected: " + "; ".join(problems[:3]))
            witness = None
        else:
            status = Verdict.FEASIBLE
    if d.status == "infeasible":
        status = Verdict.INFEASIBLE
        t1 = time.perf_counter()
        core, minimal = minimise(plan, state, d.core, deadline=deadline, memory_mb=memory_mb)
        stats["seconds"]["minimise"] = round(time.perf_counter() - t1, 4)
        stmts = tuple(
            sorted((p.statements[s] for s in core), key=lambda s: (s.kind != "task", s.kind, s.id))
        )
        note = f"found by: {d.method}"
        if not minimal:
            note += " (minimality not established within the limits)"
        explanation = Explanation(stmts, minimal, note)
        proven.append("no placement satisfies all the statements listed in the explanation")
    if d.status == "unknown":
        status = Verdict.UNKNOWN
        proven.append(
            "no exact pre-check (colocation vs separation, per-resource totals, "
            "largest free slot) found a conflict"
        )
        if d.reason:
            proven.append(f"stopped: {d.reason}")

    intents: list[IntentResult] = []
    if check_intents:
        for i in range(len(plan.intents)):
            intents.append(_check_intent(plan, state, i, deadline, memory_mb))
    stats["seconds"]["total"] = round(time.perf_counter() - t0, 4)
    return VerificationResult(
        status=status,
        witness=witness,
        explanation=explanation,
        intents=tuple(intents),
        proven=tuple(proven),
        warnings=tuple(p.warnings),
        stats=stats,
    )


def _check_intent(
    plan: Plan, state: ClusterState, index: int, deadline: float, memory_mb: int | None
) -> IntentResult:
    intent = plan.intents[index]
    node_ids = sorted(n for n, node in state.nodes.items() if node.alive)
    # Placements the resources allow (gangs stay: they are about fitting together).
    base = decide(
        plan, state, deadline=deadline, memory_mb=memory_mb, active=_without_intents(plan, state)
    )
    if base.status == "infeasible":
        return IntentResult(
            intent,
            IntentStatus.VACUOUS,
            detail="the resources allow no placement of the plan at all",
        )
    if isinstance(intent, Gang):
        if base.status == "feasible":
            return IntentResult(
                intent,
                IntentStatus.PROVEN,
                detail=(
                    "the gang's members fit on the cluster together; all-or-nothing launch is "
                    "the backend's atomic gang launch"
                ),
            )
        return IntentResult(intent, IntentStatus.UNKNOWN, detail=base.reason)
    try:
        scenarios = intent_scenarios(plan, intent, node_ids)
        if scenarios is None:
            return IntentResult(intent, IntentStatus.UNKNOWN, detail="no checker for this kind")
        unknown = ""
        for mods in scenarios:
            if time.monotonic() > deadline:
                return IntentResult(intent, IntentStatus.UNKNOWN, detail="time limit reached")
            d = decide(plan, state, deadline=deadline, mods=mods, memory_mb=memory_mb)
            if d.status == "feasible":
                assert d.placement is not None
                cex = _to_witness(d.problem, d.placement)
                bad = check_placement(plan, state, cex, intents=False)
                why = intent_violation(intent, cex, state)
                if not bad and why:
                    return IntentResult(intent, IntentStatus.VIOLATED, cex, why)
                unknown = "internal: a counterexample did not check"
            elif d.status == "unknown":
                unknown = d.reason or "limit reached"
    except OverflowError:
        return IntentResult(intent, IntentStatus.UNKNOWN, detail="too many cases to enumerate")
    if unknown:
        return IntentResult(intent, IntentStatus.UNKNOWN, detail=unknown)
    return IntentResult(
        intent, IntentStatus.PROVEN, detail="no placement the resources allow violates it"
    )


def _without_intents(plan: Plan, state: ClusterState) -> frozenset[str]:
    from escher.verify._model import build

    ids = build(plan, state).statements
    return frozenset(
        s for s in ids if not s.startswith("intent:") or isinstance(plan.intents[int(s[7:])], Gang)
    )
