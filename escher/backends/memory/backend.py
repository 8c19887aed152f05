"""The in-memory backend: simulated nodes, a real resource matcher, real or virtual time."""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from escher.backends import checked_options
from escher.backends.base import Backend, Capability
from escher.backends.memory._matcher import Matcher
from escher.backends.memory._queue import PendingQueue
from escher.backends.memory._virtual import VirtualClock
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState, Node
from escher.core.context import current_task, running_task
from escher.core.errors import (
    BackendError,
    ConfigError,
    GetTimeoutError,
    NodeDiedError,
    NotInTaskError,
    ReservedResourceError,
    UnknownNodeError,
    UnschedulableError,
    ValidationError,
    did_you_mean,
)
from escher.core.fit import gang_fit, node_defined
from escher.core.nodespec import NodeSpec
from escher.core.resources import Resources, resource_suggestions, validate_quantity
from escher.core.task import RetryCause, Status, StatusCode, TaskRef, TaskSpec, task_error

log = logging.getLogger("escher.memory")

#: The cluster you get with no configuration: four nodes of 4 CPUs and 16 GiB.
DEFAULT_NODES: dict[str, dict[str, float]] = {
    f"node-{i}": {"CPU": 4, "memory": 16 * 2**30} for i in range(1, 5)
}


@dataclass
class _Running:
    ref: TaskRef
    node_id: str
    request: Resources
    attempt: int


class _WordedWhenRead(Status):
    """An UNSCHEDULABLE status whose reason is worded when first read.

    Waiting is the normal case (a co-location group's members wait for its label, queued
    tasks for room), and the reason's did-you-mean suggestions measure the edit distance to
    every resource name: done at each launch that waits, that cost grew with the number of
    labels (most of a 200-group co-location run). The names known at launch are kept.
    """

    def __init__(self, word: Callable[[], str]) -> None:
        object.__setattr__(self, "code", StatusCode.UNSCHEDULABLE)
        object.__setattr__(self, "_word", word)

    @functools.cached_property
    def reason(self) -> str:
        return self._word()  # type: ignore[attr-defined,no-any-return]


def _no_single_node(request: Resources) -> str:
    return f"no single node has {request.to_dict()} available"


def _none_has(missing: list[str], known: set[str]) -> str:
    meant = dict(resource_suggestions(missing, known))
    named = (f"{n} (did you mean {meant[n]!r}?)" if n in meant else n for n in missing)
    return "no node has " + ", ".join(named) + " available"


def _all_at_once() -> str:
    return "each member fits somewhere now, but not all at once"


def _gang_waits(size: int, detail: Callable[[], str]) -> str:
    return f"gang of {size} waits for room for all its members at once: {detail()}"


@dataclass
class _PendingGang:
    refs: list[TaskRef]
    seq: int = 0

    @property
    def shape(self) -> tuple[Resources, ...]:
        """The members' requests: gangs of one shape fit or fail alike on one cluster."""
        return tuple(ref.spec.resources for ref in self.refs)


class MemoryBackend(Backend):
    """Nodes simulated in this process; tasks are real Python callables.

    Args:
        nodes: Node id -> resources (``{"n1": {"CPU": 4}}``), or node id ->
            ``{"resources": {...}, "labels": {...}}``. Default: `DEFAULT_NODES`.
        virtual_clock: Simulate time: a task holds its resources for `TaskSpec.duration`
            simulated seconds, and waiting on a result advances the simulation.
        max_workers: Threads that run tasks in real-time mode.
        starvation_threshold: How many younger tasks may overtake a blocked one before
            it gets a reservation on the node closest to fitting it.
    """

    name = "memory"
    capabilities = (
        Capability.FRACTIONAL
        | Capability.ATOMIC_GANG
        | Capability.VIRTUAL_CLOCK
        | Capability.NODE_MEMBERSHIP
        | Capability.PYTHON_TASKS
    )

    @checked_options
    def __init__(
        self,
        nodes: Mapping[str, Any] | None = None,
        virtual_clock: bool = False,
        max_workers: int = 64,
        starvation_threshold: int = 32,
    ) -> None:
        parsed = _parse_nodes(DEFAULT_NODES if nodes is None else nodes)
        for option, value in (
            ("max_workers", max_workers),
            ("starvation_threshold", starvation_threshold),
        ):
            if value < 1:
                raise ConfigError(f"memory backend option {option} must be an int >= 1.")
        self._lock = threading.RLock()
        self._matcher = Matcher()
        for node_id, (resources, labels) in parsed.items():
            self._matcher.add_node(node_id, resources, labels)
        self._queue = PendingQueue(starvation_threshold)
        # waiting gangs, FIFO per shape (a pass tries one head per shape, oldest first)
        self._gangs: dict[tuple[Resources, ...], deque[_PendingGang]] = {}
        self._gang_seq = itertools.count()
        self._running: dict[str, _Running] = {}
        self._virtual = bool(virtual_clock)
        self._clock: Clock = VirtualClock() if self._virtual else RealClock()
        self._max_workers = max_workers
        self._body_run: _Running | None = None  # virtual clock: the body running now
        self._added_time: dict[str, float] = {}  # task id -> add_duration() seconds
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    @property
    def clock(self) -> Clock:
        return self._clock

    # --- ephemeral resources ------------------------------------------------------------
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> list[str]:
        return self._set_resources({label: capacity}, spec)

    def _set_resources(self, capacities: dict[str, float], spec: NodeSpec) -> list[str]:
        with self._lock:
            self._ensure_open()
            for label in capacities:
                if self._matcher.is_physical(label):
                    raise ReservedResourceError(
                        f"{label!r} is a resource the nodes define themselves; set_resource "
                        "only manages ephemeral labels. Pick another label."
                    )
            targets = self._select(spec)
            for node_id in targets:
                for label, capacity in capacities.items():
                    self._matcher.set_capacity(node_id, label, capacity)
            grew = any(capacity > 0 for capacity in capacities.values())
            started = self._place_locked() if grew else []
        self._start(started)
        return targets

    def _select(self, spec: NodeSpec) -> list[str]:
        nodes = self._matcher.nodes
        if spec.is_local:
            node_id = self.current_node_id()
            if node_id is None:
                raise NotInTaskError(
                    "node_spec=None means 'the node this task runs on', but the caller is not "
                    "a task of this backend. Pass a node id or a resource vector instead."
                )
            if node_id not in nodes:
                raise UnknownNodeError(f"this task's node {node_id!r} has left the cluster.")
            return [node_id]
        if spec.node_id is not None:
            if spec.node_id not in nodes:
                raise UnknownNodeError(
                    f"no node {spec.node_id!r} in the cluster.{did_you_mean(spec.node_id, nodes)}"
                )
            return [spec.node_id]
        if spec.having is not None:
            vector = spec.having
            chosen = sorted(nid for nid, rec in nodes.items() if rec.fits(vector))
        else:
            wanted = dict(spec.labels or {})
            chosen = sorted(
                nid
                for nid, rec in nodes.items()
                if all(rec.labels.get(k) == v for k, v in wanted.items())
            )
        return chosen if spec.num_nodes is None else chosen[: spec.num_nodes]

    def get_cluster_state(self) -> ClusterState:
        with self._lock:
            nodes = {
                rec.id: Node(
                    id=rec.id,
                    total=Resources._trusted(dict(rec.total)),
                    available=Resources._trusted(rec.available_vector()),
                    labels=dict(rec.labels),
                    alive=True,
                    ephemeral=frozenset(rec.ephemeral),
                )
                for rec in self._matcher
            }
            return ClusterState(nodes=nodes, time=self._clock.now())

    # --- tasks --------------------------------------------------------------------------
    def _new_ref(self, spec: TaskSpec) -> TaskRef:
        return TaskRef(
            spec, canceller=self._cancel, waiter=self._advance if self._virtual else None
        )

    def _launch(self, spec: TaskSpec) -> TaskRef:
        ref = self._new_ref(spec)
        with self._lock:
            self._ensure_open()
            if not self._matcher.physically_feasible(spec.resources):
                infeasible = self._infeasible(ref)
            else:
                infeasible = None
                self._queue.push(ref, spec.resources)
                started = self._place_locked()
                if ref.node_id is None:
                    ref.set_status(_WordedWhenRead(self._why(spec.resources)))
        if infeasible is not None:
            ref.set_exception(infeasible)
            return ref
        self._start(started)
        return ref

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        refs = [self._new_ref(spec) for spec in specs]
        with self._lock:
            self._ensure_open()
            why_not = self._gang_never_fits(refs)
            if why_not is None:
                gang = _PendingGang(refs, next(self._gang_seq))
                self._gangs.setdefault(gang.shape, deque()).append(gang)
                started = self._place_locked()
                waiting = [ref for ref in refs if ref.node_id is None]
                if waiting:
                    status = _WordedWhenRead(self._gang_why(refs))
                    for ref in waiting:
                        ref.set_status(status)
        if why_not is not None:
            self._fail_gang(refs, why_not)  # all or nothing: it never runs
            return refs
        self._start(started)
        return refs

    def _gang_never_fits(self, refs: list[TaskRef]) -> str | None:
        """Why no set of live nodes could ever hold the gang at once, or None (it may)."""
        defined = self._matcher.physical_names()
        fit = gang_fit(
            [node_defined(ref.spec.resources, defined) for ref in refs],
            {rec.id: rec.physical for rec in self._matcher},
        )
        return fit.reason if fit.possible is False else None

    def _gang_why(self, refs: list[TaskRef]) -> Callable[[], str]:
        blocked = next(
            (r.spec.resources for r in refs if self._matcher.find(r.spec.resources) is None), None
        )
        detail = self._why(blocked) if blocked is not None else _all_at_once
        return functools.partial(_gang_waits, len(refs), detail)

    def _drop_infeasible_gangs(self) -> list[tuple[list[TaskRef], str]]:
        """Take out the waiting gangs that no set of live nodes could hold any more."""
        dropped: list[tuple[list[TaskRef], str]] = []
        for shape, queue in list(self._gangs.items()):
            why_not = self._gang_never_fits(queue[0].refs)  # one shape fits or fails alike
            if why_not is not None:
                del self._gangs[shape]
                dropped.extend((gang.refs, why_not) for gang in queue)
        return dropped

    @staticmethod
    def _fail_gang(refs: list[TaskRef], why_not: str) -> None:
        for ref in refs:
            ref.set_status(Status(StatusCode.INFEASIBLE, why_not))
        for ref in refs:
            ref.set_exception(
                task_error(
                    f"its gang can never be placed: {why_not}. Ask for less or add nodes",
                    ref,
                    UnschedulableError,
                )
            )

    def _infeasible(self, ref: TaskRef) -> UnschedulableError:
        meant = resource_suggestions(ref.spec.resources, self._known_names())
        if meant:
            reason = f"no node can ever fit {ref.spec.resources.to_dict()}: " + "; ".join(
                f"no node has {name!r} (did you mean {match!r}?)" for name, match in meant
            )
            advice = ". Use the names the nodes have."
        else:
            reason = (
                f"no node can ever fit {ref.spec.resources.to_dict()}: node-defined "
                "resources exceed every node's capacity"
            )
            advice = ". Ask for less or add a larger node."
        ref.set_status(Status(StatusCode.INFEASIBLE, reason))
        return task_error(reason + advice, ref, UnschedulableError)

    def _known_names(self) -> set[str]:
        return {name for node in self._matcher.nodes.values() for name in node.total}

    def _why(self, request: Resources) -> Callable[[], str]:
        """Why `request` waits, worded when first read (see `_WordedWhenRead`)."""
        free = self._matcher._free
        missing = [name for name in request if name not in free]
        if not missing:
            return functools.partial(_no_single_node, request)
        return functools.partial(_none_has, missing, self._known_names())  # a fresh set

    def _place_locked(self) -> list[_Running]:
        """Place what fits now (gangs first, then the queue); record them as running."""
        placed: list[tuple[TaskRef, str, Resources]] = []
        # Gangs of one shape fit or fail alike, and placing only takes room: once a shape's
        # oldest gang fails, its younger ones would too, so a pass stops that shape there.
        heads = [(queue[0].seq, shape) for shape, queue in self._gangs.items()]
        heapq.heapify(heads)
        while heads:
            _, shape = heapq.heappop(heads)
            queue = self._gangs[shape]
            spots = self._fit_gang(queue[0].refs)
            if spots is None:
                continue
            placed.extend(spots)
            queue.popleft()
            if queue:
                heapq.heappush(heads, (queue[0].seq, shape))
            else:
                del self._gangs[shape]
        placed.extend((e.ref, nid, e.request) for e, nid in self._queue.schedule(self._matcher))
        runs = []
        for ref, node_id, request in placed:
            ref.set_running(node_id)
            run = _Running(ref, node_id, request, ref.attempts)
            self._running[ref.id] = run
            runs.append(run)
        return runs

    def _fit_gang(self, refs: list[TaskRef]) -> list[tuple[TaskRef, str, Resources]] | None:
        taken: list[tuple[TaskRef, str, Resources]] = []
        for ref in refs:
            node_id = self._matcher.find(ref.spec.resources)
            if node_id is None:
                for _, nid, request in taken:
                    self._matcher.release(nid, request)
                return None
            self._matcher.allocate(node_id, ref.spec.resources)
            taken.append((ref, node_id, ref.spec.resources))
        return taken

    def _start(self, runs: list[_Running]) -> None:
        for run in runs:
            if self._virtual:
                self._clock.call_later(0.0, functools.partial(self._run_virtual, run))
            else:
                if self._executor is None:
                    with self._lock:
                        if self._executor is None:
                            self._executor = ThreadPoolExecutor(
                                self._max_workers, thread_name_prefix="escher-task"
                            )
                self._executor.submit(self._run_real, run)

    def _call(self, run: _Running) -> tuple[Any, BaseException | None]:
        spec = run.ref.spec
        assert spec.fn is not None
        with running_task(self, run.node_id):
            try:
                return spec.fn(*spec.args, **spec.kwargs), None
            except BaseException as exc:  # the task's own failure goes to its caller
                return None, exc

    def _run_real(self, run: _Running) -> None:
        if self._running.get(run.ref.id) is not run:
            return  # its node left before a thread was free: the attempt was retried or failed
        value, error = self._call(run)
        self._complete(run, value, error)

    def _run_virtual(self, run: _Running) -> None:
        if self._running.get(run.ref.id) is not run:
            return
        previous, self._body_run = self._body_run, run
        try:
            value, error = self._call(run)
        finally:
            self._body_run = previous
        extra = self._added_time.pop(run.ref.id, 0.0)

        def finish() -> None:
            self._complete(run, value, error)

        self._clock.call_later((run.ref.spec.duration or 0.0) + extra, finish)

    def add_duration(self, seconds: float) -> None:
        """Virtual clock, inside a task body: the task holds its resources `seconds` longer.

        For cost models that depend on where the task landed (e.g. fetching input that lives
        on another node), which the declared `duration` cannot know at launch.

        Raises:
            BackendError: not on a virtual clock.
            NotInTaskError: not called from the body of one of this backend's tasks.
            ValidationError: `seconds` is negative or not finite.
        """
        if not self._virtual:
            raise BackendError("add_duration() needs the virtual clock (virtual_clock=True).")
        run = self._body_run
        if run is None:
            raise NotInTaskError("add_duration() is only meaningful inside a task body.")
        seconds = validate_quantity(seconds, what="seconds")
        self._added_time[run.ref.id] = self._added_time.get(run.ref.id, 0.0) + seconds

    def _complete(self, run: _Running, value: Any, error: BaseException | None) -> None:
        ref = run.ref
        with self._lock:
            if self._running.get(ref.id) is not run:
                return  # its node died and the attempt was retried or failed already
            del self._running[ref.id]
            self._matcher.release(run.node_id, run.request)
            retry = error is not None and ref.retry(
                RetryCause.RAISED, f"retrying after {type(error).__name__}"
            )
            if retry:
                self._queue.push(ref, run.request, front=True)
            started = self._place_locked()
        if not retry:
            if error is None:
                ref.set_result(value)
            else:
                ref.set_exception(error)
        self._start(started)

    def _cancel(self, ref: TaskRef) -> bool:
        with self._lock:
            victims = [ref] if self._queue.remove(ref, self._matcher) else []
            for shape, queue in list(self._gangs.items()):
                for gang in list(queue):
                    if ref in gang.refs:
                        queue.remove(gang)
                        victims = list(gang.refs)
                if not queue:
                    del self._gangs[shape]
            started = self._place_locked() if victims else []
        for victim in victims:
            victim.set_cancelled()
        self._start(started)
        return bool(victims)

    def _advance(self, ref: TaskRef, timeout: float | None) -> None:
        """Virtual time: run the simulation until `ref` is done, idle, or `timeout` passes."""
        clock = self._clock
        assert isinstance(clock, VirtualClock)
        deadline = None if timeout is None else clock.now() + timeout
        while not ref.done():
            if not clock.pending():
                if timeout is None:
                    raise GetTimeoutError(
                        f"the simulation is idle and task {ref.name!r} is still "
                        f"{ref.state.value} ({ref.status}): it can never finish."
                    )
                clock.run_until(deadline)
                return
            if deadline is not None and clock._heap[0][0] > deadline:
                clock.run_until(deadline)
                return
            clock.step()

    def run(self, until: float | None = None) -> None:
        """Virtual time: run the simulation until `until` (or until no event is left)."""
        if not isinstance(self._clock, VirtualClock):
            raise BackendError("run() needs the virtual clock (virtual_clock=True).")
        self._clock.run_until(until)

    def current_node_id(self) -> str | None:
        """The node of the task running on this thread, if it is one of this backend's."""
        context = current_task()
        return context.node_id if context is not None and context.backend is self else None

    # --- membership ---------------------------------------------------------------------
    def add_node(
        self,
        node_id: str,
        resources: dict[str, float],
        labels: dict[str, str] | None = None,
    ) -> None:
        """Add an idle node with node-defined `resources` and `labels`."""
        parsed = _parse_nodes({node_id: {"resources": resources, "labels": labels or {}}})
        with self._lock:
            self._ensure_open()
            if node_id in self._matcher.nodes:
                raise ValidationError(f"node {node_id!r} is already in the cluster.")
            self._matcher.add_node(node_id, *parsed[node_id])
            started = self._place_locked()
        self._start(started)

    def remove_node(self, node_id: str) -> None:
        """Remove a node: its ephemeral resources vanish; its tasks are retried or fail."""
        failed: list[tuple[TaskRef, BaseException]] = []
        with self._lock:
            if node_id not in self._matcher.nodes:
                raise UnknownNodeError(
                    f"no node {node_id!r} in the cluster."
                    f"{did_you_mean(node_id, self._matcher.nodes)}"
                )
            self._matcher.remove_node(node_id)
            for run in [r for r in self._running.values() if r.node_id == node_id]:
                del self._running[run.ref.id]
                if run.ref.retry(RetryCause.NODE_LOST, f"node {node_id} left; retrying"):
                    self._queue.push(run.ref, run.request, front=True)
                else:
                    failed.append(
                        (
                            run.ref,
                            task_error(f"node {node_id} left the cluster", run.ref, NodeDiedError),
                        )
                    )
            for entry in self._queue:
                if not self._matcher.physically_feasible(entry.request):
                    self._queue.remove(entry.ref, self._matcher)
                    failed.append((entry.ref, self._infeasible(entry.ref)))
            gangs = self._drop_infeasible_gangs()
            started = self._place_locked()
        for ref, error in failed:
            ref.set_exception(error)
        for refs, why_not in gangs:
            self._fail_gang(refs, why_not)
        self._start(started)

    # --- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:
        """Cancel queued tasks and stop accepting new ones; running ones finish."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queued = [e.ref for e in self._queue]
            for ref in queued:
                self._queue.remove(ref, self._matcher)
            queued += [ref for queue in self._gangs.values() for g in queue for ref in g.refs]
            self._gangs.clear()
        for ref in queued:
            ref.set_cancelled()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        if isinstance(self._clock, RealClock):
            self._clock.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise BackendError("this memory backend is closed; call escher.init() again.")

    def pending_count(self) -> int:
        """Tasks waiting for resources (queued tasks and gang members)."""
        with self._lock:
            gangs = sum(len(g.refs) for queue in self._gangs.values() for g in queue)
            return len(self._queue) + gangs

    def running_count(self) -> int:
        """Tasks holding resources now."""
        with self._lock:
            return len(self._running)


def _parse_nodes(raw: Mapping[str, Any]) -> dict[str, tuple[Resources, dict[str, str]]]:
    """Validate the `nodes` option into id -> (resources, labels)."""
    if isinstance(raw, Sequence) and not isinstance(raw, str):
        try:
            raw = {item["id"]: item for item in raw}
        except (TypeError, KeyError):
            raise ConfigError("nodes: a list of nodes needs an 'id' in every entry.") from None
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(
            "nodes must be a non-empty mapping of node id -> resources, e.g. {'n1': {'CPU': 4}}."
        )
    parsed: dict[str, tuple[Resources, dict[str, str]]] = {}
    for node_id, value in raw.items():
        if not isinstance(node_id, str) or not node_id:
            raise ConfigError(f"nodes: node ids must be non-empty strings, got {node_id!r}.")
        if not isinstance(value, Mapping):
            raise ConfigError(f"nodes.{node_id}: expected a mapping of resources.")
        if "resources" in value or "labels" in value:
            extra = set(value) - {"resources", "labels", "id"}
            if extra:
                raise ConfigError(f"nodes.{node_id}: unknown key(s) {sorted(extra)}.")
            resources, labels = value.get("resources") or {}, value.get("labels") or {}
        else:
            resources, labels = value, {}
        try:
            parsed[node_id] = (Resources(resources), {str(k): str(v) for k, v in labels.items()})
        except (ValidationError, AttributeError) as exc:
            raise ConfigError(f"nodes.{node_id}: {exc}") from None
    return parsed
