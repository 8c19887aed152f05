"""The values `find_repairs` returns: `Change`, `Repair`, `RepairSet`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.repair._draft import Draft


def _amount(value: Any) -> str:
    """A from/to value as a short text (``4``, ``GPU 4``, ``dropped``)."""
    if value is None:
        return "dropped"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_amount(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return " + ".join(_amount(v) for v in value)
    return str(value)


@dataclass(frozen=True)
class Change:
    """One change to a plan or its cluster, in the user's terms.

    Attributes:
        kind: ``replicas``, ``request``, ``intent``, ``nodes`` or ``node``.
        target: What changes: a task name, an intent's source, a node type, a node id.
        before: The value now (the JSON ``from``): a count, a request, an intent's text.
        after: The value after the change (the JSON ``to``); None for a dropped intent.
        cost: The change's cost in its kind's unit (docs/repairs.md).
    """

    kind: str
    target: str
    before: Any
    after: Any
    cost: float
    edit: Callable[[Draft], None] = field(repr=False, compare=False, default=lambda d: None)

    def render(self) -> str:
        """One readable phrase: ``web: 4 -> 3 replicas``, ``trainer: GPU 4 -> 2``."""
        if self.kind == "replicas":
            return f"{self.target}: {self.before} -> {self.after} replicas"
        if self.kind == "nodes":
            more = self.after - self.before
            nodes = "node" if more == 1 else "nodes"
            return f"{more} more {nodes} like {self.target} ({self.before} -> {self.after})"
        if isinstance(self.before, Mapping) and isinstance(self.after, Mapping):
            amounts = ", ".join(
                f"{r} {_amount(v)} -> {_amount(self.after.get(r))}" for r, v in self.before.items()
            )
            if self.kind == "node":
                return f"node {self.target}: {amounts} available"
            return f"{self.target}: {amounts}"
        return f"{self.target}: {_amount(self.before)} -> {_amount(self.after)}"

    def to_dict(self) -> dict[str, Any]:
        """``{"kind", "target", "from", "to"}``, JSON-ready."""
        return {"kind": self.kind, "target": self.target, "from": self.before, "to": self.after}


@dataclass(frozen=True)
class Repair:
    """A set of changes that makes an infeasible plan feasible, with the proof.

    Attributes:
        changes: The changes, all needed: each was removed in turn and the plan was then
            infeasible again (when `minimal`).
        witness: A placement of the changed plan on the changed cluster (task -> the node
            of each replica), accepted by the independent checker.
        cost: The sum of the changes' costs.
        minimal: True when checked: no change can be removed with the plan staying feasible.
        cheapest: True when proven: no repair of the same kind costs less.
    """

    changes: tuple[Change, ...]
    witness: Mapping[str, list[str]]
    cost: float
    minimal: bool
    cheapest: bool

    @property
    def kind(self) -> str:
        """The kind of its changes, or ``mixed`` for changes of several kinds (tried only
        when no kind alone repairs the plan)."""
        kinds = {c.kind for c in self.changes}
        return kinds.pop() if len(kinds) == 1 else "mixed"

    def apply(self, draft: Draft) -> None:
        """Make the changes on `draft` (a copy of a plan and its cluster)."""
        for change in self.changes:
            change.edit(draft)

    def render(self) -> str:
        """One line: the changes, then the cost and what was proven."""
        proof = "cheapest of its kind" if self.cheapest else "minimal" if self.minimal else ""
        what = "; ".join(c.render() for c in self.changes)
        return f"{what}  ({self.kind}, cost {self.cost:g}{', ' + proof if proof else ''})"

    def to_dict(self) -> dict[str, Any]:
        """``{"changes": [...], "witness": {...}}``, JSON-ready."""
        return {
            "changes": [c.to_dict() for c in self.changes],
            "witness": {k: list(v) for k, v in self.witness.items()},
        }


@dataclass(frozen=True)
class RepairSet:
    """What `find_repairs` found and proved within its time budget.

    Attributes:
        repairs: The repairs, cheapest first, at most one per kind of change.
        notes: Per kind: what was proven (cheapest, none exists within the bounds) and what
            the time budget cut off.
        seconds: Time spent.
    """

    repairs: tuple[Repair, ...] = ()
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def render(self) -> str:
        """One line per repair, cheapest first, then the notes."""
        lines = [f"repair {i}: {r.render()}" for i, r in enumerate(self.repairs, 1)]
        if not self.repairs:
            lines.append("no repair found")
        lines.extend(f"repairs: {n}" for n in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """``{"repairs": [...], "notes": [...], "seconds": s}``, JSON-ready."""
        return {
            "repairs": [r.to_dict() for r in self.repairs],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 4),
        }


def apply_repair(plan: Plan, state: ClusterState, repair: Repair) -> tuple[Plan, ClusterState]:
    """`plan` and `state` with the changes of `repair` made (the originals are unchanged)."""
    draft = Draft(plan, state)
    repair.apply(draft)
    changed, cluster, _ = draft.build()
    return changed, cluster
