"""`what_if`: replay a workload on the in-memory backend in virtual time, from a live snapshot.

The replay starts from a `ClusterState` (taken from any backend with `get_cluster_state`):
the same nodes in the same order, their node-defined resources and labels, the ephemeral
labels with their totals, and what running tasks hold (kept held by a stand-in task per node,
for the whole replay or for `hold` seconds). Then it creates the plan's ephemeral resources and
launches every replica at its arrival time, under a *policy*:

* ``backend``: each task goes to the backend at arrival, which places it as it always does
  (oldest first per request shape);
* a queueing ordering of `escher.esl.queueing` (``fifo``, ``drf``, ``fair-threads``,
  ``fair-memory``): arrived tasks wait in per-user queues, and the replay hands them to the
  backend by progressive filling of the pooled free capacity in the ordering's order, as
  `QueueingPolicy` plans its quotas (FIFO stops at the first task that does not fit).

Every replica's start, finish and node are recorded; tasks that never start are explained
with `why` against the state the replay ends in.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from escher.backends.memory import MemoryBackend
from escher.core.cluster import ClusterState
from escher.core.context import current_backend
from escher.core.errors import ValidationError
from escher.core.resources import MAX_CAPACITY, Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl.queueing import ORDERINGS, Ordering
from escher.explain._result import WhyResult
from escher.explain._why import Explainer
from escher.explain._workload import Workload

#: The policy that hands every task to the backend at arrival.
BACKEND_POLICY = "backend"
#: Names `what_if` accepts as policies.
POLICIES = (BACKEND_POLICY, *ORDERINGS)
_HOLD_LABEL = "escher-what-if-hold-{}"


@dataclass(frozen=True)
class TaskOutcome:
    """One replica in the replay (start, finish and node are None if it never started)."""

    task: str
    replica: int
    user: str
    job: str
    arrival: float
    start: float | None
    finish: float | None
    node: str | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data (its fields)."""
        return asdict(self)


@dataclass(frozen=True)
class NeverPlaced:
    """Replicas of one plan task that never started, and why (against the final state)."""

    task: str
    count: int
    why: WhyResult

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"task": self.task, "count": self.count, "why": self.why.to_dict()}


@dataclass
class Report:
    """What one policy's replay found.

    Attributes:
        policy: The policy's name.
        tasks: Every replica's outcome, in arrival order.
        makespan: Seconds from the replay's start to the last finish.
        mean_jct: Mean job completion time (last finish minus first arrival of each job
            whose tasks all finished).
        p95_jct: The 95th percentile of those (nearest rank).
        utilisation: Node -> resource -> the share of its total the workload used over the
            makespan (node-defined resources only).
        never: Tasks that never started, with `why`.
        events: Simulation events run.
    """

    policy: str
    tasks: list[TaskOutcome]
    makespan: float = 0.0
    mean_jct: float = 0.0
    p95_jct: float = 0.0
    utilisation: dict[str, dict[str, float]] = field(default_factory=dict)
    never: list[NeverPlaced] = field(default_factory=list)
    events: int = 0

    def mean_utilisation(self) -> dict[str, float]:
        """Resource -> mean utilisation over the nodes that have it."""
        sums: dict[str, list[float]] = {}
        for per_node in self.utilisation.values():
            for resource, share in per_node.items():
                sums.setdefault(resource, []).append(share)
        return {r: sum(v) / len(v) for r, v in sorted(sums.items())}

    def summary(self) -> dict[str, Any]:
        """The headline numbers."""
        started = sum(1 for t in self.tasks if t.start is not None)
        return {
            "policy": self.policy,
            "tasks": len(self.tasks),
            "started": started,
            "never_placed": len(self.tasks) - started,
            "makespan": round(self.makespan, 6),
            "mean_jct": round(self.mean_jct, 6),
            "p95_jct": round(self.p95_jct, 6),
            "mean_utilisation": {r: round(v, 4) for r, v in self.mean_utilisation().items()},
        }

    def to_dict(self, *, per_task: bool = True) -> dict[str, Any]:
        """JSON-ready data (per-task outcomes unless `per_task` is False)."""
        data = self.summary()
        data["utilisation"] = {
            n: {r: round(v, 4) for r, v in u.items()} for n, u in self.utilisation.items()
        }
        data["never"] = [n.to_dict() for n in self.never]
        if per_task:
            data["per_task"] = [t.to_dict() for t in self.tasks]
        return data


def _noop() -> None:
    return None


class _Creates:
    """Task body that creates resources on its own node (a plan task's `creates`)."""

    def __init__(self, creates: Mapping[str, float]) -> None:
        self.creates = dict(creates)
        self.__name__ = "creates"

    def __call__(self) -> None:
        backend = current_backend()
        for label, capacity in self.creates.items():
            backend.set_resource(label, capacity, None)


def replay_backend(state: ClusterState) -> MemoryBackend:
    """A virtual-clock memory backend with `state`'s nodes and ephemeral labels, in order."""
    nodes: dict[str, Any] = {}
    for node in state.nodes.values():
        if node.alive:
            nodes[node.id] = {"resources": node.physical.to_dict(), "labels": dict(node.labels)}
    if not nodes:
        raise ValidationError("the snapshot has no alive node: nothing to replay on.")
    backend = MemoryBackend(nodes, virtual_clock=True)
    for node in state.nodes.values():
        labels = {label: node.total[label] for label in node.ephemeral if label in node.total}
        if node.alive and labels:
            backend.set_resources(labels, node.id)
    return backend


def _hold_in_use(backend: MemoryBackend, state: ClusterState, hold: float | None) -> None:
    """A stand-in task per node holds what running tasks hold in `state`."""
    for index, node in enumerate(n for n in state.nodes.values() if n.alive):
        used = node.total - node.available
        if not used:
            continue
        pin = _HOLD_LABEL.format(index)
        backend.set_resource(pin, 1, node.id)
        duration = MAX_CAPACITY if hold is None else hold
        ref = backend.launch(TaskSpec(fn=_noop, resources=used + {pin: 1}, duration=duration))
        backend.set_resource(pin, 0, node.id)
        if not ref.started():  # pragma: no cover - the snapshot is self-consistent
            raise ValidationError(f"the snapshot's use on {node.id} does not fit its totals.")


@dataclass
class _Replica:
    seq: int
    timing: int
    replica: int
    arrival: float
    duration: float
    user: str
    request: Resources
    ref: TaskRef | None = None  # dropped once it finished (100,000s of handles slow GC)
    finish: float | None = None
    node: str | None = None
    dispatched: bool = False


class _Dispatcher:
    """Hands arrived tasks to the backend in a queueing ordering's order (see module doc)."""

    def __init__(self, ordering: Ordering, launch: Callable[[_Replica], TaskRef], pool: Resources):
        self.ordering = ordering
        self.launch = launch
        self.totals = dict(pool)
        self.free = dict(pool)
        self.queues: dict[str, deque[_Replica]] = {}
        self.alloc: dict[str, dict[str, float]] = {}

    def arrive(self, replica: _Replica) -> None:
        self.queues.setdefault(replica.user, deque()).append(replica)
        self.alloc.setdefault(replica.user, {})
        self.dispatch()

    def _managed(self, request: Resources) -> dict[str, float]:
        return {r: q for r, q in request.items() if r in self.totals}

    def done(self, replica: _Replica) -> None:
        if not replica.dispatched:
            return
        alloc = self.alloc[replica.user]
        for r, q in self._managed(replica.request).items():
            self.free[r] += q
            alloc[r] -= q
        self.dispatch()

    def dispatch(self) -> None:
        active = {u for u, q in self.queues.items() if q}
        key = self.ordering.key
        while active:
            user = min(
                active, key=lambda u: (*key(self.alloc[u], self.totals, self.queues[u][0].seq), u)
            )
            head = self.queues[user][0]
            need = self._managed(head.request)
            if not _covers(self.totals, need):  # never fits the pool: the backend says why
                self.queues[user].popleft()
                self.launch(head)
                if not self.queues[user]:
                    active.discard(user)
                continue
            if not _covers(self.free, need):
                if self.ordering.strict:
                    return
                active.discard(user)
                continue
            self.queues[user].popleft()
            head.dispatched = True
            alloc = self.alloc[user]
            for r, q in need.items():
                self.free[r] -= q
                alloc[r] = alloc.get(r, 0.0) + q
            self.launch(head)
            if not self.queues[user]:
                active.discard(user)


def _covers(have: Mapping[str, float], need: Mapping[str, float]) -> bool:
    return all(have.get(r, 0.0) + 1e-9 >= q for r, q in need.items())


def _percentile(values: Sequence[float], share: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def replay(
    workload: Workload,
    state: ClusterState,
    policy: str = BACKEND_POLICY,
    *,
    hold: float | None = None,
) -> Report:
    """Replay `workload` from `state` under `policy` (see the module doc).

    Args:
        workload: The plan with arrivals and durations.
        state: The snapshot to start from.
        policy: ``"backend"`` or a queueing ordering (``"fifo"``, ``"drf"``, ...).
        hold: Seconds the snapshot's running tasks keep what they hold (None: all along).

    Raises:
        ValidationError: an unknown policy, or a snapshot with no alive node.
    """
    if policy not in POLICIES:
        raise ValidationError(f"unknown policy {policy!r}; use one of {list(POLICIES)}.")
    backend = replay_backend(state)
    try:
        return _run(workload, state, policy, hold, backend)
    finally:
        backend.close()


def _replicas(workload: Workload) -> list[_Replica]:
    rows = []
    for t_index, timing in enumerate(workload.timings):
        request = timing.task.resources
        for i, (arrival, duration) in enumerate(
            zip(timing.arrivals, timing.durations, strict=True)
        ):
            rows.append(_Replica(0, t_index, i, arrival, duration, timing.user, request))
    rows.sort(key=lambda r: r.arrival)  # stable: file order among equal arrivals
    for seq, row in enumerate(rows):
        row.seq = seq
    return rows


def _run(
    workload: Workload,
    state: ClusterState,
    policy: str,
    hold: float | None,
    backend: MemoryBackend,
) -> Report:
    _hold_in_use(backend, state, hold)
    for resource in workload.plan.resources:
        backend.set_resource(resource.label, resource.capacity, resource.node_spec)
    clock = backend.clock
    timings = workload.timings
    bodies: list[Callable[[], Any]] = [
        _Creates({c.label: c.capacity for c in t.task.creates}) if t.task.creates else _noop
        for t in timings
    ]
    rows = _replicas(workload)
    dispatcher: _Dispatcher | None = None

    def launch(row: _Replica) -> TaskRef:
        spec = TaskSpec(
            fn=bodies[row.timing],
            resources=row.request,
            name=timings[row.timing].task.name,
            duration=row.duration,
        )
        row.ref = ref = backend.launch(spec)
        ref.add_done_callback(lambda done: finished(row, done))
        return ref

    def finished(row: _Replica, ref: TaskRef) -> None:
        if ref.started():
            row.finish, row.node, row.ref = clock.now(), ref.node_id, None
        if dispatcher is not None:
            dispatcher.done(row)

    if policy != BACKEND_POLICY:
        pool = _pool(backend.get_cluster_state())
        dispatcher = _Dispatcher(ORDERINGS[policy], launch, pool)
        arrive: Callable[[_Replica], Any] = dispatcher.arrive
    else:
        arrive = launch
    now = clock.now()
    for row in rows:
        clock.call_later(row.arrival - now, lambda row=row: arrive(row))  # type: ignore[misc]
    before = getattr(clock, "events_run", 0)
    backend.run(MAX_CAPACITY / 2 if hold is None else None)
    report = _report(policy, workload, rows, backend, now)
    report.events = getattr(clock, "events_run", 0) - before
    return report


def _pool(state: ClusterState) -> Resources:
    """The node-defined resources free now, pooled over the nodes."""
    pool = Resources()
    for node in state.nodes.values():
        physical = {n: q for n, q in node.available.items() if n not in node.ephemeral}
        pool = pool + physical
    return pool


def _outcome(row: _Replica, timing: Any, origin: float) -> TaskOutcome:
    if row.finish is None:
        return TaskOutcome(
            timing.task.name, row.replica, row.user, timing.job, row.arrival, None, None, None
        )
    finish = row.finish - origin
    return TaskOutcome(
        timing.task.name,
        row.replica,
        row.user,
        timing.job,
        row.arrival,
        finish - row.duration,
        finish,
        row.node,
    )


def _report(
    policy: str, workload: Workload, rows: list[_Replica], backend: MemoryBackend, origin: float
) -> Report:
    outcomes = [_outcome(row, workload.timings[row.timing], origin) for row in rows]
    jobs: dict[str, list[float]] = {}
    unfinished: set[str] = set()
    busy: dict[str, dict[str, float]] = {}
    for row, outcome in zip(rows, outcomes, strict=True):
        if outcome.finish is None or outcome.node is None:
            unfinished.add(outcome.job)
            continue
        span = jobs.setdefault(outcome.job, [outcome.arrival, outcome.finish])
        span[0], span[1] = min(span[0], outcome.arrival), max(span[1], outcome.finish)
        per_node = busy.setdefault(outcome.node, {})
        for r, q in row.request.items():
            per_node[r] = per_node.get(r, 0.0) + q * row.duration
    makespan = max((o.finish for o in outcomes if o.finish is not None), default=0.0)
    jcts = [end - begin for job, (begin, end) in jobs.items() if job not in unfinished]
    report = Report(policy, outcomes, makespan)
    report.mean_jct = sum(jcts) / len(jcts) if jcts else 0.0
    report.p95_jct = _percentile(jcts, 0.95)
    for node_id, node in backend.get_cluster_state().nodes.items():
        used = busy.get(node_id, {})
        report.utilisation[node_id] = {
            r: (used.get(r, 0.0) / (total * makespan) if makespan > 0 else 0.0)
            for r, total in node.physical.items()
            if total > 0
        }
    report.never = _never(rows, workload.timings, backend)
    return report


def _never(
    rows: list[_Replica], timings: Sequence[Any], backend: MemoryBackend
) -> list[NeverPlaced]:
    stuck: dict[int, list[_Replica]] = {}
    for row in rows:
        if row.finish is None:
            stuck.setdefault(row.timing, []).append(row)
    if not stuck:
        return []
    explainer = Explainer(backend)
    found = []
    for index, group in sorted(stuck.items()):
        sample = group[0]
        name = timings[index].task.name
        if sample.ref is not None:
            result = explainer.explain(sample.ref)
        else:
            result = explainer.request(sample.request, name)
        found.append(NeverPlaced(name, len(group), result))
    return found


def what_if(
    workload: Workload,
    state: ClusterState,
    policies: Sequence[str] = (BACKEND_POLICY,),
    *,
    hold: float | None = None,
) -> list[Report]:
    """Replay `workload` from `state` once per policy; one `Report` each, in order.

    Args:
        workload: The plan with arrivals and durations (`Workload.load`).
        state: The snapshot to start from (e.g. ``backend.get_cluster_state()``).
        policies: Names from `POLICIES` ("backend", "fifo", "drf", ...).
        hold: Seconds the snapshot's running tasks keep what they hold (None: all along).

    Raises:
        ValidationError: an unknown policy, or a snapshot with no alive node.
    """
    for name in policies:
        if name not in POLICIES:
            raise ValidationError(f"unknown policy {name!r}; use one of {list(POLICIES)}.")
    return [replay(workload, state, name, hold=hold) for name in policies]
