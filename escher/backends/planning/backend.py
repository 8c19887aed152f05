"""`PlanningBackend`: the application's own launching code, recorded as a `Plan`; nothing runs.

A planning run executes the app against this backend over a `ClusterState`. It keeps the
cluster's resources as the app's `set_resource(s)` calls leave them (so policies that read
the cluster choose as they would), and records:

* every positive `set_resource(s)` as a planned resource (last capacity per label and node
  spec; deletions are cleanup after the tasks and are not planned);
* every `launch` and `launch_gang` as a planned task with its own request, named from the
  task's name (``work``, ``work-2``, ...: deterministic per run);
* what policies report through `annotate`, `promise` and `add_topology` as they act: the
  resources a task creates on its node, its source, and the intents they promise.

Tasks never start: reading a result or waiting on a task raises `PlanningReadError` (the
plan ends there). The clock stands still: timers never fire.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from escher.backends.base import Backend, Capability
from escher.backends.planning._apart import separate_groups
from escher.core.clock import Clock, Timer
from escher.core.cluster import ClusterState, Node
from escher.core.errors import (
    NotInTaskError,
    PlanningReadError,
    ReservedResourceError,
    UnknownNodeError,
    ValidationError,
    did_you_mean,
)
from escher.core.nodespec import NodeSpec
from escher.core.plan import Intent, Plan
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec

#: Builds an intent from the names of the tasks it is about.
IntentBuilder = Callable[[tuple[str, ...]], Intent]


#: The weight of an intent that only some alternatives of a `FirstOf` promise.
FALLBACK_WEIGHT = 1.0


def _preferred(build: IntentBuilder) -> IntentBuilder:
    def soft(names: tuple[str, ...]) -> Intent:
        return dataclasses.replace(build(names), weight=FALLBACK_WEIGHT)

    return soft


class StillClock(Clock):
    """The clock of a planning run: time stands still and timers never fire."""

    def __init__(self, now: float = 0.0) -> None:
        self._now = now

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, fn: Callable[[], Any]) -> Timer:
        return Timer(self._now + max(delay, 0.0), fn)

    def sleep(self, seconds: float) -> None:
        """Nothing passes in a planning run."""

    @property
    def virtual(self) -> bool:
        return True


@dataclass
class _Node:
    total: dict[str, float]
    labels: dict[str, str]
    ephemeral: set[str]
    available: dict[str, float]


@dataclass
class _Launch:
    name: str
    resources: Resources
    source: str
    creates: dict[str, float] = field(default_factory=dict)
    cancelled: bool = False
    fallbacks: tuple[Resources, ...] = ()
    base: str = ""  # the task's own name (launches of one name are replicas when alike)
    concurrent: bool = True


@dataclass
class _Promise:
    build: IntentBuilder
    names: list[str] = field(default_factory=list)


class PlanningBackend(Backend):
    """A backend that records what an application would do as a `Plan` (nothing runs).

    Args:
        state: The cluster the plan is for: a `ClusterState` or a cluster file's path
            (default: an empty cluster).

    Use `escher.esl.plan_app` (or ``escher plan``) rather than this class directly; `plan()`
    gives the recorded plan at any moment.
    """

    name = "planning"
    capabilities = (
        Capability.FRACTIONAL
        | Capability.ATOMIC_GANG
        | Capability.PYTHON_TASKS
        | Capability.CONTAINER_TASKS
    )

    def __init__(self, state: ClusterState | str | Path | None = None) -> None:
        if isinstance(state, str | Path):
            state = ClusterState.load(state)
        if state is None:
            state = ClusterState(nodes={})
        if not isinstance(state, ClusterState):
            raise ValidationError(
                f"a planning backend takes a ClusterState or a cluster file, got {state!r}."
            )
        self._lock = threading.RLock()
        self._nodes = {
            nid: _Node(
                dict(node.total.items()),
                dict(node.labels),
                set(node.ephemeral),
                dict(node.available.items()),
            )
            for nid, node in sorted(state.nodes.items())
            if node.alive
        }
        self._clock = StillClock(state.time)
        self._resources: dict[tuple[str, NodeSpec], list[Any]] = {}
        self._launches: list[_Launch] = []
        self._by_ref: dict[str, _Launch] = {}
        self._names: set[str] = set()
        self._suffixes: dict[str, int] = {}
        self._promises: dict[Hashable, _Promise] = {}
        self._topologies: dict[str, dict[str, str]] = {}
        self._sources: list[str] = []
        self._numbers = itertools.count(1)
        self._gangs = itertools.count(1)
        self._warnings: dict[str, None] = {}
        # (fallback requests, keys of the intents every alternative promises) of the
        # `FirstOf` launches under way, innermost last
        self._alternatives: list[tuple[tuple[Resources, ...], frozenset[Hashable]]] = []

    @property
    def clock(self) -> Clock:
        return self._clock

    # --- what policies tell the recording -------------------------------------------------
    def next_number(self) -> int:
        """The next policy number of this run (ESL names and labels: stable per run)."""
        return next(self._numbers)

    @contextlib.contextmanager
    def attributed(self, source: str) -> Iterator[None]:
        """Attribute the resources and gangs recorded inside to `source` (a policy)."""
        self._sources.append(source)
        try:
            yield
        finally:
            self._sources.pop()

    @contextlib.contextmanager
    def alternatives(
        self, fallbacks: Sequence[Resources], common: AbstractSet[Hashable]
    ) -> Iterator[None]:
        """The task recorded inside may run with `fallbacks` instead of its own request (a
        `FirstOf`); of the intents promised for it, those keyed in `common` (promised by
        every alternative) are requirements, the others preferences (weight
        `FALLBACK_WEIGHT`: they hold only while it runs with its preferred request)."""
        with self._lock:
            self._alternatives.append((tuple(fallbacks), frozenset(common)))
        try:
            yield
        finally:
            with self._lock:
                self._alternatives.pop()

    def annotate(
        self,
        ref: TaskRef,
        *,
        source: str | None = None,
        creates: Mapping[str, float] | None = None,
        resources: Resources | None = None,
        concurrent: bool | None = None,
    ) -> None:
        """Say more about a recorded task: who launched it, what it creates on its node,
        the request the plan gives it (when the run's own request would pin it), or that it
        waits its turn (`concurrent` False: a queue's task only has to fit when it starts)."""
        with self._lock:
            launch = self._by_ref.get(ref.id)
            if launch is None:
                return
            if source:
                launch.source = source
            if creates:
                for label, capacity in creates.items():
                    launch.creates[label] = max(capacity, launch.creates.get(label, 0.0))
            if resources is not None:
                launch.resources = resources
            if concurrent is not None:
                launch.concurrent = concurrent

    def promise(self, key: Hashable, build: IntentBuilder, ref: TaskRef) -> None:
        """`ref`'s task is under the intent `key`: tasks promised under one key share one
        intent, built by the latest `build` from their names."""
        with self._lock:
            launch = self._by_ref.get(ref.id)
            if launch is None:
                return
            if self._alternatives and key not in self._alternatives[-1][1]:
                key, build = ("preferred", key), _preferred(build)
            entry = self._promises.get(key)
            if entry is None:
                entry = self._promises[key] = _Promise(build)
            entry.build = build
            if launch.name not in entry.names:
                entry.names.append(launch.name)

    def warn(self, text: str) -> None:
        """Note something the plan leaves out (each text once, in order)."""
        with self._lock:
            self._warnings.setdefault(text, None)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What policies said the plan leaves out (`warn`)."""
        with self._lock:
            return tuple(self._warnings)

    def add_topology(self, key: str, domains: Mapping[str, str]) -> None:
        """An escher-defined topology the recorded intents use (`Plan.add_topology`)."""
        with self._lock:
            self._topologies.setdefault(key, dict(domains))

    def plan(self) -> Plan:
        """The plan recorded so far: resources, tasks, intents (in the order the app made
        them; the same code and inputs give the same plan)."""
        with self._lock:
            plan = Plan()
            for (label, spec), (capacity, source) in self._resources.items():
                plan.add_resource(label, capacity, spec, source=source)
            kept = [launch for launch in self._launches if not launch.cancelled]
            replica_of = self._replicas(kept)
            counts: dict[str, int] = {}
            for launch in kept:
                task = replica_of[launch.name]
                counts[task] = counts.get(task, 0) + 1
            for launch in kept:
                if replica_of[launch.name] != launch.name:
                    continue
                plan.add_task(
                    launch.name,
                    launch.resources,
                    count=counts[launch.name],
                    creates=dict(sorted(launch.creates.items())) or None,
                    source=launch.source,
                    fallbacks=launch.fallbacks,
                    concurrent=launch.concurrent,
                )
            for key, domains in self._topologies.items():
                plan.add_topology(key, domains)
            for entry in self._promises.values():
                names = tuple(dict.fromkeys(replica_of[n] for n in entry.names if n in replica_of))
                if names:
                    plan.add_intent(entry.build(names))
        for intent in separate_groups(plan):
            plan.add_intent(intent)
        return plan

    def _replicas(self, kept: list[_Launch]) -> dict[str, str]:
        """Planned name -> the task it is a replica of: launches of one name that are alike
        (request, fallbacks, creations, source, and the same promises) are one task with a
        count, named as the first of them (``web`` x6, not ``web``, ``web-2``, ...)."""
        under: dict[str, list[Hashable]] = {}
        for key, entry in self._promises.items():
            for name in entry.names:
                under.setdefault(name, []).append(key)
        first: dict[Hashable, str] = {}
        out: dict[str, str] = {}
        for launch in kept:
            alike = (
                launch.base,
                launch.resources,
                launch.fallbacks,
                tuple(sorted(launch.creates.items())),
                launch.source,
                launch.concurrent,
                tuple(under.get(launch.name, ())),
            )
            try:
                out[launch.name] = first.setdefault(alike, launch.name)
            except TypeError:  # an unhashable promise key: kept on its own
                out[launch.name] = launch.name
        return out

    def replica_names(self) -> dict[str, str]:
        """Each launch's own name (``web``, ``web-2``, ... in launch order) -> the planned
        task it is a replica of."""
        with self._lock:
            return self._replicas([x for x in self._launches if not x.cancelled])

    # --- ephemeral resources ------------------------------------------------------------
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
        return self._set_resources({label: capacity}, spec)

    def _set_resources(self, capacities: dict[str, float], spec: NodeSpec) -> Sequence[str]:
        with self._lock:
            for label in capacities:
                if any(label in n.total and label not in n.ephemeral for n in self._nodes.values()):
                    raise ReservedResourceError(
                        f"{label!r} is a resource the nodes define themselves; set_resource "
                        "only manages ephemeral labels. Pick another label."
                    )
            targets = self._select(spec)
            for nid in targets:
                node = self._nodes[nid]
                for label, capacity in capacities.items():
                    if capacity > 0:
                        node.total[label] = node.available[label] = capacity
                        node.ephemeral.add(label)
                    else:
                        node.total.pop(label, None)
                        node.available.pop(label, None)
                        node.ephemeral.discard(label)
            source = self._sources[-1] if self._sources else ""
            for label, capacity in sorted(capacities.items()):
                if capacity <= 0:
                    continue  # cleanup after the tasks: not part of the plan
                entry = self._resources.get((label, spec))
                if entry is None:
                    self._resources[(label, spec)] = [capacity, source]
                else:
                    entry[0] = capacity
            return targets

    def _select(self, spec: NodeSpec) -> list[str]:
        if spec.is_local:
            raise NotInTaskError(
                "node_spec=None means 'the node this task runs on', but a planning run "
                "executes no task. Pass a node id or a resource vector instead."
            )
        if spec.node_id is not None:
            if spec.node_id not in self._nodes:
                raise UnknownNodeError(
                    f"no node {spec.node_id!r} in the cluster."
                    f"{did_you_mean(spec.node_id, self._nodes)}"
                )
            return [spec.node_id]
        state = self.get_cluster_state()
        return spec.select(state)

    def get_cluster_state(self) -> ClusterState:
        with self._lock:
            nodes = {
                nid: Node(
                    id=nid,
                    total=Resources(n.total),
                    available=Resources(n.available),
                    labels=dict(n.labels),
                    ephemeral=frozenset(n.ephemeral),
                )
                for nid, n in self._nodes.items()
            }
        return ClusterState(nodes=nodes, time=self._clock.now())

    # --- tasks --------------------------------------------------------------------------
    def _record(self, spec: TaskSpec) -> TaskRef:
        ref = TaskRef(spec, canceller=self._cancel, waiter=self._refuse_read)
        with self._lock:
            # the first free of name, name-2, name-3, ...: numbers below the base's counter
            # are all taken, so the scan resumes there
            name = spec.name
            if name in self._names:
                number = self._suffixes.get(spec.name, 2)
                while f"{spec.name}-{number}" in self._names:
                    number += 1
                name = f"{spec.name}-{number}"
                self._suffixes[spec.name] = number + 1
            self._names.add(name)
            launch = _Launch(name, spec.resources, f"launch({spec.name!r})", base=spec.name)
            if self._alternatives:
                launch.fallbacks = self._alternatives[-1][0]
            self._launches.append(launch)
            self._by_ref[ref.id] = launch
        return ref

    def _launch(self, spec: TaskSpec) -> TaskRef:
        return self._record(spec)

    def record(self, spec: TaskSpec) -> TaskRef:
        """Record `spec` as a launch (its request as it is; no check against the cluster):
        how a plan of tasks already launched elsewhere is built (`escher.esl.plan_tasks`)."""
        return self._record(spec)

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        refs = [self._record(spec) for spec in specs]
        source = self._sources[-1] if self._sources else "launch_gang"
        key = ("gang", next(self._gangs))

        def build(names: tuple[str, ...]) -> Intent:
            from escher.core.plan import Gang

            return Gang(names, source=source)

        for ref in refs:
            self.promise(key, build, ref)
        return refs

    def planned_name(self, ref: TaskRef) -> str | None:
        """The name `ref`'s task has in the plan (None if this run did not record it)."""
        with self._lock:
            launch = self._by_ref.get(ref.id)
            return launch.name if launch is not None else None

    def _cancel(self, ref: TaskRef) -> bool:
        with self._lock:
            launch = self._by_ref.get(ref.id)
            if launch is not None:
                launch.cancelled = True
        return ref.set_cancelled()

    def _refuse_read(self, ref: TaskRef, timeout: float | None) -> None:
        name = self.planned_name(ref) or ref.name
        raise PlanningReadError(
            f"a planning run cannot read the result of task {name!r}: nothing runs while "
            "planning. The plan covers what the app launched before this line; plan the "
            "rest as a phase of its own (see docs/planning.md).",
            task=name,
        )

    def current_node_id(self) -> str | None:
        return None
