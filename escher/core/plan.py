"""`Plan`: tasks, ephemeral resources and declared intents, as backend-neutral values.

A plan is what the verifier checks before launch. ESLs add to it (each entry keeps the
`source` that made it, so explanations speak in the user's terms); users can also write one
by hand or load it from a plan file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.resources import Resources, validate_label, validate_quantity

if TYPE_CHECKING:  # pragma: no cover
    from escher.core.cluster import ClusterState


@dataclass(frozen=True)
class PlannedResource:
    """An ephemeral resource to create before the tasks start (a `set_resource` call)."""

    label: str
    capacity: float
    node_spec: NodeSpec
    source: str = ""


@dataclass(frozen=True)
class ResourceCreation:
    """A resource a task creates on the node where it lands (`set_resource(..., None)`)."""

    label: str
    capacity: float


@dataclass(frozen=True)
class PlannedTask:
    """`count` identical tasks.

    Attributes:
        name: Unique within the plan; intents refer to tasks by it.
        resources: The request of each replica.
        count: Number of identical replicas.
        creates: Resources each replica creates on its own node once placed.
        concurrent: True if it must hold its resources at the same time as every other
            concurrent task of the plan (a gang, a batch); False if it only has to fit
            somewhere eventually.
        source: What made it (e.g. "CoLocation('ps').request").
    """

    name: str
    resources: Resources
    count: int = 1
    creates: tuple[ResourceCreation, ...] = ()
    concurrent: bool = True
    source: str = ""


@dataclass(frozen=True)
class Intent:
    """Something a policy promises about placements. Subclasses say what.

    Attributes:
        tasks: Names of the plan's tasks the intent is about.
        source: The policy call that declared it, in the user's terms.
        weight: 0 for a requirement; above 0 for a preference of that weight, which steers
            placement but never blocks it (a plan is feasible without its preferences).
    """

    tasks: tuple[str, ...]
    source: str = ""
    weight: float = 0.0

    kind = "intent"

    @property
    def preferred(self) -> bool:
        """True for a preference (weight > 0), False for a requirement."""
        return self.weight > 0

    def describe(self) -> str:
        """A one-line human description."""
        return _soft(self, f"{self.kind}({', '.join(self.tasks)})")


def _soft(intent: Intent, text: str) -> str:
    return f"preferred (weight {intent.weight:g}): {text}" if intent.preferred else text


def _within(key: str | None) -> str:
    return "node" if key is None else f"{key!r} domain"


@dataclass(frozen=True)
class Colocated(Intent):
    """All replicas of all named tasks run on one node, or with `topology_key` in one domain.

    A domain is the set of nodes sharing one value of the node label `topology_key` (e.g.
    ``"zone"``) or of the plan's own grouping of that name (`Plan.add_topology`). Tasks under
    an intent with a topology key only run on nodes that belong to a domain of that key.
    """

    topology_key: str | None = None
    kind = "colocated"

    def describe(self) -> str:
        return _soft(self, f"({', '.join(self.tasks)}) in one {_within(self.topology_key)}")


@dataclass(frozen=True)
class Separated(Intent):
    """No two replicas of the named tasks share a node (or a domain of `topology_key`)."""

    topology_key: str | None = None
    kind = "separated"

    def describe(self) -> str:
        return _soft(
            self, f"no two of ({', '.join(self.tasks)}) in one {_within(self.topology_key)}"
        )


@dataclass(frozen=True)
class Gang(Intent):
    """The named tasks are placed all together or not at all."""

    kind = "gang"


@dataclass(frozen=True)
class SpreadAtMost(Intent):
    """At most `per_node` replicas of the named tasks on any node (or domain of the key)."""

    per_node: int = 1
    topology_key: str | None = None
    kind = "spread"

    def describe(self) -> str:
        return _soft(
            self,
            f"at most {self.per_node} of ({', '.join(self.tasks)}) per "
            f"{_within(self.topology_key)}",
        )


@dataclass(frozen=True)
class SpreadEvenly(Intent):
    """Replicas spread over the domains of `topology_key` with at most `max_skew` difference.

    As Kubernetes' ``topologySpreadConstraints``: in a placement, the replicas in the
    fullest domain exceed those in the emptiest one by at most `max_skew`. The domains are
    every domain of the key among alive nodes (`None`: every node is its own domain).
    """

    topology_key: str | None = None
    max_skew: int = 1
    kind = "spread_evenly"

    def describe(self) -> str:
        return _soft(
            self,
            f"({', '.join(self.tasks)}) spread over {_within(self.topology_key)}s "
            f"with skew at most {self.max_skew}",
        )


@dataclass(frozen=True)
class PinnedTo(Intent):
    """The named tasks run only on the listed nodes."""

    nodes: tuple[str, ...] = ()
    kind = "pinned"

    def describe(self) -> str:
        return _soft(self, f"({', '.join(self.tasks)}) only on {', '.join(self.nodes)}")


INTENT_KINDS: Mapping[str, type[Intent]] = {
    cls.kind: cls for cls in (Colocated, Separated, Gang, SpreadAtMost, SpreadEvenly, PinnedTo)
}


@dataclass
class Plan:
    """A batch of tasks, ephemeral resources and intents to verify and launch."""

    resources: list[PlannedResource] = field(default_factory=list)
    tasks: list[PlannedTask] = field(default_factory=list)
    intents: list[Intent] = field(default_factory=list)
    #: Groupings of nodes defined by escher rather than node labels: key -> node -> domain.
    topologies: dict[str, dict[str, str]] = field(default_factory=dict)

    def add_topology(self, key: str, domains: Mapping[str, str]) -> None:
        """Define topology `key` as node id -> domain name (overrides a node label `key`).

        Raises:
            ValidationError: an empty key or a non-string node id or domain.
        """
        if not isinstance(key, str) or not key:
            raise ValidationError(f"topology key must be a non-empty string, got {key!r}.")
        if not isinstance(domains, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) and k and v for k, v in domains.items()
        ):
            raise ValidationError(f"topology {key!r} must map node ids to domain names.")
        self.topologies[key] = dict(domains)

    def add_resource(
        self, label: str, capacity: float, node_spec: NodeSpecLike, *, source: str = ""
    ) -> PlannedResource:
        """Record a `set_resource(label, capacity, node_spec)` to run before the tasks."""
        entry = PlannedResource(
            validate_label(label),
            validate_quantity(capacity, what="capacity"),
            NodeSpec.parse(node_spec),
            source or f"set_resource({label!r}, {capacity:g})",
        )
        self.resources.append(entry)
        return entry

    def add_task(
        self,
        name: str,
        resources: Mapping[str, float] | None = None,
        *,
        count: int = 1,
        creates: Mapping[str, float] | None = None,
        concurrent: bool = True,
        source: str = "",
    ) -> PlannedTask:
        """Record `count` identical tasks requesting `resources`.

        Raises:
            ValidationError: a duplicate name, a bad count or a bad resource.
        """
        if not isinstance(name, str) or not name:
            raise ValidationError(f"task name must be a non-empty string, got {name!r}.")
        if any(t.name == name for t in self.tasks):
            raise ValidationError(f"the plan already has a task named {name!r}.")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValidationError(f"count of task {name!r} must be an int >= 1, got {count!r}.")
        made = tuple(
            ResourceCreation(validate_label(k), validate_quantity(v, what=f"capacity of {k!r}"))
            for k, v in (creates or {}).items()
        )
        task = PlannedTask(
            name, Resources.of(resources), count, made, concurrent, source or f"task {name!r}"
        )
        self.tasks.append(task)
        return task

    def add_intent(self, intent: Intent) -> Intent:
        """Record an intent; every task it names must already be in the plan.

        Raises:
            ValidationError: it names an unknown task.
        """
        known = {t.name for t in self.tasks}
        missing = [t for t in intent.tasks if t not in known]
        if missing:
            raise ValidationError(f"{intent.describe()} names unknown task(s) {missing}.")
        self.intents.append(intent)
        return intent

    def task(self, name: str) -> PlannedTask:
        """The task with this name."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise ValidationError(f"the plan has no task named {name!r}.")

    def extend(self, other: Plan) -> Plan:
        """Append everything from `other` (for composing ESL plans)."""
        self.resources.extend(other.resources)
        for task in other.tasks:
            if any(t.name == task.name for t in self.tasks):
                raise ValidationError(f"both plans have a task named {task.name!r}.")
            self.tasks.append(task)
        self.intents.extend(other.intents)
        return self

    def verify(self, state: ClusterState | None = None, **options: Any) -> Any:
        """Verify this plan against `state` (default: the live backend's state).

        See `escher.verify.verify` for the options and the result.
        """
        from escher.verify import verify

        return verify(self, state, **options)

    def to_dict(self) -> dict[str, Any]:
        """This plan in the plan file format (docs/file-formats.md)."""
        from escher.verify._files import plan_to_dict

        return plan_to_dict(self)

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<plan>") -> Plan:
        """Parse the plan file format.

        Raises:
            PlanFormatError: naming `source`, the place and the problem.
        """
        from escher.verify._files import plan_from_dict

        return plan_from_dict(data, source=source)

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file (JSON).

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
        """
        from escher.verify._files import load_plan

        return load_plan(path)

    @staticmethod
    def names(tasks: Iterable[PlannedTask]) -> list[str]:
        """The names of `tasks`."""
        return [t.name for t in tasks]
