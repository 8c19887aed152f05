"""The values `escher.why` returns: a verdict, a minimal conflict, the per-node breakdown."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from escher.core.verdict import Verdict

#: The words `WhyResult.render` and the CLI use for a task's own request.
YOUR_REQUEST = "your request"


def _num(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True)
class Requirement:
    """One resource of the task's request, and who asked for it.

    Attributes:
        resource: The resource's name (CPU, or an ephemeral label).
        quantity: How much the task requests.
        source: The policy that owns the label, in the user's terms, or "your request".
        label: True for an ephemeral label.
        meaning: What the label stands for ("the node of group 'ps'"), if a policy said.
    """

    resource: str
    quantity: float
    source: str = YOUR_REQUEST
    label: bool = False
    meaning: str = ""

    def describe(self) -> str:
        """One line: who asks for what."""
        what = f"label {self.resource}" if self.label else self.resource
        meaning = f" ({self.meaning})" if self.meaning else ""
        return f"{self.source}: {what} {_num(self.quantity)}{meaning}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (its fields)."""
        return asdict(self)


@dataclass(frozen=True)
class Capacity:
    """One node's capacity of one resource that falls short of a requirement.

    Attributes:
        node: The node's id.
        resource: The resource.
        requested: What the requirement asks for.
        total: The node's total of it (0 if it has none).
        available: What is not in use now.
    """

    node: str
    resource: str
    requested: float
    total: float
    available: float

    @property
    def in_use(self) -> float:
        """What running tasks hold."""
        return max(0.0, self.total - self.available)

    @property
    def frees_up(self) -> bool:
        """True if the node could take the requirement once its running tasks release."""
        return self.total + 1e-9 >= self.requested

    def describe(self) -> str:
        """One line: what the node has."""
        if self.total <= 0:
            return f"{self.node} has no {self.resource}"
        if self.total + 1e-9 < self.requested:
            return f"{self.node} has {_num(self.total)} {self.resource} in total"
        used = f" ({_num(self.in_use)} in use)" if self.in_use > 0 else ""
        return (
            f"{self.node} has {_num(self.available)} of {_num(self.total)} "
            f"{self.resource} available{used}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "node": self.node,
            "resource": self.resource,
            "requested": self.requested,
            "total": self.total,
            "available": self.available,
            "in_use": self.in_use,
        }


@dataclass(frozen=True)
class Conflict:
    """A minimal set of requirements and node capacities that cannot hold together.

    Read it as a small problem of its own: a task requesting only `requirements`, on nodes
    limited only by `capacities` (one per node), cannot be placed; drop any one element (a
    requirement, or a node's capacity) and it can.

    Attributes:
        requirements: The conflicting parts of the request, each with its policy.
        capacities: For every node, the one capacity that keeps it out.
        frees_up: True if every node's shortfall is use, not size: the task can start once
            running tasks release what they hold.
    """

    requirements: tuple[Requirement, ...]
    capacities: tuple[Capacity, ...]

    @property
    def frees_up(self) -> bool:
        """True if running tasks releasing their resources would resolve the conflict."""
        return all(c.frees_up for c in self.capacities)

    def render(self, limit: int = 6) -> str:
        """Readable lines: the requirements, then the nodes grouped by what keeps them out."""
        lines = ["These cannot hold together (drop any one and the task fits):"]
        lines += [f"  - {r.describe()}" for r in self.requirements]
        by_resource: dict[str, list[Capacity]] = {}
        for cap in self.capacities:
            by_resource.setdefault(cap.resource, []).append(cap)
        for resource, caps in by_resource.items():
            shown = [c.describe() for c in caps[:limit]]
            more = f"; and {len(caps) - limit} more node(s)" if len(caps) > limit else ""
            lines.append(f"  - {resource} on {len(caps)} node(s): {'; '.join(shown)}{more}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "requirements": [r.to_dict() for r in self.requirements],
            "capacities": [c.to_dict() for c in self.capacities],
            "frees_up": self.frees_up,
        }


@dataclass(frozen=True)
class NodeCheck:
    """Why one node cannot take the task now (no reasons: it can)."""

    node: str
    reasons: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"node": self.node, "reasons": list(self.reasons)}


@dataclass(frozen=True)
class Breakdown:
    """The per-node view a kubectl user expects, counted by reason."""

    nodes: tuple[NodeCheck, ...]

    @property
    def available(self) -> int:
        """Nodes that can take the task now."""
        return sum(1 for n in self.nodes if not n.reasons)

    def counts(self) -> dict[str, int]:
        """Reason -> number of nodes it applies to, most frequent first."""
        counter = Counter(reason for n in self.nodes for reason in n.reasons)
        return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))

    def summary(self) -> str:
        """``0/3 nodes are available: 2 Insufficient CPU, 1 lacks label grp-7 (...)``."""
        head = f"{self.available}/{len(self.nodes)} nodes are available"
        counts = self.counts()
        if not counts:
            return head + "."
        return head + ": " + ", ".join(f"{n} {reason}" for reason, n in counts.items()) + "."

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {
            "summary": self.summary(),
            "available": self.available,
            "counts": self.counts(),
            "nodes": [n.to_dict() for n in self.nodes],
        }


@dataclass(frozen=True)
class WaitReason:
    """Something the task waits for that is not room.

    Attributes:
        kind: "queue", "gang", "quota", "group", "signal", "resource" or "scheduler".
        text: One line in the user's terms.
        source: The policy it comes from ("" for the backend).
    """

    kind: str
    text: str
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"kind": self.kind, "text": self.text, "source": self.source}


@dataclass(frozen=True)
class WhyResult:
    """What `escher.why` found out about one task.

    Attributes:
        task: The task's id, name, request, state and status.
        verdict: Where it stands (`Verdict`).
        summary: One line saying why.
        conflict: For BLOCKED and NEVER: the minimal set of requirements and capacities.
        waiting: For PLACEABLE and WAITING: what it waits for.
        breakdown: Per node, why it cannot take the task now.
        facts: The backend's own facts (`Backend.describe_task`: on Kubernetes the pod, its
            namespace and the scheduler's last FailedScheduling message).
        policies: What each policy adds to the task (`ESL.contribution`), as data.
    """

    task: Mapping[str, Any]
    verdict: Verdict
    summary: str
    conflict: Conflict | None = None
    waiting: tuple[WaitReason, ...] = ()
    breakdown: Breakdown = field(default_factory=lambda: Breakdown(()))
    facts: Mapping[str, Any] = field(default_factory=dict)
    policies: tuple[Mapping[str, Any], ...] = ()

    @property
    def exit_code(self) -> int:
        """0 placeable or not pending, 1 waiting, 2 blocked, 4 never."""
        return self.verdict.exit_code

    def render(self) -> str:
        """A readable report: verdict, why, conflict, waits, breakdown, the backend's words."""
        task = self.task
        lines = [f"task {task.get('name')!r} ({task.get('id')}): {self.verdict.value}"]
        lines.append(f"  {self.summary}")
        if self.conflict is not None:
            lines += ["  " + line for line in self.conflict.render().splitlines()]
        for wait in self.waiting:
            lines.append(f"  waits for {wait.kind}: {wait.text}")
        if self.breakdown.nodes:
            lines.append(f"  {self.breakdown.summary()}")
        for key in ("pod", "namespace", "scheduler_message"):
            if self.facts.get(key):
                lines.append(f"  {key.replace('_', ' ')}: {self.facts[key]}")
        return "\n".join(lines)

    __str__ = render

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (`escher why --format json`)."""
        return {
            "task": dict(self.task),
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "summary": self.summary,
            "conflict": self.conflict.to_dict() if self.conflict is not None else None,
            "waiting": [w.to_dict() for w in self.waiting],
            "breakdown": self.breakdown.to_dict(),
            "facts": dict(self.facts),
            "policies": [dict(p) for p in self.policies],
        }
