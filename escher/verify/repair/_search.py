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
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError, did_you_mean
from escher.core.plan import Plan
from escher.verify._result import Verdict, VerificationResult
from escher.verify._verify import Verifier
from escher.verify.repair._kind_search import KindSearch
from escher.verify.repair._kinds import KINDS, Base, ChangeKind, Conflict, Mixed
from escher.verify.repair._model import Repair, RepairSet

#: Default time budget in seconds for `find_repairs`.
DEFAULT_REPAIR_TIMEOUT = 30.0

ResultT = TypeVar("ResultT", bound=VerificationResult)

#: The kinds searched by default (a smaller request only for tasks marked adjustable).
DEFAULT_KINDS = ("replicas", "intent", "nodes", "node", "request")

#: The search stops min(WRAP_UP s, WRAP_SHARE x timeout) before its timeout: a verification
#: overruns its deadline a little, and the result is put together after it.
WRAP_UP = 0.5
WRAP_SHARE = 0.02


def _check(
    plan: object, state: object, timeout: object, kinds: Iterable[str], known: Mapping[str, Any]
) -> None:
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
    unknown = [k for k in kinds if k not in known]
    if unknown:
        raise ValidationError(f"unknown kind(s) of change {unknown}; choose from {sorted(known)}.")


def find_repairs(
    plan: Plan,
    state: ClusterState,
    result: VerificationResult | None = None,
    *,
    timeout: float = DEFAULT_REPAIR_TIMEOUT,
    kinds: Collection[str] = DEFAULT_KINDS,
    adjustable_requests: bool | Collection[str] = (),
    memory_limit_mb: int | None = None,
    extra_kinds: Sequence[ChangeKind] = (),
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
        extra_kinds: Kinds of change besides `KINDS` (a caller's own, e.g. the Kubernetes
            pre-flight's "node returned"); name them in `kinds` to search them.

    Returns:
        The repairs, cheapest first (at most one per kind), and notes saying per kind what
        was proven and what the time limit cut off. Empty for a plan that is not infeasible.

    Raises:
        ValidationError: a bad plan, state, timeout or kind.
    """
    kinds = tuple(kinds)
    registry: dict[str, ChangeKind] = {**KINDS, **{k.name: k for k in extra_kinds}}
    _check(plan, state, timeout, kinds, registry)
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
    usable = [k for k in registry if k in kinds]
    if adjustable is not None and not adjustable and "request" in usable:
        usable.remove("request")
        notes["request"] = "request: no task's request was marked adjustable"
    # Kinds the conflict gives nothing to change take no time: the others share it.
    todo = [k for k in usable if registry[k].keys(base, root)]
    notes.update(
        (k, f"{k}: no change of this kind touches the conflict") for k in usable if k not in todo
    )
    for i, name in enumerate(todo):
        left = deadline - time.monotonic()
        if left <= 0:
            notes[name] = f"{name}: not searched: no time was left (raise --timeout)"
            continue
        search = KindSearch(registry[name], base, root, memory_limit_mb)
        began = time.monotonic()
        repair, note = search.run(began + left / (len(todo) - i))
        notes[name] = f"{note} [{time.monotonic() - began:.2f} s, {search.calls} verifications]"
        if repair is not None:
            found.append(repair)
    left = deadline - time.monotonic()
    if not found and len(usable) > 1 and left > 0:  # no kind alone: changes of several
        search = KindSearch(Mixed(registry[k] for k in usable), base, root, memory_limit_mb)
        began = time.monotonic()
        repair, note = search.run(deadline)
        notes["mixed"] = f"{note} [{time.monotonic() - began:.2f} s, {search.calls} verifications]"
        if repair is not None:
            found.append(repair)
    order = {k: i for i, k in enumerate(registry)}
    found.sort(key=lambda r: (r.cost, order.get(r.kind, len(order))))
    ordered = [notes[k] for k in [*registry, "mixed"] if k in notes]
    return RepairSet(tuple(found), tuple(ordered), time.monotonic() - t0)


def with_repairs(result: ResultT, repairs: RepairSet) -> ResultT:
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
