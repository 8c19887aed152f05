"""The values `verify` returns: verdicts, explanations, intent results."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from escher.core.plan import Intent
from escher.core.verdict import EXIT_CODES, EXIT_INTENT_VIOLATED
from escher.core.verdict import Verdict as Verdict  # re-exported: the verify modules import it here
from escher.verify.model import Statement

if TYPE_CHECKING:
    from escher.verify.repair._model import Repair

#: Exit code of `escher verify` for bad input (unreadable or malformed files, bad options).
EXIT_BAD_INPUT = 3


class IntentStatus(enum.Enum):
    """What the verifier established about one declared intent.

    * PROVEN: no placement that the resources allow violates it.
    * VIOLATED: a resource-feasible placement violates it (see the counterexample).
    * VACUOUS: the resources allow no placement at all, so there is nothing to prove.
    * UNKNOWN: a limit was hit before an answer.
    """

    PROVEN = "proven"
    VIOLATED = "violated"
    VACUOUS = "vacuous"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Explanation:
    """Why a plan is infeasible: a conflicting set of the user's own statements.

    Attributes:
        statements: The conflicting statements.
        minimal: True when checked: dropping any single one makes the rest feasible.
        note: Extra context (e.g. how the conflict was found).
    """

    statements: tuple[Statement, ...]
    minimal: bool
    note: str = ""

    @property
    def ids(self) -> frozenset[str]:
        """Statement ids of the conflict."""
        return frozenset(s.id for s in self.statements)

    def render(self, limit: int = 20) -> str:
        """A readable message (at most `limit` statements listed; `to_dict` has them all)."""
        head = "These statements cannot all hold together"
        head += " (dropping any one of them makes the rest feasible):" if self.minimal else ":"
        ordered = list(self.statements)
        if len(ordered) > limit:  # keep the few capacities and intents visible
            ordered.sort(key=lambda s: s.kind == "task")
        shown = ordered[:limit]
        lines = [head] + [f"  - {s.text}" for s in shown]
        if len(shown) < len(ordered):
            rest = ordered[limit:]
            kinds = ", ".join(
                f"{sum(1 for s in rest if s.kind == k)} {k}"
                for k in dict.fromkeys(s.kind for s in rest)
            )
            lines.append(f"  ... and {len(rest)} more ({kinds}; all in the JSON output)")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "statements": [s.to_dict() for s in self.statements],
            "minimal": self.minimal,
            "note": self.note,
        }


@dataclass(frozen=True)
class IntentResult:
    """The proof attempt for one declared intent.

    Attributes:
        intent: The intent.
        status: PROVEN, VIOLATED, VACUOUS or UNKNOWN.
        counterexample: A placement (task -> node of each replica) the resources allow and
            that violates the intent, validated by the independent checker.
        detail: What the counterexample shows, or why the answer is unknown.
    """

    intent: Intent
    status: IntentStatus
    counterexample: Mapping[str, list[str]] | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "intent": self.intent.describe(),
            "kind": self.intent.kind,
            "source": self.intent.source,
            "status": self.status.value,
            "counterexample": dict(self.counterexample) if self.counterexample else None,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class VerificationResult:
    """What `escher.verify.verify` returns.

    Attributes:
        status: FEASIBLE, INFEASIBLE or UNKNOWN.
        witness: For FEASIBLE: task name -> the node id of each replica, accepted by the
            independent checker.
        explanation: For INFEASIBLE: the conflicting statements.
        intents: One result per declared intent (empty when not checked).
        proven: For UNKNOWN (and others): what was established before a limit was hit, and
            what would decide it.
        warnings: Oddities that are not errors (a node spec that selects no node, ...).
        stats: Timings and sizes (method, seconds per stage, classes, node types).
        cause: For INFEASIBLE: the cause in one line (e.g. ``GPU: 150 requested, 148
            available``); for UNKNOWN: the tightest bound found.
        preferences: For FEASIBLE: which preferences (intents with a weight) the witness
            meets, one line each.
        decide_by: For UNKNOWN: what would decide it (more time, a named constraint).
        repairs: For INFEASIBLE, when asked for (`escher.verify.find_repairs`,
            `with_repairs`): the cheapest repair of each kind of change, cheapest first.
        repair_notes: What the repair search proved per kind, and what it cut off.
    """

    status: Verdict
    witness: Mapping[str, list[str]] | None = None
    explanation: Explanation | None = None
    intents: tuple[IntentResult, ...] = ()
    proven: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    stats: Mapping[str, Any] = field(default_factory=dict)
    cause: str = ""
    preferences: tuple[str, ...] = ()
    decide_by: str = ""
    repairs: tuple[Repair, ...] = ()
    repair_notes: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        """True only when feasibility is proven by a checked witness."""
        return self.status is Verdict.FEASIBLE

    @property
    def violated(self) -> tuple[IntentResult, ...]:
        """The intents reported VIOLATED."""
        return tuple(r for r in self.intents if r.status is IntentStatus.VIOLATED)

    @property
    def exit_code(self) -> int:
        """The CLI's exit code: the verdict's (`escher.core.verdict.EXIT_CODES`: 0, 1, 2), or
        `EXIT_INTENT_VIOLATED` (4) when feasible with a violated intent."""
        if self.status is Verdict.FEASIBLE and self.violated:
            return EXIT_INTENT_VIOLATED
        return EXIT_CODES[self.status]

    def render(self) -> str:
        """A readable multi-line report."""
        lines = [f"verdict: {self.status.value}"]
        if self.cause:
            label = "tightest" if self.status is Verdict.UNKNOWN else "cause"
            lines.append(f"{label}: {self.cause}")
        if self.witness is not None:
            n = sum(len(v) for v in self.witness.values())
            lines.append(f"witness: {n} replica(s) placed, checked independently")
        lines.extend(f"preference: {p}" for p in self.preferences)
        if self.explanation is not None:
            lines.append(self.explanation.render())
        for p in self.proven:
            lines.append(f"proven: {p}")
        if self.decide_by:
            lines.append(f"to decide it: {self.decide_by}")
        for r in self.intents:
            line = f"intent {r.intent.describe()}: {r.status.value}"
            if r.detail:
                line += f" - {r.detail}"
            lines.append(line)
        for w in self.warnings:
            lines.append(f"warning: {w}")
        lines.extend(f"repair {i}: {r.render()}" for i, r in enumerate(self.repairs, 1))
        lines.extend(f"repairs: {n}" for n in self.repair_notes)
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (the CLI's --format json)."""
        return {
            "status": self.status.value,
            "exit_code": self.exit_code,
            "cause": self.cause,
            "decide_by": self.decide_by,
            "preferences": list(self.preferences),
            "witness": dict(self.witness) if self.witness is not None else None,
            "explanation": self.explanation.to_dict() if self.explanation else None,
            "intents": [r.to_dict() for r in self.intents],
            "proven": list(self.proven),
            "warnings": list(self.warnings),
            "stats": dict(self.stats),
            "repairs": [r.to_dict() for r in self.repairs],
            "repair_notes": list(self.repair_notes),
        }
