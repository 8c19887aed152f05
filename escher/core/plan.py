"""`Plan`: tasks, ephemeral resources and declared intents, as backend-neutral values.

A plan is what the verifier (`escher.verify.verify(plan, state)`) checks before launch.
ESLs add to it (each entry keeps the
`source` that made it, so explanations speak in the user's terms); users can also write one
by hand or load it from a plan file.
"""

from __future__ import annotations

import operator
from collections.abc import Hashable, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from escher.core.errors import PlanFormatError, ValidationError
from escher.core.formats import paused_gc, save_json
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.planfile import PlanDocument, plan_document, read_plan_file
from escher.core.resources import Resources, validate_label, validate_quantity

#: The plan file format version this escher reads and writes.
PLAN_VERSION = 1

#: At most this many replicas in one plan (every replica gets a place in a witness).
MAX_REPLICAS = 10_000_000


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
        fallbacks: The requests each replica may run with instead of `resources`, in order
            of preference (a `FirstOf`, ``a | b``): a replica runs with exactly one of
            `resources` and these. Empty for a task with one request.
    """

    name: str
    resources: Resources
    count: int = 1
    creates: tuple[ResourceCreation, ...] = ()
    concurrent: bool = True
    source: str = ""
    fallbacks: tuple[Resources, ...] = ()

    @property
    def alternatives(self) -> tuple[Resources, ...]:
        """Every request a replica may run with, the preferred one first."""
        return (self.resources, *self.fallbacks)


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

    def admits_like(self, node: str) -> bool:
        """Would a new node alike to `node` (same labels and capacity) be listed too?

        False here: nodes are listed by id. Subclasses that list nodes by a rule on their
        labels (a Kubernetes nodeSelector, say) answer for their rule; a repair that adds
        nodes asks.
        """
        return False


INTENT_KINDS: Mapping[str, type[Intent]] = {
    cls.kind: cls for cls in (Colocated, Separated, Gang, SpreadAtMost, SpreadEvenly, PinnedTo)
}


@dataclass
class Plan:
    """A batch of tasks, ephemeral resources and intents to verify and launch.

    Check one with `escher.verify.verify(plan, state)`; save and load it with `save` and
    `load` (or `to_dict` and `from_dict`; the plan file format, docs/file-formats.md).
    """

    resources: list[PlannedResource] = field(default_factory=list)
    tasks: list[PlannedTask] = field(default_factory=list)
    intents: list[Intent] = field(default_factory=list)
    #: Groupings of nodes defined by escher rather than node labels: key -> node -> domain.
    topologies: dict[str, dict[str, str]] = field(default_factory=dict)
    _index: dict[str, PlannedTask] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The task list last found valid (tasks are immutable: the same ones are still valid).
    _checked: tuple[PlannedTask, ...] = field(default=(), init=False, repr=False, compare=False)

    def _by_name(self) -> dict[str, PlannedTask]:
        # Rebuilt when `tasks` was changed directly (it is a public list).
        if len(self._index) != len(self.tasks):
            self._index = {t.name: t for t in self.tasks}
        return self._index

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
        fallbacks: Iterable[Mapping[str, float]] = (),
    ) -> PlannedTask:
        """Record `count` identical tasks requesting `resources`.

        `fallbacks` are the requests a replica may run with instead, in order of preference
        (a `FirstOf`): each replica runs with one of `resources` and `fallbacks`.

        Raises:
            ValidationError: a duplicate name, a bad count or a bad resource.
        """
        if not isinstance(name, str) or not name:
            raise ValidationError(f"task name must be a non-empty string, got {name!r}.")
        index = self._by_name()
        if name in index:
            raise ValidationError(f"the plan already has a task named {name!r}.")
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REPLICAS:
            raise ValidationError(
                f"count of task {name!r} must be an int from 1 to {MAX_REPLICAS:,}, got {count!r}."
            )
        if not isinstance(concurrent, bool):
            raise ValidationError(f"concurrent of task {name!r} must be True or False.")
        if creates is not None and not isinstance(creates, Mapping):
            raise ValidationError(f"creates of task {name!r} must map labels to capacities.")
        made = tuple(
            ResourceCreation(validate_label(k), validate_quantity(v, what=f"capacity of {k!r}"))
            for k, v in (creates or {}).items()
        )
        if resources is not None and not isinstance(resources, Mapping):
            raise ValidationError(f"resources of task {name!r} must map names to quantities.")
        if isinstance(fallbacks, Mapping | str) or not all(
            isinstance(f, Mapping) for f in fallbacks
        ):
            raise ValidationError(
                f"fallbacks of task {name!r} must be a list of requests (name -> quantity)."
            )
        task = PlannedTask(
            name,
            Resources.of(resources),
            count,
            made,
            concurrent,
            source or f"task {name!r}",
            tuple(Resources.of(f) for f in fallbacks),
        )
        self.tasks.append(task)
        index[name] = task
        return task

    def add_intent(self, intent: Intent) -> Intent:
        """Record an intent; every task it names must already be in the plan.

        Raises:
            ValidationError: it names an unknown task, or is not an `Intent`.
        """
        check_intent(intent)
        known = self._by_name()
        missing = [t for t in intent.tasks if t not in known]
        if missing:
            raise ValidationError(f"{intent.describe()} names unknown task(s) {missing}.")
        self.intents.append(intent)
        return intent

    def task(self, name: str) -> PlannedTask:
        """The task with this name.

        Raises:
            ValidationError: no task of that name.
        """
        try:
            return self._by_name()[name]
        except KeyError:
            raise ValidationError(f"the plan has no task named {name!r}.") from None

    def extend(self, other: Plan) -> Plan:
        """Append everything from `other` (for composing ESL plans)."""
        self.resources.extend(other.resources)
        index = self._by_name()
        for task in other.tasks:
            if task.name in index:
                raise ValidationError(f"both plans have a task named {task.name!r}.")
            self.tasks.append(task)
            index[task.name] = task
        self.intents.extend(other.intents)
        for key, domains in other.topologies.items():
            self.topologies.setdefault(key, dict(domains))
        return self

    def to_dict(self) -> dict[str, Any]:
        """This plan in the plan file format (docs/file-formats.md)."""
        out: dict[str, Any] = {
            "version": PLAN_VERSION,
            "resources": [_resource_to_dict(r) for r in self.resources],
            "tasks": [_task_to_dict(t) for t in self.tasks],
            "intents": [_intent_to_dict(i) for i in self.intents],
        }
        if self.topologies:
            out["topologies"] = {k: dict(v) for k, v in self.topologies.items()}
        return out

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<plan>") -> Plan:
        """Parse the plan file format (validated against ``plan.schema.json``).

        Raises:
            PlanFormatError: naming `source`, the place (e.g. ``tasks[2].count``) and the
                problem.
        """
        with paused_gc():
            return cls._from_dict(data, source)

    @classmethod
    def _from_dict(cls, data: Any, source: str) -> Plan:
        return cls.from_document(plan_document(data, source=source))

    @classmethod
    def from_document(cls, doc: PlanDocument) -> Plan:
        """The plan of a checked plan document (`escher.core.planfile`, the one reader).

        Raises:
            PlanFormatError: a rule the schema cannot say (a duplicate name, too many
                replicas, an intent naming an unknown task), naming the place.
        """
        source, rest = doc.source, doc.rest
        plan = cls()
        for i, raw in enumerate(rest.get("resources", ())):
            _at(f"{source}: resources[{i}]", lambda r=raw: _add_resource(plan, r))
        _add_tasks(plan, doc)
        plan._checked = tuple(plan.tasks)  # built from checked entries
        for i, raw in enumerate(rest.get("intents", ())):
            _at(f"{source}: intents[{i}]", lambda r=raw: plan.add_intent(_intent_from_dict(r)))
        for key, domains in rest.get("topologies", {}).items():
            plan.add_topology(key, domains)
        return plan

    @classmethod
    def load(cls, path: str | Path) -> Plan:
        """Read a plan file (JSON).

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
        """
        with paused_gc():
            return cls.from_document(read_plan_file(path))

    def save(self, path: str | Path) -> Path:
        """Write this plan as a plan file (JSON; `load` reads it back). The same plan gives
        the same bytes.

        Raises:
            ValidationError: the file cannot be written.
        """
        return save_json(self.to_dict(), path, "plan")

    def check(self) -> None:
        """Check every entry, also ones appended to the lists directly (types, ranges, names).

        Raises:
            ValidationError: naming the entry (e.g. ``tasks[3]``) and the problem.
        """
        for i, r in enumerate(self.resources):
            _at(f"resources[{i}]", lambda r=r: _check_resource(r), ValidationError)
        tasks = self.tasks
        names: AbstractSet[str]
        same = len(tasks) == len(self._checked)
        if tasks and same and all(map(operator.is_, tasks, self._checked)):
            names = self._index.keys()  # the index of the tasks found valid
        else:
            seen: set[str] = set()
            for i, t in enumerate(tasks):
                try:
                    _check_task(t, seen)
                except ValidationError as exc:
                    raise ValidationError(f"tasks[{i}]: {exc}") from None
            self._checked = tuple(tasks)
            self._index = {t.name: t for t in self._checked}
            names = seen
        for i, intent in enumerate(self.intents):
            _at(f"intents[{i}]", lambda x=intent: _check_intent_names(x, names), ValidationError)
        for key, domains in self.topologies.items():
            _at(
                f"topologies[{key!r}]",
                lambda k=key, d=domains: Plan().add_topology(k, d),
                ValidationError,
            )

    @staticmethod
    def names(tasks: Iterable[PlannedTask]) -> list[str]:
        """The names of `tasks`."""
        return [t.name for t in tasks]


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_intent(intent: object) -> None:
    """Check the fields of an intent built by hand (types and ranges).

    Raises:
        ValidationError: naming the field and the fix.
    """
    if not isinstance(intent, Intent):
        raise ValidationError(f"expected an Intent, got {type(intent).__name__}.")
    kind = intent.kind
    if not isinstance(intent.tasks, tuple) or not intent.tasks:
        raise ValidationError(f"{kind} intent: tasks must be a non-empty tuple of task names.")
    if not all(isinstance(t, str) and t for t in intent.tasks):
        raise ValidationError(f"{kind} intent: every task name must be a non-empty string.")
    if isinstance(intent.weight, bool) or not isinstance(intent.weight, int | float):
        raise ValidationError(f"{kind} intent: weight must be a number >= 0.")
    if not 0 <= intent.weight <= 1e6:
        raise ValidationError(f"{kind} intent: weight must be from 0 to 1e6, got {intent.weight}.")
    key = getattr(intent, "topology_key", None)
    if key is not None and (not isinstance(key, str) or not key):
        raise ValidationError(f"{kind} intent: topology_key must be None or a non-empty string.")
    for attr in ("per_node", "max_skew"):
        if hasattr(intent, attr) and not _positive_int(getattr(intent, attr)):
            raise ValidationError(f"{kind} intent: {attr} must be an int >= 1.")
    if isinstance(intent, PinnedTo) and (
        not isinstance(intent.nodes, tuple)
        or not all(isinstance(n, str) and n for n in intent.nodes)
    ):
        raise ValidationError("pinned intent: nodes must be a tuple of node ids.")


def _at(where: str, add: Any, error: type[ValidationError] = PlanFormatError) -> None:
    """Run one `add_*` or check call; its ValidationError becomes `error` naming `where`."""
    try:
        add()
    except PlanFormatError:
        raise
    except ValidationError as exc:
        raise error(f"{where}: {exc}") from None


def _check_resource(r: object) -> None:
    if not isinstance(r, PlannedResource):
        raise ValidationError(f"expected a PlannedResource, got {type(r).__name__}.")
    validate_label(r.label)
    validate_quantity(r.capacity, what="capacity")
    if not isinstance(r.node_spec, NodeSpec):
        raise ValidationError("node_spec must be a NodeSpec (use Plan.add_resource).")


def _check_task(t: object, names: set[str]) -> None:
    if not isinstance(t, PlannedTask):
        raise ValidationError(f"expected a PlannedTask, got {type(t).__name__}.")
    if not isinstance(t.name, str) or not t.name or t.name in names:
        raise ValidationError(f"task name {t.name!r} is empty, not a string or used twice.")
    names.add(t.name)
    if not isinstance(t.resources, Resources):
        raise ValidationError(f"task {t.name!r}: resources must be a Resources (use add_task).")
    ok_count = isinstance(t.count, int) and not isinstance(t.count, bool)
    if not ok_count or not 1 <= t.count <= MAX_REPLICAS:
        raise ValidationError(f"task {t.name!r}: count must be an int from 1 to {MAX_REPLICAS:,}.")
    if not isinstance(t.concurrent, bool):
        raise ValidationError(f"task {t.name!r}: concurrent must be True or False.")
    fallbacks = t.fallbacks if isinstance(t.fallbacks, tuple) else (None,)
    if not all(isinstance(f, Resources) for f in fallbacks):
        raise ValidationError(f"task {t.name!r}: fallbacks must be a tuple of Resources.")
    for c in t.creates if isinstance(t.creates, tuple) else (None,):
        if not isinstance(c, ResourceCreation):
            raise ValidationError(f"task {t.name!r}: creates must be ResourceCreation values.")
        validate_label(c.label)
        validate_quantity(c.capacity, what=f"capacity of {c.label!r}")


def _check_intent_names(intent: object, names: AbstractSet[str]) -> None:
    check_intent(intent)
    assert isinstance(intent, Intent)
    missing = [t for t in intent.tasks if t not in names]
    if missing:
        raise ValidationError(f"{intent.describe()} names unknown task(s) {missing}.")


def _spec_to_dict(spec: NodeSpec) -> dict[str, Any]:
    if spec.node_id is not None:
        return {"node": spec.node_id}
    out: dict[str, Any] = {}
    if spec.having is not None:
        out["available"] = spec.having.to_dict()
    elif spec.labels is not None:
        out["labels"] = dict(spec.labels)
    if spec.num_nodes is not None:
        out["num_nodes"] = spec.num_nodes
    return out


def _spec_from_dict(raw: Mapping[str, Any]) -> NodeSpec:
    num = raw.get("num_nodes")
    if "node" in raw:
        return NodeSpec.node(raw["node"])
    if "available" in raw:
        return NodeSpec.with_available(raw["available"], num_nodes=num)
    return NodeSpec.with_labels(raw["labels"], num_nodes=num)


def _resource_to_dict(r: PlannedResource) -> dict[str, Any]:
    return {
        "label": r.label,
        "capacity": r.capacity,
        "node_spec": _spec_to_dict(r.node_spec),
        "source": r.source,
    }


def _add_resource(plan: Plan, raw: Mapping[str, Any]) -> None:
    if raw["node_spec"] == {}:
        raise ValidationError("node_spec: give exactly one of 'node', 'available' or 'labels'.")
    plan.add_resource(
        raw["label"],
        raw["capacity"],
        _spec_from_dict(raw["node_spec"]),
        source=raw.get("source", ""),
    )


def _task_to_dict(t: PlannedTask) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": t.name,
        "resources": t.resources.to_dict(),
        "count": t.count,
        "creates": {c.label: c.capacity for c in t.creates},
        "concurrent": t.concurrent,
        "source": t.source,
    }
    if t.fallbacks:  # left out when empty: files of plans without fallbacks stay as they were
        entry["fallbacks"] = [f.to_dict() for f in t.fallbacks]
    return entry


def _entry(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The fields a (schema-checked) task entry shares with every entry of its shape: its
    request, count, creations and concurrency, by `PlannedTask` field name."""
    made = tuple(
        ResourceCreation(validate_label(k), validate_quantity(v, what=f"capacity of {k!r}"))
        for k, v in (raw.get("creates") or {}).items()
    )
    return {
        "resources": Resources.of(raw.get("resources") or {}),
        "count": raw.get("count", 1),
        "creates": made,
        "concurrent": raw.get("concurrent", True),
        "fallbacks": tuple(Resources.of(f) for f in raw.get("fallbacks", ())),
    }


def _first_problem(doc: PlanDocument, counts: list[int], known: Mapping[str, Any]) -> str:
    """The first name taken before or more replicas than `MAX_REPLICAS` in all among the
    task entries of `doc` with these `counts` (the first ones), in document order, as an
    error message ("" if none)."""
    seen: set[str] = set()
    total = 0
    for i, (name, count) in enumerate(zip(doc.names, counts, strict=False)):
        total += count
        if total > MAX_REPLICAS:
            return f"{doc.source}: tasks[{i}].count: more than {MAX_REPLICAS:,} replicas in all."
        if name in seen or name in known:
            return f"{doc.source}: tasks[{i}]: the plan already has a task named {name!r}."
        seen.add(name)
    return ""


def _add_tasks(plan: Plan, doc: PlanDocument) -> None:
    """The task entries of a checked plan document, in order. Entries of one shape (they
    differ only in name and source) share one checked request, so a plan written one entry
    per task costs its distinct shapes plus a name each: each task gets its fields at once
    (as `PlannedTask.__init__` would set them one by one), the shared ones from its shape.
    Names and the replicas in all are checked after the loop (the first problem in document
    order is reported, as if checked entry by entry).

    Raises:
        PlanFormatError: a duplicate name, a bad request or too many replicas, naming the
            entry.
    """
    built: dict[Hashable, dict[str, Any]] = {}
    before = dict(plan._by_name())
    new = object.__new__
    made: dict[str, PlannedTask] = {}
    counts: list[int] = []
    for i, (name, source, shape) in enumerate(zip(doc.names, doc.sources, doc.shapes, strict=True)):
        shared = built.get(shape)
        if shared is None:
            try:
                shared = built[shape] = _entry(doc.entry(i))
            except ValidationError as exc:
                earlier = _first_problem(doc, counts, before)
                raise PlanFormatError(earlier or f"{doc.source}: tasks[{i}]: {exc}") from None
        counts.append(shared["count"])
        task: PlannedTask = new(PlannedTask)
        fields_ = task.__dict__
        fields_["name"] = name
        fields_.update(shared)
        fields_["source"] = source or f"task {name!r}"
        made[name] = task
    total = sum(counts)
    if total > MAX_REPLICAS or len(made) != len(counts) or not before.keys().isdisjoint(made):
        raise PlanFormatError(_first_problem(doc, counts, before))
    plan.tasks.extend(made.values())
    plan._index.update(made)


# Intent fields beyond kind/tasks/source/weight, per class, as (attribute, file field).
_INTENT_EXTRA: dict[str, tuple[str, ...]] = {
    "colocated": ("topology_key",),
    "separated": ("topology_key",),
    "gang": (),
    "spread": ("per_node", "topology_key"),
    "spread_evenly": ("topology_key", "max_skew"),
    "pinned": ("nodes",),
}


def _intent_to_dict(i: Intent) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": i.kind, "tasks": list(i.tasks), "source": i.source}
    if i.weight:
        entry["weight"] = i.weight
    for attr in _INTENT_EXTRA.get(i.kind, ()):
        value = getattr(i, attr)
        if attr == "topology_key" and value is None:
            continue
        entry[attr] = list(value) if isinstance(value, tuple) else value
    return entry


def _intent_from_dict(raw: Mapping[str, Any]) -> Intent:
    kind = raw["kind"]
    extra = {a: raw[a] for a in _INTENT_EXTRA[kind] if a in raw}
    if "nodes" in extra:
        extra["nodes"] = tuple(extra["nodes"])
    return INTENT_KINDS[kind](
        tasks=tuple(raw["tasks"]),
        source=raw.get("source", ""),
        weight=float(raw.get("weight", 0.0)),
        **extra,
    )
