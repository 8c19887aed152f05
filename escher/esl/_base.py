"""The ESL base: a policy bound to a backend, its ledger of resources, cleanup and recovery.

Every ESL is a `Policy`: it turns a scheduling intent into a `Constraint` (resources a task
must request, plus resources the task creates where it lands) and declares the intent in a
`Plan` for the verifier. `ESL` adds the ledger of every ephemeral resource it created, deletes
them on `close()` (also on garbage collection and at interpreter exit) and replays lost ones
after a node failure (`recover()`).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import EscherError, ValidationError
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.plan import Intent, Plan
from escher.core.resources import Resources, validate_label
from escher.core.task import TaskRef, TaskSpec
from escher.esl._explain import Contribution, ledger_contribution

log = logging.getLogger("escher.esl")

_instance_ids = itertools.count(1)
_LABEL_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass(frozen=True)
class Action:
    """A `set_resource` a task performs itself: `node_spec` None means its own node."""

    label: str
    capacity: float
    node_spec: NodeSpecLike = None

    def run(self, backend: Any) -> tuple[str, ...]:
        """Apply it through `backend` (from inside the task)."""
        return tuple(backend.set_resource(self.label, self.capacity, self.node_spec))


@dataclass(frozen=True)
class Constraint:
    """What a policy adds to one task.

    Attributes:
        resources: Added to the task's request (AND of policies = sum of these).
        on_start: Resources the task sets before its body runs (e.g. an unknown group's
            resource on the node where the first member landed).
        on_done: Resources the task sets after its body returned (task signalling).
        source: The policy call that made it, in the user's terms.
    """

    resources: Resources = field(default_factory=Resources)
    on_start: tuple[Action, ...] = ()
    on_done: tuple[Action, ...] = ()
    source: str = ""

    def __and__(self, other: Constraint) -> Constraint:
        return Constraint(
            self.resources + other.resources,
            self.on_start + other.on_start,
            self.on_done + other.on_done,
            " & ".join(s for s in (self.source, other.source) if s),
        )


class _Body:
    """A task body that performs a constraint's actions around the user's function.

    Module-level and free of closures so that process-based backends can pickle it; inside
    the task `escher.current_backend()` is the backend running it.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        on_start: tuple[Action, ...],
        on_done: tuple[Action, ...],
        recorder: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.fn = fn
        self.on_start = on_start
        self.on_done = on_done
        self.recorder = recorder
        self.__name__ = getattr(fn, "__name__", "task")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["recorder"] = None  # the driver-side ledger does not cross processes
        return state

    def _apply(self, actions: tuple[Action, ...]) -> None:
        import escher

        backend = escher.current_backend()
        for action in actions:
            nodes = action.run(backend)
            if self.recorder is not None:
                for node in nodes:
                    self.recorder(action.label, node, action.capacity)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._apply(self.on_start)
        value = self.fn(*args, **kwargs)
        self._apply(self.on_done)
        return value


def build_spec(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    constraint: Constraint,
    resources: Mapping[str, float] | None,
    name: str | None,
    recorder: Callable[[str, str, float], None] | None = None,
    **options: Any,
) -> TaskSpec:
    """The `TaskSpec` for `fn` under `constraint` (request = `resources` + the constraint's)."""
    body: Callable[..., Any] = fn
    if constraint.on_start or constraint.on_done:
        body = _Body(fn, constraint.on_start, constraint.on_done, recorder)
    return TaskSpec(
        fn=body,
        args=tuple(args),
        kwargs=dict(kwargs),
        resources=Resources.of(resources) + constraint.resources,
        name=str(name or getattr(fn, "__name__", "task")),
        **options,
    )


_TASK_OPTIONS = ("max_retries", "retry_exceptions", "duration")


def split_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the TaskSpec options (max_retries, retry_exceptions, duration) out of `kwargs`."""
    return {k: kwargs.pop(k) for k in _TASK_OPTIONS if k in kwargs}


@dataclass
class PlanParts:
    """What a policy contributes to a plan for one kind of task.

    Attributes:
        resources: (label, capacity, node_spec, source) to create before the tasks start.
        request: Added to each task's request.
        creates: Resources each task creates on its own node.
        intents: Builders of the intents, given the names of the declared tasks.
        leader: For groups whose first task differs (an unknown co-location group): the
            first task's extra request and the resources it creates; the others use
            `request`.
    """

    resources: list[tuple[str, float, NodeSpecLike, str]] = field(default_factory=list)
    request: Resources = field(default_factory=Resources)
    creates: dict[str, float] = field(default_factory=dict)
    intents: list[Callable[[tuple[str, ...]], Intent]] = field(default_factory=list)
    leader: tuple[Resources, dict[str, float]] | None = None

    def __and__(self, other: PlanParts) -> PlanParts:
        creates = dict(self.creates)
        for label, capacity in other.creates.items():
            creates[label] = max(capacity, creates.get(label, 0.0))
        leader = None
        if self.leader is not None or other.leader is not None:
            mine = self.leader or (self.request, dict(self.creates))
            theirs = other.leader or (other.request, dict(other.creates))
            leader = (mine[0] + theirs[0], {**mine[1], **theirs[1]})
        return PlanParts(
            [*self.resources, *other.resources],
            self.request + other.request,
            creates,
            [*self.intents, *other.intents],
            leader,
        )


class Policy:
    """Something that constrains where tasks run. ESLs, groups and compositions are policies.

    `a & b` places tasks so that both hold (merged requests); `a | b` tries `a` first and
    falls back to `b` when a task has not started within the fallback timeout.
    """

    backend: Backend

    #: How the policy is named in verifier explanations.
    @property
    def source(self) -> str:
        return type(self).__name__

    def constraint(self) -> Constraint:
        """The constraint for the next task launched under this policy."""
        return Constraint(source=self.source)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """What the policy adds to a plan for `count` tasks requesting `resources`."""
        return PlanParts()

    def _recorder(self) -> Callable[[str, str, float], None] | None:
        return None

    def _launched(self, ref: TaskRef) -> None:
        """Hook: a task was launched under this policy."""

    def launch(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Launch `fn(*args, **kwargs)` under this policy.

        Args:
            fn: The task body.
            *args: Its positional arguments.
            resources: The task's own request (CPU, GPU, ...); the policy adds its part.
            name: Task name.
            **kwargs: Keyword arguments of `fn`, plus the task options ``max_retries``,
                ``retry_exceptions`` and ``duration`` (simulated seconds).

        Returns:
            The task's `TaskRef`.
        """
        options = split_options(kwargs)
        spec = build_spec(
            fn, args, kwargs, self.constraint(), resources, name, self._recorder(), **options
        )
        ref = self.backend.launch(spec)
        self._launched(ref)
        return ref

    def declare(
        self,
        plan: Plan | None = None,
        name: str = "tasks",
        *,
        count: int = 1,
        resources: Mapping[str, float] | None = None,
    ) -> Plan:
        """Declare `count` tasks named `name` under this policy in `plan` (a new one if None).

        Adds the policy's resources, the tasks with their merged requests, and the intents,
        each with a `source` in the policy's terms. Returns the plan, ready for
        ``plan.verify(state)``.
        """
        plan = Plan() if plan is None else plan
        base = Resources.of(resources)
        parts = self.plan_parts(count, base)
        seen = {(r.label, r.capacity, r.node_spec) for r in plan.resources}
        for label, capacity, node_spec, source in parts.resources:
            key = (label, capacity, NodeSpec.parse(node_spec))
            if key not in seen:
                seen.add(key)
                plan.add_resource(label, capacity, node_spec, source=source)
        source = f"{self.source}.launch"
        names: tuple[str, ...] = (name,)
        if parts.leader is not None:
            request, creates = parts.leader
            plan.add_task(
                f"{name}-first", base + request, count=1, creates=creates or None, source=source
            )
            names = (f"{name}-first",)
            if count > 1:
                plan.add_task(
                    name,
                    base + parts.request,
                    count=count - 1,
                    creates=parts.creates or None,
                    source=source,
                )
                names += (name,)
        else:
            plan.add_task(
                name,
                base + parts.request,
                count=count,
                creates=parts.creates or None,
                source=source,
            )
        for build in parts.intents:
            plan.add_intent(build(names))
        return plan

    def __and__(self, other: Policy) -> Policy:
        from escher.esl._compose import AllOf

        return AllOf(self, other)

    def __or__(self, other: Policy) -> Policy:
        from escher.esl._compose import FirstOf

        return FirstOf(self, other)


@dataclass
class _Entry:
    """One owned label: capacity per node, and how to re-place it after a node failure."""

    capacities: dict[str, float] = field(default_factory=dict)
    need: Resources | None = None  # a node is eligible if its available covers this
    restorable: bool = True
    why_not: str = ""


@dataclass(frozen=True)
class RecoveryReport:
    """What `ESL.recover()` did.

    Attributes:
        restored: (label, lost node, new node) for each replayed resource.
        lost: (label, lost node, reason) for each resource that could not be restored.
    """

    restored: tuple[tuple[str, str, str], ...] = ()
    lost: tuple[tuple[str, str, str], ...] = ()

    @property
    def complete(self) -> bool:
        """True if everything was restored."""
        return not self.lost


def _delete_all(backend: Backend, ledger: dict[str, _Entry], lock: threading.RLock) -> list[str]:
    """Delete every label of `ledger` wherever it exists. Returns the errors, as text."""
    with lock:
        labels = {label: set(entry.capacities) for label, entry in ledger.items()}
        ledger.clear()
    if not labels:
        return []
    errors: list[str] = []
    try:
        state = backend.get_cluster_state()
        for label, nodes in labels.items():
            nodes |= set(state.holding(label))
    except EscherError as exc:
        return [f"cannot read the cluster state: {exc}"]
    for label, nodes in labels.items():
        for node in sorted(nodes):
            if node not in state.nodes:
                continue
            try:
                backend.set_resource(label, 0, node)
            except EscherError as exc:
                errors.append(f"{label} on {node}: {exc}")
    return errors


class ESL(Policy):
    """Base of the scheduling libraries: binding, ledger, cleanup, recovery.

    Args:
        backend: The backend to use (default: `escher.current_backend()` now).
        name: A short name used in labels and explanations (default: the kind + a number).

    Every label an ESL creates starts with a prefix unique to the instance, so two ESLs never
    touch each other's resources. Use it as a context manager or call `close()`; a finaliser
    also deletes the resources when the ESL is garbage-collected or the interpreter exits.
    """

    #: Short kind used in labels.
    kind = "esl"

    def __init__(self, backend: Backend | None = None, *, name: str | None = None) -> None:
        if backend is None:
            import escher

            backend = escher.current_backend()
        if not isinstance(backend, Backend):
            raise ValidationError(f"backend must be an escher Backend, got {backend!r}.")
        self.backend = backend
        number = next(_instance_ids)
        self.name = name if name is not None else f"{self.kind}{number}"
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError(f"name must be a non-empty string, got {name!r}.")
        self._prefix = f"x{number}{hashlib.sha1(self.name.encode()).hexdigest()[:3]}"
        self._lock = threading.RLock()
        self._ledger: dict[str, _Entry] = {}
        self._closed = False
        self._timers: list[Any] = []
        self._finalizer = weakref.finalize(
            self, _delete_all, self.backend, self._ledger, self._lock
        )
        backend.attach_policy(self)

    # --- naming ----------------------------------------------------------------------------
    @property
    def source(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def label(self, part: str) -> str:
        """A label owned by this ESL: ``<prefix>-<kind>-<part>``, valid on every backend."""
        clean = _LABEL_BAD.sub("-", str(part)).strip("-_.") or "r"
        label = f"{self._prefix}-{self.kind}-{clean}"
        if len(label) > 63:
            digest = hashlib.sha1(label.encode()).hexdigest()[:8]
            label = f"{label[:54].rstrip('-_.')}-{digest}"
        return validate_label(label)

    # --- the ledger ------------------------------------------------------------------------
    def set_resource(
        self,
        label: str,
        capacity: float,
        node_spec: NodeSpecLike,
        *,
        num_nodes: int | None = None,
        need: Mapping[str, float] | None = None,
        restorable: bool | None = None,
        why_not: str = "",
    ) -> tuple[str, ...]:
        """`backend.set_resource`, recorded in the ledger (capacity 0 forgets it).

        Args:
            label: One of this ESL's labels (see `label`).
            capacity: New capacity on each selected node.
            node_spec: Where (see `escher.set_resource`).
            num_nodes: At most this many nodes for a selector.
            need: After a node failure the resource may move to a node whose available
                resources cover `need`.
            restorable: False if a lost copy cannot be moved (e.g. data that lived there);
                None keeps what the label had (True for a new one).
            why_not: The reason reported when it is not restorable.
        """
        self._check_open()
        nodes = self.backend.set_resource(label, capacity, node_spec, num_nodes=num_nodes)
        with self._lock:
            entry = self._ledger.setdefault(label, _Entry())
            if need is not None:
                entry.need = Resources.of(need)
            if restorable is not None:
                entry.restorable = restorable
            entry.why_not = why_not or entry.why_not
            for node in nodes:
                if capacity > 0:
                    entry.capacities[node] = capacity
                else:
                    entry.capacities.pop(node, None)
        return nodes

    def own(
        self,
        label: str,
        *,
        need: Mapping[str, float] | None = None,
        restorable: bool = True,
        why_not: str = "",
    ) -> str:
        """Record `label` as owned although tasks create it (so `close()` deletes it)."""
        with self._lock:
            entry = self._ledger.setdefault(label, _Entry())
            if need is not None:
                entry.need = Resources.of(need)
            entry.restorable, entry.why_not = restorable, why_not or entry.why_not
        return label

    def _record(self, label: str, node: str, capacity: float) -> None:
        with self._lock:
            entry = self._ledger.get(label)
            if entry is None:  # not ours (a composed policy's label)
                return
            if capacity > 0:
                entry.capacities[node] = capacity
            else:
                entry.capacities.pop(node, None)

    def _recorder(self) -> Callable[[str, str, float], None] | None:
        return self._record

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """What this ESL adds to `ref`'s request, for explainers (`escher.why`).

        The explain hook: the labels of the task's request this ESL owns, what each stands
        for, which it creates later, and any reason of its own to hold the task back. The
        default reads the ledger (`escher.esl._explain.ledger_contribution`); override it
        to speak in the ESL's own terms. None if the task requests none of its labels.
        """
        return ledger_contribution(self, ref)

    def ledger(self) -> dict[str, dict[str, float]]:
        """label -> node -> capacity of every resource this ESL set (a copy)."""
        with self._lock:
            return {label: dict(e.capacities) for label, e in self._ledger.items()}

    def forget(self, label: str) -> None:
        """Delete `label` everywhere and drop it from the ledger."""
        with self._lock:
            entry = self._ledger.pop(label, None)
        if entry is not None:
            _delete_all(self.backend, {label: entry}, threading.RLock())

    # --- timers (monitors, timeouts) on the backend's clock --------------------------------
    def call_later(self, delay: float, fn: Callable[[], Any]) -> None:
        """Run `fn` after `delay` seconds of the backend's clock, unless the ESL is closed.

        A bound method is held weakly, so a pending timer does not keep the ESL alive.
        """
        target: Callable[[], Callable[[], Any] | None]
        if hasattr(fn, "__self__") and hasattr(fn, "__func__"):
            target = weakref.WeakMethod(fn)
        else:
            target = lambda: fn  # noqa: E731
        closed = weakref.ref(self)

        def fire() -> None:
            call, owner = target(), closed()
            if call is not None and owner is not None and not owner._closed:
                call()

        timer = self.backend.clock.call_later(delay, fire)
        with self._lock:
            now = self.backend.clock.now()
            self._timers = [t for t in self._timers if not t.cancelled and t.when >= now]
            self._timers.append(timer)

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """True after `close()`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise ValidationError(f"{self.source} is closed; create a new one.")

    def _on_close(self) -> None:
        """Hook for subclasses: stop what they run (called once, before the cleanup)."""

    def close(self) -> list[str]:
        """Delete every resource this ESL created and stop its timers. Safe to call twice.

        Tasks already running keep running; tasks still waiting for one of its resources
        keep waiting (cancel them first if they should not run).

        Returns:
            Cleanup problems as text (e.g. a node that left); empty when all went well.
        """
        with self._lock:
            if self._closed:
                return []
            self._closed = True
            timers, self._timers = self._timers, []
        for timer in timers:
            timer.cancel()
        self._on_close()
        self._finalizer.detach()
        return _delete_all(self.backend, self._ledger, self._lock)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._ledger)} labels"
        return f"<{self.source} on {self.backend.name}: {state}>"

    # --- recovery --------------------------------------------------------------------------
    def recover(self, state: ClusterState | None = None) -> RecoveryReport:
        """Replay the resources this ESL had on nodes that left onto eligible alive nodes.

        The paper's recovery rule: a lost copy moves to an alive node that does not hold the
        label yet and whose available resources cover what the resource needs (e.g. the sum
        of a co-located group's requests). Copies that cannot move (data that lived on the
        lost node) or that find no eligible node are reported in `RecoveryReport.lost`.
        """
        self._check_open()
        state = self.backend.get_cluster_state() if state is None else state
        alive = {nid for nid, n in state.nodes.items() if n.alive}
        restored: list[tuple[str, str, str]] = []
        lost: list[tuple[str, str, str]] = []
        with self._lock:
            work = [
                (label, node, cap, entry)
                for label, entry in self._ledger.items()
                for node, cap in entry.capacities.items()
                if node not in alive
            ]
            for _label, node, _, entry in work:
                entry.capacities.pop(node, None)
        taken: dict[str, set[str]] = {}
        for label, node, capacity, entry in work:
            if not entry.restorable:
                lost.append((label, node, entry.why_not or "it cannot move to another node"))
                continue
            holders = set(state.holding(label)) | set(entry.capacities) | taken.get(label, set())
            target = self._recovery_target(label, entry, state, holders)
            if target is None:
                need = entry.need.to_dict() if entry.need else {}
                lost.append((label, node, f"no alive node without it has {need} available"))
                continue
            self.set_resource(label, capacity, target)
            taken.setdefault(label, set()).add(target)
            restored.append((label, node, target))
        return RecoveryReport(tuple(restored), tuple(lost))

    def _recovery_target(
        self, label: str, entry: _Entry, state: ClusterState, holders: set[str]
    ) -> str | None:
        need = entry.need or Resources()
        for nid in self._eligible_nodes(state):
            node = state.nodes[nid]
            if nid not in holders and node.alive and need.fits_in(node.available):
                return nid
        return None

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        """Nodes this ESL may use, in preference order (default: all, by id)."""
        return sorted(state.nodes)


def node_ids(backend: Backend, nodes: Iterable[str] | NodeSpecLike | None) -> list[str]:
    """Resolve a node selection (ids, a NodeSpec/vector, or None = every alive node)."""
    state = backend.get_cluster_state()
    if nodes is None:
        return sorted(nid for nid, n in state.nodes.items() if n.alive)
    if isinstance(nodes, NodeSpec | Mapping | str):
        return NodeSpec.parse(nodes).select(state)
    chosen = list(nodes)
    for nid in chosen:
        state.node(nid)  # UnknownNodeError for a bad id
    return chosen
