"""`Backend`: the small abstract base every backend implements.

Public methods validate their input once, here, then call the underscore method a backend
overrides; so every backend rejects the same bad input with the same error, before any state
changes.

The contract, in one place:

* Ephemeral resources: `_set_resource` (required) and `_set_resources` (bulk; the default
  applies one label at a time, backends override it to write each node once).
* Tasks: `_launch` (required) queues a task and returns its `TaskRef`; the backend then
  drives the handle only through its public backend methods (`TaskRef.set_running`,
  `set_status`, `set_result`, `set_exception`, `set_cancelled`, `retry`), and asks
  `TaskRef.retry` (the one retry rule, `escher.core.task.retry_allowed`) before running a
  failed attempt again.
* Capabilities: a flag in `capabilities` promises the methods listed in `REQUIRED_METHODS`;
  a subclass that claims one without overriding them is refused when it is defined.
* Introspection for explainers and views: `tasks()` (live tasks launched here),
  `describe_task()` (the backend's own words about one), `policies()` (the ESLs bound to
  this backend), `describe()` (facts about the backend, e.g. its mode).
* Shared clusters: `session_id` marks what a backend object creates; `collect_garbage()`
  removes what dead sessions left.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import threading
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, Self

from escher.core.clock import Clock
from escher.core.cluster import ClusterState
from escher.core.errors import (
    InvalidBackendError,
    InvalidCapacityError,
    UnsupportedError,
    ValidationError,
    short_repr,
)
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.resources import Resources, validate_label, validate_quantity
from escher.core.task import TaskRef, TaskSpec


class Capability(enum.Flag):
    """What a backend offers beyond the required API."""

    NONE = 0
    #: Capacities and requests may be fractional (else integers only, as in Kubernetes).
    FRACTIONAL = enum.auto()
    #: `launch_gang` places a set of tasks all together or not at all.
    ATOMIC_GANG = enum.auto()
    #: Time is simulated; `TaskSpec.duration` is honoured.
    VIRTUAL_CLOCK = enum.auto()
    #: Nodes can be added and removed at run time (`add_node` / `remove_node`).
    NODE_MEMBERSHIP = enum.auto()
    #: Runs Python callables.
    PYTHON_TASKS = enum.auto()
    #: Runs container images with a command.
    CONTAINER_TASKS = enum.auto()


class Steering(Protocol):
    """What `Backend.steered` calls around each launch inside its block."""

    def steer(self, spec: TaskSpec) -> TaskSpec:
        """The spec to launch instead of `spec` (or `spec` itself)."""
        ...

    def launched(self, ref: TaskRef) -> None:
        """The backend took the steered task (`ref`)."""
        ...


@dataclass(frozen=True)
class GarbageReport:
    """What `Backend.collect_garbage` found.

    Attributes:
        removed: What belonged to sessions that are gone: removed (or, on a dry run, what
            would be), each as a short description ("label grp-1 on node n3", "pod p-1").
        kept: What belongs to sessions that are still alive, left alone.
        dry_run: True if nothing was changed.
    """

    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    dry_run: bool = False


@dataclass(frozen=True)
class PendingTask:
    """A pending task of another session on the same cluster (`Backend.pending_elsewhere`).

    Attributes:
        id: The cluster's id for it (e.g. the pod's name).
        name: The task's name.
        resources: Its request, in escher's resource names.
        session_id: The session that launched it.
        facts: The cluster's own facts about it, as `Backend.describe_task` gives them.
    """

    id: str
    name: str
    resources: Resources
    session_id: str = ""
    facts: Mapping[str, Any] = field(default_factory=dict)


#: The `Backend.steered` blocks open in this context, innermost last: (backend, steering)
#: pairs. A `ContextVar`, so a block steers the launches of the thread (context) that opened
#: it, not those other threads make on the same backend at the same time.
_steerings: contextvars.ContextVar[tuple[tuple[Backend, Steering], ...]] = contextvars.ContextVar(
    "escher_steerings", default=()
)


#: The methods a backend must override to claim a capability.
REQUIRED_METHODS: Mapping[Capability, tuple[str, ...]] = {
    Capability.ATOMIC_GANG: ("_launch_gang",),
    Capability.NODE_MEMBERSHIP: ("add_node", "remove_node"),
}


class Backend(ABC):
    """A cluster with a resource-matching scheduler and run-time ephemeral resources.

    Subclasses implement the underscore methods; callers use the public ones.
    """

    #: Registry name.
    name: ClassVar[str] = "abstract"
    #: What this backend offers beyond the required API. A flag may depend on the cluster
    #: (e.g. Kubernetes gangs need scheduling gates): `supports` says what this object can do.
    capabilities: ClassVar[Capability] = Capability.NONE

    #: Whether `capabilities` has FRACTIONAL (set per class: asked on every launch).
    _takes_fractions: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._takes_fractions = Capability.FRACTIONAL in cls.capabilities
        for flag, methods in REQUIRED_METHODS.items():
            missing = [m for m in methods if getattr(cls, m) is getattr(Backend, m)]
            if flag in cls.capabilities and missing:
                raise InvalidBackendError(
                    f"{cls.__qualname__} claims Capability.{flag.name} but does not implement "
                    f"{', '.join(missing)}; implement it or drop the flag."
                )

    _live_lock: threading.Lock
    _live: dict[str, TaskRef]
    _policies: weakref.WeakSet[Any]
    _gang_members: dict[str, tuple[TaskRef, ...]]
    #: Unique per backend object: what it creates on a shared cluster is marked with it.
    session_id: str

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        self = super().__new__(cls)
        self._live_lock = threading.Lock()
        self._live = {}
        self._policies = weakref.WeakSet()
        self._gang_members = {}
        self.session_id = uuid.uuid4().hex[:12]
        return self

    @property
    @abstractmethod
    def clock(self) -> Clock:
        """The clock policies use for timeouts and monitors."""

    # --- ephemeral resources ------------------------------------------------------------
    def set_resource(
        self,
        label: str,
        capacity: float,
        node_spec: NodeSpecLike = None,
        *,
        num_nodes: int | None = None,
    ) -> tuple[str, ...]:
        """Create, resize or (capacity 0) delete ephemeral resource `label`.

        Args:
            label: The ephemeral resource's name (see `escher.core.resources.validate_label`).
            capacity: Its new total on each selected node; 0 deletes it.
            node_spec: A node id, a resource vector (nodes whose *available* resources contain
                it), a `NodeSpec`, or None for the node the calling task runs on.
            num_nodes: With a vector or label selector: at most this many nodes.

        Returns:
            The ids of the nodes it was applied to, in id order (empty if a selector matched
            none).

        Raises:
            ValidationError: a bad label, capacity or node spec, or an unknown node id.
            NotInTaskError: node_spec None outside a task.
        """
        label = validate_label(label)
        quantity = self._check_capacity(label, capacity)
        spec = NodeSpec.parse(node_spec, num_nodes)
        return tuple(self._set_resource(label, quantity, spec))

    def set_resources(
        self,
        capacities: Mapping[str, float],
        node_spec: NodeSpecLike = None,
        *,
        num_nodes: int | None = None,
    ) -> tuple[str, ...]:
        """Set several ephemeral resources on the same nodes in one call.

        Each label gets its capacity on every selected node (0 deletes it). The nodes are
        chosen once, before any label changes, so a vector selector is not affected by the
        labels this call sets. Backends write each node once (one update for all labels) and
        different nodes concurrently; per node the change is all or nothing, across nodes it
        is not (as a `set_resource` with a selector).

        Args:
            capacities: label -> new capacity on each selected node.
            node_spec: As for `set_resource`.
            num_nodes: As for `set_resource`.

        Returns:
            The ids of the nodes it was applied to, in id order.

        Raises:
            ValidationError: any bad label, capacity or node spec (nothing is changed).
            NotInTaskError: node_spec None outside a task.
        """
        if not isinstance(capacities, Mapping):
            raise InvalidCapacityError(
                f"capacities must be a mapping of label -> capacity, got "
                f"{type(capacities).__name__}."
            )
        checked = {
            validate_label(label): self._check_capacity(label, capacity)
            for label, capacity in capacities.items()
        }
        spec = NodeSpec.parse(node_spec, num_nodes)
        if not checked:
            return ()
        return tuple(self._set_resources(checked, spec))

    def _check_capacity(self, label: str, capacity: object) -> float:
        quantity = validate_quantity(capacity, what=f"capacity of {label!r}")
        if Capability.FRACTIONAL not in self.capabilities and not quantity.is_integer():
            raise InvalidCapacityError(
                f"the {self.name} backend only takes whole capacities; got {quantity} for "
                f"{label!r}. Scale the unit (e.g. 1000 milli-units) instead."
            )
        return quantity

    @abstractmethod
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
        """Apply a validated call. Raise UnknownNodeError / NotInTaskError /
        ReservedResourceError (label is node-defined) before changing anything."""

    def _set_resources(self, capacities: dict[str, float], spec: NodeSpec) -> Sequence[str]:
        """Apply a validated bulk call (default: the first label selects, the rest follow).

        Override to write each node once; keep the semantics of `set_resources`.
        """
        items = iter(sorted(capacities.items()))
        label, capacity = next(items)
        nodes = list(self._set_resource(label, capacity, spec))
        for label, capacity in items:
            for node in nodes:
                self._set_resource(label, capacity, NodeSpec(node_id=node))
        return nodes

    @abstractmethod
    def get_cluster_state(self) -> ClusterState:
        """A consistent snapshot of every alive node."""

    # --- tasks --------------------------------------------------------------------------
    def launch(self, spec: TaskSpec) -> TaskRef:
        """Queue a task; it runs once some node's available resources cover its request.

        A request no node could ever fit fails at once: its handle's status is INFEASIBLE
        and `result()` raises `UnschedulableError`.
        """
        if not isinstance(spec, TaskSpec):
            raise ValidationError(f"launch takes a TaskSpec, got {short_repr(spec)}.")
        steering = self._steering()
        if steering is None:
            self._check_request(spec.resources)
            return self._track(self._launch(spec))
        spec = steering.steer(spec)
        self._check_request(spec.resources)
        ref = self._track(self._launch(spec))
        steering.launched(ref)
        return ref

    @contextlib.contextmanager
    def steered(self, steering: Steering) -> Iterator[None]:
        """Inside the block, `launch` passes each spec through `steering.steer` first (it
        returns the spec to launch, e.g. with a pin to a node) and tells `steering.launched`
        the handle: how `escher.esl.follow` places tasks on a verified witness's nodes.

        The block belongs to the `contextvars` context that opens it (per thread, or per
        asyncio task): launches made there are steered, and so are those of the clock
        timers and task done callbacks that context schedules (they run in it); launches
        other threads make on this backend meanwhile are not. Blocks nest; the innermost
        steers.
        """
        token = _steerings.set((*_steerings.get(), (self, steering)))
        try:
            yield
        finally:
            _steerings.reset(token)

    def _steering(self) -> Steering | None:
        """The innermost steering of this backend in the calling context, if any (None at
        once when no block is open, as on nearly every launch)."""
        open_blocks = _steerings.get()
        if not open_blocks:
            return None
        for backend, steering in reversed(open_blocks):
            if backend is self:
                return steering
        return None

    @abstractmethod
    def _launch(self, spec: TaskSpec) -> TaskRef:
        """Queue a validated task and return its handle."""

    def supports(self, capability: Capability) -> bool:
        """Whether this backend object offers `capability` on the cluster it talks to.

        The class's `capabilities` say what the backend can ever do; a backend whose
        cluster may lack a feature narrows it here (the default: the class's flags).
        """
        return capability in self.capabilities

    def launch_gang(self, specs: Sequence[TaskSpec]) -> list[TaskRef]:
        """Place all of `specs` together or none of them (needs Capability.ATOMIC_GANG).

        Raises:
            UnsupportedError: the backend cannot place gangs atomically.
        """
        if not self.supports(Capability.ATOMIC_GANG):
            raise UnsupportedError(
                f"the {self.name} backend has no atomic gang placement; use escher.esl.Gang, "
                "which builds it from ephemeral resources."
            )
        if isinstance(specs, TaskSpec) or not isinstance(specs, Sequence):
            raise ValidationError(
                f"launch_gang takes a list of TaskSpecs, got {short_repr(specs)}."
            )
        for spec in specs:
            if not isinstance(spec, TaskSpec):
                raise ValidationError(
                    f"launch_gang takes a list of TaskSpecs; one entry is {short_repr(spec)}."
                )
            self._check_request(spec.resources)
        if not specs:
            return []
        steering = self._steering()
        if steering is not None:
            specs = [steering.steer(spec) for spec in specs]
            for spec in specs:
                self._check_request(spec.resources)
        refs = [self._track(ref) for ref in self._launch_gang(list(specs))]
        if steering is not None:
            for ref in refs:
                steering.launched(ref)
        members = tuple(refs)
        with self._live_lock:
            for ref in refs:
                if ref.id in self._live:
                    self._gang_members[ref.id] = members
        return refs

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        raise UnsupportedError(f"the {self.name} backend has no atomic gang placement.")

    @abstractmethod
    def current_node_id(self) -> str | None:
        """The node the calling code runs on, if it runs inside a task of this backend."""

    # --- introspection --------------------------------------------------------------------
    def _track(self, ref: TaskRef) -> TaskRef:
        ref._launched = True
        if not ref.done():
            with self._live_lock:
                self._live[ref.id] = ref
            # Listed first, then the hook, then a last look: a task that settled before
            # the hook was set is untracked here (untracking twice is harmless).
            ref._on_final = self._untrack_callback
            if ref.done():
                self._untrack(ref)
        return ref

    @functools.cached_property
    def _untrack_callback(self) -> Callable[[TaskRef], None]:
        """`_untrack`, bound once (not a new method object for every task)."""
        return self._untrack

    def _untrack(self, ref: TaskRef) -> None:
        with self._live_lock:
            self._live.pop(ref.id, None)
            self._gang_members.pop(ref.id, None)

    def tasks(self) -> list[TaskRef]:
        """Tasks launched through this backend object that are not final, oldest first."""
        with self._live_lock:
            return list(self._live.values())

    def describe_task(self, ref: TaskRef) -> dict[str, Any]:
        """The backend's own facts about a task (e.g. its pod and the scheduler's message).

        Keys are short nouns ("pod", "namespace", "scheduler_message"); values are plain
        JSON-ready data. The default knows nothing beyond the handle.
        """
        return {}

    def gang_of(self, ref: TaskRef) -> tuple[TaskRef, ...]:
        """The members of the atomic gang (`launch_gang`) `ref` belongs to; () if none.

        Known while `ref` is not final.
        """
        with self._live_lock:
            return self._gang_members.get(ref.id, ())

    def pending_elsewhere(self) -> list[PendingTask]:
        """Pending tasks that other sessions launched on the same cluster (not through
        this backend object), for explainers run from another process (`escher why`).

        A backend whose tasks are visible cluster-wide (Kubernetes pods) lists them; the
        default knows none (the in-memory backend's tasks live only in their process).
        """
        return []

    def attach_policy(self, policy: Any) -> None:
        """Record a policy (ESL) bound to this backend; held weakly."""
        self._policies.add(policy)

    def policies(self) -> list[Any]:
        """The live policies (ESLs) bound to this backend that are not closed."""
        return [p for p in list(self._policies) if not getattr(p, "closed", False)]

    def describe(self) -> dict[str, Any]:
        """Facts about this backend for people and tools (name, capabilities, mode, ...).

        Backends extend the default with what a user needs to know (e.g. Ray's mode).
        """
        flags = [flag.name for flag in Capability if flag and self.supports(flag)]
        return {"name": self.name, "capabilities": sorted(n for n in flags if n)}

    def collect_garbage(self, *, dry_run: bool = False) -> GarbageReport:
        """Remove what sessions that died left on the cluster (labels, pods, actors).

        A session marks what it creates with its `session_id` and keeps a lease alive while
        it runs; this removes exactly what belongs to sessions whose lease expired, never
        what a live session uses. The default has nothing to collect (its state dies with
        the process).
        """
        return GarbageReport(dry_run=dry_run)

    # --- membership (Capability.NODE_MEMBERSHIP) ------------------------------------------
    def add_node(
        self,
        node_id: str,
        resources: dict[str, float],
        labels: dict[str, str] | None = None,
    ) -> None:
        """Add a node (simulated backends)."""
        raise UnsupportedError(f"the {self.name} backend cannot add nodes at run time.")

    def remove_node(self, node_id: str) -> None:
        """Remove a node: its ephemeral resources vanish, its tasks fail or are retried."""
        raise UnsupportedError(f"the {self.name} backend cannot remove nodes at run time.")

    # --- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds. Safe to call twice."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_request(self, request: Resources) -> None:
        if self._takes_fractions:
            return
        bad = {n: q for n, q in request.items() if not q.is_integer() and n != "CPU"}
        if bad:
            raise InvalidCapacityError(
                f"the {self.name} backend only takes whole quantities of extended "
                f"resources; got {bad}."
            )
