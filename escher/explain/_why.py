"""`why`: explain a pending task from a backend's live state, through the neutral API only.

What it reads: `Backend.get_cluster_state()` (nodes, totals, what is available, ephemeral
labels), the task's request, `Backend.policies()` and each policy's `contribution` (which
labels of the request it owns, what they stand for, which it creates later),
`Backend.tasks()` (the queue ahead of the task), `Backend.gang_of` and
`Backend.describe_task` (the cluster's own words). It imports no backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from escher.backends.base import Backend, PendingTask
from escher.core.cluster import ClusterState
from escher.core.context import current_backend
from escher.core.errors import EscherError, ValidationError, did_you_mean
from escher.core.resources import Resources, unknown_resource_hint
from escher.core.task import StatusCode, TaskRef, TaskState
from escher.core.verdict import Verdict
from escher.esl import Contribution, LabelNote
from escher.explain._analysis import Analysis, analyse
from escher.explain._result import YOUR_REQUEST, Conflict, WaitReason, WhyResult

_KINDS = {"quota": "quota", "group": "group", "sig": "signal", "bar": "signal"}


@dataclass
class _Subject:
    """A task to explain: our own handle, or another session's pending task."""

    id: str
    name: str
    request: Resources
    ref: TaskRef | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def view(self) -> dict[str, Any]:
        ref = self.ref
        return {
            "id": self.id,
            "name": self.name,
            "request": self.request.to_dict(),
            "state": ref.state.value if ref is not None else "pending",
            "status": str(ref.status) if ref is not None else "",
            "node": ref.node_id if ref is not None else None,
        }


def _unwrap(handle: TaskRef) -> TaskRef:
    """A soft task's current attempt (`FirstOf`), else the handle itself."""
    inner = getattr(handle, "current", None)
    return inner if isinstance(inner, TaskRef) and inner is not handle else handle


def _backend(backend: Backend | None) -> Backend:
    if backend is not None:
        if not isinstance(backend, Backend):
            raise ValidationError(f"backend must be an escher Backend, got {backend!r}.")
        return backend
    active: Backend = current_backend()
    return active


def _facts(backend: Backend, ref: TaskRef) -> dict[str, Any]:
    try:
        return dict(backend.describe_task(ref))
    except EscherError as exc:  # the explanation stands without the cluster's words
        return {"describe_error": str(exc)}


def _contributions(backend: Backend, ref: TaskRef | None) -> list[Contribution]:
    if ref is None:
        return []
    found = []
    for policy in backend.policies():
        hook = getattr(policy, "contribution", None)
        note = hook(ref) if callable(hook) else None
        if isinstance(note, Contribution):
            found.append(note)
    return found


def _notes(contributions: Iterable[Contribution]) -> dict[str, LabelNote]:
    notes: dict[str, LabelNote] = {}
    for contribution in contributions:
        for label, note in contribution.labels.items():
            notes.setdefault(label, note)
    return notes


class Explainer:
    """Explains tasks of one backend against one snapshot (so a batch reads the state once).

    Args:
        backend: The backend whose tasks to explain.
        state: A snapshot to use (default: read it now).
    """

    def __init__(self, backend: Backend, state: ClusterState | None = None) -> None:
        self.backend = backend
        self.state = backend.get_cluster_state() if state is None else state
        self._live: list[TaskRef] | None = None
        self._analyses: dict[tuple[Resources, frozenset[tuple[str, LabelNote]]], Analysis] = {}

    def live(self) -> list[TaskRef]:
        """The backend's live tasks, oldest first (read once)."""
        if self._live is None:
            self._live = self.backend.tasks()
        return self._live

    # --- entry points ---------------------------------------------------------------------
    def explain(self, handle: TaskRef | PendingTask) -> WhyResult:
        """Explain one task (a handle of this backend, or another session's pending task)."""
        if isinstance(handle, PendingTask):
            subject = _Subject(handle.id, handle.name, handle.resources, None, dict(handle.facts))
            return self._pending(subject, [])
        if not isinstance(handle, TaskRef):
            raise ValidationError(
                f"why() explains a TaskRef or a PendingTask, got {type(handle).__name__}."
            )
        ref = _unwrap(handle)
        subject = _Subject(ref.id, ref.name, ref.spec.resources, ref, _facts(self.backend, ref))
        infeasible = ref.status.code is StatusCode.INFEASIBLE
        if ref.state is not TaskState.PENDING and not infeasible:
            where = f" on {ref.node_id}" if ref.node_id else ""
            return WhyResult(
                subject.view(),
                Verdict.NOT_PENDING,
                f"it is {ref.state.value}{where}.",
                facts=subject.facts,
            )
        return self._pending(subject, _contributions(self.backend, ref))

    def request(self, request: Resources, name: str = "request") -> WhyResult:
        """Explain where a task requesting `request` could run now (nothing is launched)."""
        return self._pending(_Subject("-", name, Resources.of(request)), [])

    # --- the verdicts ---------------------------------------------------------------------
    def _pending(self, subject: _Subject, contributions: list[Contribution]) -> WhyResult:
        notes = _notes(contributions)
        key = (subject.request, frozenset(notes.items()))
        found = self._analyses.get(key)
        if found is None:  # tasks alike (same request, same policies) share one analysis
            found = self._analyses[key] = analyse(subject.request, self.state, notes)
        policies = tuple(c.to_dict() for c in contributions)
        base: dict[str, Any] = {
            "task": subject.view(),
            "breakdown": found.breakdown,
            "facts": subject.facts,
            "policies": policies,
        }
        ref = subject.ref
        if found.never or (ref is not None and ref.status.code is StatusCode.INFEASIBLE):
            return WhyResult(
                verdict=Verdict.NEVER,
                summary=_never(found, subject.request, self.state),
                conflict=found.conflict,
                **base,
            )
        if found.fits:
            waits = self._placeable_waits(subject, found)
            shown = ", ".join(found.fits[:3]) + (" ..." if len(found.fits) > 3 else "")
            kinds = ", ".join(dict.fromkeys(w.kind for w in waits))
            then = f"; it waits for {kinds}" if kinds else ""
            return WhyResult(
                verdict=Verdict.PLACEABLE,
                summary=f"it fits on {len(found.fits)} node(s) now ({shown}){then}.",
                waiting=tuple(waits),
                **base,
            )
        never = self._never_later(subject.request, found, notes, base)
        if never is not None:
            return never
        if found.waits_for:
            return self._waiting(found, notes, contributions, base)
        assert found.conflict is not None
        if found.conflict.frees_up:
            summary = "it waits for room: running tasks hold what it needs on every node."
        else:
            summary = (
                "its policies and the nodes' capacities conflict: it cannot start until one "
                "of them changes."
            )
        orphans = _orphans(found.conflict, self.state)
        if orphans:
            summary += (
                f" No node has {', '.join(orphans)} and no policy of this process owns it: "
                "create it with escher.set_resource, or drop it from the request."
            )
            summary += unknown_resource_hint(orphans, _known_names(self.state))
        policy_waits = tuple(
            WaitReason(c.wait_kind or "resource", c.waiting, c.source)
            for c in contributions
            if c.waiting
        )
        return WhyResult(
            verdict=Verdict.BLOCKED,
            summary=summary,
            conflict=found.conflict,
            waiting=policy_waits,
            **base,
        )

    def _never_later(
        self,
        request: Resources,
        found: Analysis,
        notes: Mapping[str, LabelNote],
        base: dict[str, Any],
    ) -> WhyResult | None:
        """NEVER if a label a policy creates later needs more than any node could have."""
        for label in request:
            note = notes.get(label)
            if note is None or not note.later or note.need is None:
                continue
            if any(label in n.total for n in self.state.nodes.values()):
                continue
            sub = analyse(note.need, self.state)
            if sub.never:
                return WhyResult(
                    verdict=Verdict.NEVER,
                    summary=(
                        f"{note.source} needs {note.need.to_dict()} on one node for "
                        f"{note.meaning or label}; no node could ever have that much."
                    ),
                    conflict=_as_policy(sub.conflict, note),
                    **base,
                )
        return None

    def _waiting(
        self,
        found: Analysis,
        notes: Mapping[str, LabelNote],
        contributions: Sequence[Contribution],
        base: dict[str, Any],
    ) -> WhyResult:
        waits: list[WaitReason] = []
        for label in found.waits_for:
            note = notes[label]
            kind = _KINDS.get(note.kind, "resource")
            text = f"{note.meaning or 'label ' + label}: the policy creates or grows it later"
            if note.need is not None:
                sub = analyse(note.need, self.state)
                text = (
                    f"{note.meaning}: {note.source} creates it on a node with "
                    f"{note.need.to_dict()} available; now {sub.breakdown.summary()}"
                )
            waits.append(WaitReason(kind, text, note.source))
        for contribution in contributions:
            if contribution.waiting:
                kind = contribution.wait_kind or "resource"
                waits.append(WaitReason(kind, contribution.waiting, contribution.source))
        sources = ", ".join(dict.fromkeys(notes[label].source for label in found.waits_for))
        return WhyResult(
            verdict=Verdict.WAITING,
            summary=f"it waits for {sources}; nothing else keeps it out.",
            waiting=tuple(waits),
            **base,
        )

    def _placeable_waits(self, subject: _Subject, found: Analysis) -> list[WaitReason]:
        waits: list[WaitReason] = []
        ref = subject.ref
        if ref is not None:
            gang = self.backend.gang_of(ref)
            if len(gang) > 1:
                fit = self._gang_fit(gang)
                waits.append(
                    WaitReason(
                        "gang",
                        f"its gang of {len(gang)}: {fit} of {len(gang)} members fit at once "
                        "now; they start together or not at all",
                    )
                )
            ahead = self._ahead(ref)
            if ahead:
                waits.append(
                    WaitReason(
                        "queue", f"{ahead} older pending task(s) ask for some of the same resources"
                    )
                )
        if not waits and (ref is not None or subject.facts):
            message = subject.facts.get("scheduler_message") or (
                "the backend's scheduler has not placed it yet"
            )
            waits.append(WaitReason("scheduler", str(message)))
        return waits

    def _ahead(self, ref: TaskRef) -> int:
        names = set(ref.spec.resources)
        ahead = 0
        for other in self.live():
            if other is ref:
                return ahead
            if other.state is TaskState.PENDING and names & set(other.spec.resources):
                ahead += 1
        return ahead

    def _gang_fit(self, gang: Sequence[TaskRef]) -> int:
        """How many pending members fit at once, first fit in order, on what is available."""
        free = {nid: dict(n.available) for nid, n in self.state.nodes.items() if n.alive}
        placed = 0
        for member in gang:
            if member.state is not TaskState.PENDING:
                placed += 1
                continue
            request = member.spec.resources
            for have in free.values():
                if request.fits_in(have):
                    for name, q in request.items():
                        have[name] = have.get(name, 0.0) - q
                    placed += 1
                    break
        return placed

    # --- batches --------------------------------------------------------------------------
    def pending(self, *, elsewhere: bool = True) -> list[WhyResult]:
        """Every pending task of the backend (and, with `elsewhere`, of other sessions)."""
        results = [self.explain(ref) for ref in self.live() if ref.state is TaskState.PENDING]
        if elsewhere:
            results += [self.explain(task) for task in self.backend.pending_elsewhere()]
        return results

    def find(self, key: str) -> TaskRef | PendingTask:
        """The live task whose id or name is `key` (or another session's pending task).

        Raises:
            ValidationError: no such task (with a suggestion).
        """
        live: list[TaskRef | PendingTask] = [*self.live(), *self.backend.pending_elsewhere()]
        for task in live:
            if key in (task.id, task.name):
                return task
        known = [t.id for t in live] + [t.name for t in live]
        raise ValidationError(f"no live task {key!r}.{did_you_mean(key, known)}")


def _as_policy(conflict: Conflict | None, note: LabelNote) -> Conflict | None:
    """A conflict of a policy's own need: its requirements are the policy's, not the user's."""
    if conflict is None:
        return None
    reqs = tuple(
        replace(r, source=note.source, meaning=f"for {note.meaning}" if note.meaning else "")
        for r in conflict.requirements
    )
    return Conflict(reqs, conflict.capacities)


def _orphans(conflict: Conflict, state: ClusterState) -> list[str]:
    """Labels of the conflict that no node has and no policy of this process owns."""
    return [
        r.resource
        for r in conflict.requirements
        if r.label
        and r.source == YOUR_REQUEST
        and not any(r.resource in n.total for n in state.nodes.values())
    ]


def _never(found: Analysis, request: Resources, state: ClusterState) -> str:
    conflict = found.conflict
    if conflict is None or not conflict.requirements:
        return "no node could ever hold it: there is no alive node."
    parts = ", ".join(f"{r.resource} {r.quantity:g}" for r in conflict.requirements)
    return f"no node could ever hold it: no node has {parts} in total." + unknown_resource_hint(
        request, _known_names(state)
    )


def _known_names(state: ClusterState) -> set[str]:
    return {name for node in state.nodes.values() for name in node.total}


def why(handle: TaskRef | PendingTask, *, backend: Backend | None = None) -> WhyResult:
    """Why is this task pending? Read from the backend's live state, in your policies' terms.

    Args:
        handle: A `TaskRef` (from `escher.launch`, an ESL's `launch`, ...) or a
            `PendingTask` of another session (`Backend.pending_elsewhere()`).
        backend: The backend it runs on (default: the current one).

    Returns:
        A `WhyResult`: its `verdict` (placeable now, waiting for a policy, blocked by a
        minimal conflict, never), the per-node `breakdown`, and the backend's own `facts`.

    Raises:
        ValidationError: `handle` is not a task handle.
        NotInitializedError: no backend given and none is active.
    """
    return Explainer(_backend(backend)).explain(handle)


def why_all(backend: Backend | None = None, *, elsewhere: bool = True) -> list[WhyResult]:
    """`why` for every pending task of the backend (one snapshot for all of them).

    Args:
        backend: The backend (default: the current one).
        elsewhere: Also other sessions' pending tasks the cluster shows
            (`Backend.pending_elsewhere()`).
    """
    return Explainer(_backend(backend)).pending(elsewhere=elsewhere)


def why_request(
    request: Mapping[str, float], *, backend: Backend | None = None, name: str = "request"
) -> WhyResult:
    """Could a task requesting `request` start now, and if not why? Nothing is launched."""
    return Explainer(_backend(backend)).request(Resources.of(request), name)
