"""A random-operations stress workload over the backend-neutral API, with live invariant checks.

Many threads issue seeded random operations against one backend: `set_resource`,
`set_resources` (by node id, and with vector selectors), `launch` (varied requests, retries,
failing bodies), `get` with short timeouts, `cancel`, `get_cluster_state`, and, when the
backend can, atomic gangs (`launch_gang`) and node loss (`remove_node` / `add_node`, or the
hooks of a `NodeChurn`). Every task body reports when it starts and ends and on which node,
and the workload checks while it runs (see `escher.testing._stress_check`):

* **no over-commit**: the bodies running on a node at once never hold more CPU or more of a
  label than the node has (labels resized while tasks run are checked against the largest
  capacity they may have had since the task was launched: shrinking below use is allowed);
* **no task lost**: every handle ends in a final state within `drain_timeout` after the
  operations stop; a FINISHED task ran to its end and returned its own value; a task that
  `cancel()` said would never run did not;
* **nothing run twice**: a body never runs more often than escher started the task
  (`TaskRef.attempts`), and a task that was never retried runs once;
* **no gang half-placed**: the members of a gang all started or none did;
* **no hang**: every wait is bounded; an API call that takes longer than `op_timeout` and
  every handle still not final after the drain is reported, with its status;
* **nothing leaked**: once every task is final, every node's available CPU and fixed labels
  are back to their totals; snapshots never show available above total.

Task bodies report in the driver's memory when the backend runs them in the driver's
process (the in-memory backend), and otherwise by appending to files in a temporary
directory, which a monitor thread reads while the run goes on; so the backend's nodes must
run on this machine (as in the conformance suite).

Example (the in-memory backend, the size CI runs)::

    from escher.backends.memory import MemoryBackend
    from escher.testing.stress import StressConfig, run_stress

    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 4} for i in range(4)})
    report = run_stress(backend, StressConfig(threads=16, operations=10_000, seed=1))
    report.assert_ok()            # AssertionError listing every problem
    print(report.summary())       # operations, tasks, over-commits, lost, doubled, hung

Other backends run it at a size that fits CI, from their tests in ``tests/chaos/``::

    report = run_stress(
        backend,
        StressConfig(threads=4, operations=60, seed=7, drain_timeout=180, max_hold=0.05),
        churn=MyNodeChurn(cluster),   # optional: add and kill nodes the way the cluster can
    )
    report.assert_ok()

A `NodeChurn` adds a node that may be killed (`add`) and kills it (`kill`); backends with
`Capability.NODE_MEMBERSHIP` get one by default (`add_node` / `remove_node` of nodes the
workload adds itself; the nodes it was given are never removed). The workload needs at
least one alive node with a CPU; it creates its own labels (prefixed ``st<run id>-``) and
deletes them at the end.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
import shutil
import tempfile
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from escher import api
from escher.backends.base import Backend, Capability
from escher.core.errors import EscherError, TaskError, UnsupportedError, ValidationError
from escher.core.resources import EPSILON, Resources, validate_quantity
from escher.core.task import TaskRef, TaskSpec, TaskState
from escher.testing._stress_check import Checker

__all__ = ["NodeChurn", "StressConfig", "StressReport", "run_stress", "stress_body"]

#: Relative frequency of each operation (those a backend cannot do are left out).
DEFAULT_WEIGHTS: Mapping[str, float] = {
    "launch": 30.0,
    "get": 20.0,
    "cancel": 8.0,
    "set_resource": 12.0,
    "set_resources": 6.0,
    "select": 4.0,
    "state": 10.0,
    "gang": 3.0,
    "node_loss": 0.5,
}


@dataclass(frozen=True)
class StressConfig:
    """How big and how long a stress run is.

    Attributes:
        threads: Threads issuing operations at once.
        operations: Operations per thread (the run does threads x operations in all).
        seed: Seeds every thread's choices (thread i uses seed * 1000 + i).
        time_limit: Seconds after which threads stop issuing operations (the report says
            `stopped_early`).
        drain_timeout: Seconds every task gets to reach a final state once operations stop.
        op_timeout: An API call slower than this is reported as hung.
        max_get_timeout: The `timeout` of a `get` operation is drawn from [0, this].
        max_hold: A task body sleeps a random time in [0, this].
        churn_labels: Labels resized while tasks request them.
        fixed_labels: Labels set once on the given nodes and never changed.
        gangs: Launch atomic gangs when the backend has Capability.ATOMIC_GANG.
        node_loss: Kill and add nodes (NODE_MEMBERSHIP or a `NodeChurn`).
        spare_nodes: Nodes the workload keeps added for killing, at most.
        weights: Operation name -> relative frequency (default `DEFAULT_WEIGHTS`).
        fail_fast: Stop issuing operations at the first invariant violation.
        report_via: How task bodies report: "auto" (in the driver's memory when the
            backend runs them in this process, else files) or "files".
    """

    threads: int = 16
    operations: int = 1000
    seed: int = 0
    time_limit: float = 600.0
    drain_timeout: float = 120.0
    op_timeout: float = 60.0
    max_get_timeout: float = 0.05
    max_hold: float = 0.005
    churn_labels: int = 4
    fixed_labels: int = 2
    gangs: bool = True
    node_loss: bool = True
    spare_nodes: int = 2
    weights: Mapping[str, float] | None = None
    fail_fast: bool = True
    report_via: str = "auto"

    def __post_init__(self) -> None:
        for name in ("threads", "operations", "churn_labels", "fixed_labels", "spare_nodes"):
            value = getattr(self, name)
            low = 1 if name in ("threads", "churn_labels") else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValidationError(
                    f"StressConfig.{name} must be an int >= {low}, got {value!r}."
                )
        for name in ("time_limit", "drain_timeout", "op_timeout", "max_get_timeout", "max_hold"):
            validate_quantity(getattr(self, name), what=f"StressConfig.{name}")
        if self.report_via not in ("auto", "files"):
            raise ValidationError(
                f"StressConfig.report_via must be 'auto' or 'files', got {self.report_via!r}."
            )


class NodeChurn:
    """How the workload adds a node it may kill, and kills it.

    The default uses `Backend.add_node` / `remove_node` (Capability.NODE_MEMBERSHIP) with
    nodes of 2 CPUs. Subclass it for clusters that change membership their own way (a Ray
    worker started and killed, a Kubernetes node deleted).
    """

    cpus: float = 2.0

    def add(self, backend: Backend, name: str) -> str | None:
        """Add a node with `cpus` CPUs; return its id (None: cannot add one now)."""
        backend.add_node(name, {"CPU": self.cpus})
        return name

    def kill(self, backend: Backend, node_id: str) -> None:
        """Make `node_id` leave the cluster as a failure would."""
        backend.remove_node(node_id)


@dataclass
class StressReport:
    """What a stress run did and found. `ok` is True when no invariant broke.

    Attributes:
        backend: The backend's name.
        threads: Threads that issued operations.
        operations: Operations issued in all.
        by_kind: Operation name -> how many were issued.
        tasks: Tasks launched (gang members included).
        final: Final state -> number of tasks (finished, failed, cancelled).
        runs: Task bodies that started (retries and at-least-once reruns included).
        nodes_killed: Nodes the workload removed.
        errors: Escher error type -> how many operations raised it (expected ones, e.g. a
            `get` that timed out, a node that was just removed).
        over_commits: Starts that exceeded a node's capacity.
        lost: Tasks whose handle says FINISHED without a run that ended, or with another
            task's value, or FAILED for no reason escher gives.
        doubled: Tasks whose body ran more often than escher started them.
        ran_cancelled: Tasks that ran although `cancel()` said they never would (a task
            whose retry was cancelled may have run in the attempts before).
        half_placed: Gangs with some members started and others never.
        hung: API calls slower than `op_timeout`, and handles not final after the drain.
        raw_errors: Exceptions from escher calls that are not escher errors.
        bad_states: Snapshots with available above total or non-finite numbers.
        leaked: Resources still in use after every task ended.
        elapsed: Seconds the whole run took.
        stopped_early: True if the time limit or a violation stopped the operations.
    """

    backend: str
    threads: int
    operations: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    tasks: int = 0
    final: dict[str, int] = field(default_factory=dict)
    runs: int = 0
    nodes_killed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    over_commits: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    doubled: list[str] = field(default_factory=list)
    ran_cancelled: list[str] = field(default_factory=list)
    half_placed: list[str] = field(default_factory=list)
    hung: list[str] = field(default_factory=list)
    raw_errors: list[str] = field(default_factory=list)
    bad_states: list[str] = field(default_factory=list)
    leaked: list[str] = field(default_factory=list)
    elapsed: float = 0.0
    stopped_early: bool = False

    _PROBLEMS = (
        "over_commits",
        "lost",
        "doubled",
        "ran_cancelled",
        "half_placed",
        "hung",
        "raw_errors",
        "bad_states",
        "leaked",
    )

    @property
    def ok(self) -> bool:
        """True if no invariant broke."""
        return not any(getattr(self, name) for name in self._PROBLEMS)

    def problems(self) -> list[str]:
        """Every violation, as ``"<kind>: <detail>"`` lines."""
        return [f"{name}: {item}" for name in self._PROBLEMS for item in getattr(self, name)]

    def summary(self) -> str:
        """One paragraph with the numbers."""
        counts = ", ".join(f"{len(getattr(self, n))} {n.replace('_', ' ')}" for n in self._PROBLEMS)
        final = ", ".join(f"{v} {k}" for k, v in sorted(self.final.items()))
        return (
            f"{self.backend}: {self.threads} threads, {self.operations} operations "
            f"({', '.join(f'{k} {v}' for k, v in sorted(self.by_kind.items()))}) in "
            f"{self.elapsed:.1f}s{' (stopped early)' if self.stopped_early else ''}; "
            f"{self.tasks} tasks ({final}), {self.runs} runs, {self.nodes_killed} nodes killed; "
            f"{counts}."
        )

    def assert_ok(self, limit: int = 20) -> None:
        """Raise AssertionError with the summary and up to `limit` problems, if any."""
        if not self.ok:
            shown = self.problems()[:limit]
            raise AssertionError(self.summary() + "\n" + "\n".join(shown))


# --- the task body (module level: process-based backends pickle it by reference) --------
_SINKS: dict[str, Checker] = {}
_FILES: dict[str, int] = {}
_FILES_LOCK = threading.Lock()


def _record(sink: str, kind: str, key: str, token: str, node: str) -> None:
    checker = _SINKS.get(sink)
    if checker is not None:
        checker.event(kind, key, token, node)
        return
    with _FILES_LOCK:
        fd = _FILES.get(sink)
        if fd is None:
            path = os.path.join(sink, f"{os.getpid()}-{uuid.uuid4().hex[:6]}.log")
            fd = _FILES[sink] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, f"{kind}\t{time.monotonic()!r}\t{key}\t{token}\t{node}\n".encode())


def stress_body(sink: str, key: str, hold: float, fail: bool) -> str:
    """A stress task: report start and end (with the node), sleep `hold`, return `key`.

    Raises:
        ValueError: if `fail` (a task whose own code raises).
    """
    token = uuid.uuid4().hex[:12]
    node = api.node_id()
    _record(sink, "S", key, token, node)
    try:
        if hold > 0:
            time.sleep(hold)
        if fail:
            raise ValueError(f"stress task {key} fails on purpose")
        return key
    finally:
        _record(sink, "E", key, token, node)


def _pid() -> int:
    return os.getpid()


# --- the run ----------------------------------------------------------------------------
@dataclass
class _Task:
    key: str
    request: Resources
    fail: bool
    gang: int | None = None
    ref: TaskRef | None = None
    cancel_said: bool | None = None


@dataclass
class _Thread:
    index: int
    rng: random.Random
    refs: list[_Task] = field(default_factory=list)
    serial: int = 0
    current: tuple[str, float] | None = None


class _Stress:
    """One run: setup, the threads, the monitor, the drain and the final checks."""

    def __init__(self, backend: Backend, config: StressConfig, churn: NodeChurn | None) -> None:
        if backend.clock.virtual:
            raise UnsupportedError("the stress workload needs a real-time backend.")
        self.backend = backend
        self.config = config
        self.run_id = uuid.uuid4().hex[:6]
        self.report = StressReport(backend=backend.name, threads=config.threads)
        caps = backend.capabilities
        self.fractional = Capability.FRACTIONAL in caps
        if churn is None and Capability.NODE_MEMBERSHIP in caps:
            churn = NodeChurn()
        self.churn = churn if config.node_loss else None
        weights = dict(config.weights or DEFAULT_WEIGHTS)
        if not (config.gangs and backend.supports(Capability.ATOMIC_GANG)):
            weights.pop("gang", None)
        if self.churn is None:
            weights.pop("node_loss", None)
        self.kinds = [k for k, w in weights.items() if w > 0]
        self.weights = [weights[k] for k in self.kinds]
        self.lock = threading.Lock()
        self.tasks: dict[str, _Task] = {}
        self.gangs: list[list[_Task]] = []
        self.spares: list[str] = []
        self.threads: list[_Thread] = []
        self.stop = threading.Event()
        self.hung_ops: set[tuple[int, str, float]] = set()
        self.sink = ""
        self.sink_dir: str | None = None
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, bytes] = {}
        self._pending: list[tuple[float, str, str, str, str]] = []

    # --- setup ------------------------------------------------------------------------------
    def setup(self) -> None:
        state = self.backend.get_cluster_state()
        self.core = sorted(n for n, node in state.nodes.items() if node.alive)
        cpus = {n: state.nodes[n].physical.get("CPU", 0.0) for n in self.core}
        self.core = [n for n in self.core if cpus[n] >= 1]
        if not self.core:
            raise UnsupportedError("the stress workload needs an alive node with a CPU.")
        prefix = f"st{self.run_id}"
        self.churn_labels = [f"{prefix}-ch{i}" for i in range(self.config.churn_labels)]
        self.mark_labels = [f"{prefix}-mk{i}" for i in range(2)]
        fixed: dict[str, dict[str, float]] = {}
        for i in range(self.config.fixed_labels):
            label = f"{prefix}-fx{i}"
            nodes = {self.core[i % len(self.core)], self.core[(i + 1) % len(self.core)]}
            fixed[label] = {n: float(1 + i % 2) for n in nodes}
        self.fixed = fixed
        self.checker = Checker(fixed, frozenset(self.churn_labels))
        for node in self.core:
            self.checker.add_node(node, cpus[node])
        self.max_cpu = min(cpus.values())
        self.max_gang = max(2, min(3, int(sum(cpus.values()))))
        for label, where in fixed.items():
            for node, cap in where.items():
                self.backend.set_resource(label, cap, node)
        self._choose_sink()
        for _ in range(self.config.spare_nodes if self.churn else 0):
            self._add_spare()

    def _choose_sink(self) -> None:
        probe = self.backend.launch(TaskSpec(_pid, name="stress-probe"))
        here = probe.result(self.config.op_timeout) == os.getpid()
        if here and self.config.report_via == "auto":
            self.sink = f"mem:{self.run_id}"
            _SINKS[self.sink] = self.checker
        else:
            self.sink_dir = self.sink = tempfile.mkdtemp(prefix="escher-stress-")
            self.checker.keep_events = True

    def _add_spare(self) -> None:
        assert self.churn is not None
        name = f"st{self.run_id}-spare-{uuid.uuid4().hex[:6]}"
        self.checker.add_node(name, self.churn.cpus)
        node = self.churn.add(self.backend, name)
        if node is not None:
            if node != name:
                self.checker.add_node(node, self.churn.cpus)
            with self.lock:
                self.spares.append(node)

    # --- the threads --------------------------------------------------------------------------
    def run(self) -> StressReport:
        start = time.monotonic()
        self.setup()
        try:
            self._operate(start)
            self._drain()
            self._final_checks()
        finally:
            self._cleanup()
            self.report.elapsed = time.monotonic() - start
        return self.report

    def _operate(self, start: float) -> None:
        config = self.config
        self.deadline = start + config.time_limit
        self.threads = [
            _Thread(i, random.Random(config.seed * 1000 + i)) for i in range(config.threads)
        ]
        workers = [
            threading.Thread(target=self._worker, args=(t,), name=f"stress-{t.index}", daemon=True)
            for t in self.threads
        ]
        monitor = threading.Thread(target=self._monitor, name="stress-monitor", daemon=True)
        for worker in workers:
            worker.start()
        monitor.start()
        for worker in workers:
            worker.join(max(0.0, self.deadline - time.monotonic()) + config.op_timeout)
        self.stop.set()
        monitor.join(config.op_timeout)
        for t, worker in zip(self.threads, workers, strict=True):
            if worker.is_alive() and t.current is not None:
                op, since = t.current
                self._hung(t.index, op, since)

    def _worker(self, thread: _Thread) -> None:
        ops = {
            "launch": self._launch,
            "get": self._get,
            "cancel": self._cancel,
            "set_resource": self._set_resource,
            "set_resources": self._set_resources,
            "select": self._select,
            "state": self._state,
            "gang": self._gang,
            "node_loss": self._node_loss,
        }
        for _ in range(self.config.operations):
            if self.stop.is_set() or time.monotonic() > self.deadline:
                with self.lock:
                    self.report.stopped_early = True
                return
            kind = thread.rng.choices(self.kinds, self.weights)[0]
            thread.current = (kind, time.monotonic())
            try:
                ops[kind](thread)
            except EscherError as exc:
                self._count_error(exc)
            except Exception as exc:  # a raw error escaped an escher call
                self._raw(kind, exc)
            thread.current = None
            with self.lock:
                self.report.operations += 1
                self.report.by_kind[kind] = self.report.by_kind.get(kind, 0) + 1

    def _monitor(self) -> None:
        while not self.stop.wait(0.25):
            now = time.monotonic()
            for thread in self.threads:
                current = thread.current
                if current is not None and now - current[1] > self.config.op_timeout:
                    self._hung(thread.index, *current)
            if self.sink_dir is not None:
                self._read_files(now - 2.0)
            if self.config.fail_fast and self.checker.violations:
                with self.lock:
                    self.report.stopped_early = True
                self.stop.set()

    def _hung(self, index: int, op: str, since: float) -> None:
        with self.lock:
            if (index, op, since) not in self.hung_ops:
                self.hung_ops.add((index, op, since))
                self.report.hung.append(
                    f"thread {index}: {op} did not return within {self.config.op_timeout}s"
                )

    def _count_error(self, exc: EscherError) -> None:
        with self.lock:
            name = type(exc).__name__
            self.report.errors[name] = self.report.errors.get(name, 0) + 1

    def _raw(self, kind: str, exc: BaseException) -> None:
        where = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        with self.lock:
            self.report.raw_errors.append(f"{kind}: {where}")

    # --- operations ---------------------------------------------------------------------------
    def _key(self, thread: _Thread) -> str:
        thread.serial += 1
        return f"{thread.index}-{thread.serial}"

    def _request(self, rng: random.Random, gang: bool = False) -> Resources:
        values: dict[str, float] = {}
        cpu = rng.choice((0.0, 1.0, 1.0, 0.5 if self.fractional else 1.0))
        if not gang and self.max_cpu >= 2 and rng.random() < 0.1:
            cpu = 2.0
        if cpu:
            values["CPU"] = cpu
        if not gang and self.fixed and rng.random() < 0.3:
            values[rng.choice(sorted(self.fixed))] = 1.0
        if not gang and self.churn_labels and rng.random() < 0.3:
            values[rng.choice(self.churn_labels)] = 1.0
        return Resources(values)

    def _spec(self, task: _Task, rng: random.Random, retries: int, again: bool) -> TaskSpec:
        hold = rng.uniform(0.0, self.config.max_hold) if rng.random() < 0.5 else 0.0
        return TaskSpec(
            stress_body,
            (self.sink, task.key, hold, task.fail),
            resources=task.request,
            name=f"stress-{task.key}",
            max_retries=retries,
            retry_exceptions=again,
        )

    def _launch(self, thread: _Thread) -> None:
        rng = thread.rng
        fail = rng.random() < 0.05
        task = _Task(self._key(thread), self._request(rng), fail)
        spec = self._spec(task, rng, rng.choice((0, 0, 1)), fail and rng.random() < 0.5)
        self._register(task)
        task.ref = self.backend.launch(spec)
        thread.refs.append(task)

    def _register(self, task: _Task) -> None:
        with self.lock:
            self.tasks[task.key] = task
        self.checker.register(task.key, task.request, time.monotonic())

    def _gang(self, thread: _Thread) -> None:
        rng = thread.rng
        members = [
            _Task(self._key(thread), self._request(rng, gang=True), False)
            for _ in range(rng.randint(2, self.max_gang))
        ]
        specs = [self._spec(m, rng, 0, False) for m in members]
        with self.lock:
            gang = len(self.gangs)
            self.gangs.append(members)
        for member in members:
            member.gang = gang
            self._register(member)
        refs = self.backend.launch_gang(specs)
        for member, ref in zip(members, refs, strict=True):
            member.ref = ref
            thread.refs.append(member)

    def _pick(self, thread: _Thread) -> _Task | None:
        live = [t for t in thread.refs[-64:] if t.ref is not None]
        return thread.rng.choice(live) if live else None

    def _get(self, thread: _Thread) -> None:
        task = self._pick(thread)
        if task is None or task.ref is None:
            return
        timeout = thread.rng.uniform(0, self.config.max_get_timeout)
        try:
            value = api.get(task.ref, timeout=timeout)
        except EscherError:
            raise
        except ValueError as exc:
            if task.fail and "fails on purpose" in str(exc):
                return  # the task's own exception, as it should be
            raise
        if value != task.key:
            with self.lock:
                self.report.lost.append(f"task {task.key}: get returned {value!r}")

    def _cancel(self, thread: _Thread) -> None:
        task = self._pick(thread)
        if task is None or task.ref is None or task.cancel_said:
            return
        task.cancel_said = api.cancel(task.ref)

    def _node(self, rng: random.Random) -> str:
        with self.lock:
            pool = self.core + self.spares
        return rng.choice(pool)

    def _capacity(self, rng: random.Random) -> float:
        cap = float(rng.choice((0, 1, 1, 2, 3)))
        return cap + 0.5 if self.fractional and cap and rng.random() < 0.2 else cap

    def _write(self, node: str, capacities: dict[str, float], call: Callable[[], Any]) -> None:
        tokens = {
            label: self.checker.begin_write(node, label, c) for label, c in capacities.items()
        }
        try:
            call()
        finally:
            for label, index in tokens.items():
                self.checker.end_write(node, label, index)

    def _set_resource(self, thread: _Thread) -> None:
        rng = thread.rng
        node, label, cap = self._node(rng), rng.choice(self.churn_labels), self._capacity(rng)
        result: list[Sequence[str]] = []
        self._write(
            node, {label: cap}, lambda: result.append(self.backend.set_resource(label, cap, node))
        )
        self._check_targets("set_resource", result[0] if result else (), {node})

    def _set_resources(self, thread: _Thread) -> None:
        rng = thread.rng
        node = self._node(rng)
        labels = rng.sample(self.churn_labels, min(2, len(self.churn_labels)))
        capacities = {label: self._capacity(rng) for label in labels}
        result: list[Sequence[str]] = []
        self._write(
            node, capacities, lambda: result.append(self.backend.set_resources(capacities, node))
        )
        self._check_targets("set_resources", result[0] if result else (), {node})

    def _select(self, thread: _Thread) -> None:
        rng = thread.rng
        label = rng.choice(self.mark_labels)
        if rng.random() < 0.5 or not self.fixed:
            nodes = self.backend.set_resource(
                label, self._capacity(rng), {"CPU": 1}, num_nodes=rng.randint(1, 3)
            )
        else:
            selector = {rng.choice(sorted(self.fixed)): 1}
            nodes = self.backend.set_resources(
                {m: self._capacity(rng) for m in self.mark_labels}, selector
            )
        self._check_targets("selector write", nodes, self.checker.known_nodes())

    def _check_targets(self, what: str, nodes: Sequence[str], allowed: set[str]) -> None:
        if not isinstance(nodes, tuple) or not set(nodes) <= allowed:
            with self.lock:
                self.report.bad_states.append(f"{what} returned {nodes!r}")

    def _state(self, thread: _Thread) -> None:
        state = self.backend.get_cluster_state()
        problems = []
        for node_id, node in state.nodes.items():
            for name, total in node.total.items():
                free = node.available.get(name, 0.0)
                if not (0.0 <= free <= total + EPSILON) or total != total:
                    problems.append(f"{node_id}: {name} available {free} total {total}")
            extra = set(node.available) - set(node.total)
            if extra:
                problems.append(f"{node_id}: available without a total: {sorted(extra)}")
        if problems:
            with self.lock:
                self.report.bad_states.extend(problems[:5])

    def _node_loss(self, thread: _Thread) -> None:
        assert self.churn is not None
        with self.lock:
            if not self.spares:
                return
            victim = self.spares.pop(thread.rng.randrange(len(self.spares)))
            self.report.nodes_killed += 1
        self.checker.remove_node(victim)
        self.churn.kill(self.backend, victim)
        self._add_spare()

    # --- file sink ----------------------------------------------------------------------------
    def _read_files(self, upto: float | None) -> None:
        """Feed the body reports in the sink directory to the checker (up to `upto`)."""
        assert self.sink_dir is not None
        events = []
        for name in sorted(os.listdir(self.sink_dir)):
            path = os.path.join(self.sink_dir, name)
            with open(path, "rb") as handle:
                handle.seek(self._offsets.get(name, 0))
                data = self._partial.pop(name, b"") + handle.read()
                self._offsets[name] = handle.tell()
            lines = data.split(b"\n")
            if lines[-1]:
                self._partial[name] = lines[-1]
            for line in lines[:-1]:
                kind, ts, key, token, node = line.decode().split("\t")
                events.append((float(ts), kind, key, token, node))
        self._pending = sorted([*self._pending, *events])
        ready = [e for e in self._pending if upto is None or e[0] <= upto]
        self._pending = self._pending[len(ready) :]
        for when, kind, key, token, node in ready:
            self.checker.event(kind, key, token, node, when)

    # --- drain and final checks ----------------------------------------------------------------
    def _drain(self) -> None:
        """Give every churn label a home on every given node (so each request fits on a
        node that also has its fixed label), then wait (bounded) for every task to end."""
        homes = dict.fromkeys(self.churn_labels, 1.0)
        for home in self.core:
            self._write(home, homes, functools.partial(self.backend.set_resources, homes, home))
        deadline = time.monotonic() + self.config.drain_timeout
        for task in list(self.tasks.values()):
            if task.ref is not None:
                task.ref.wait(max(0.0, deadline - time.monotonic()))
        # every end was written before its task was settled: read everything now
        if self.sink_dir is not None:
            self._read_files(None)
            self.checker = self.checker.replay(self.checker.events)

    def _final_checks(self) -> None:
        report = self.report
        report.tasks = sum(1 for t in self.tasks.values() if t.ref is not None)
        report.over_commits = list(self.checker.violations)
        report.runs = sum(len(tokens) for tokens in self.checker.runs.values())
        final: Counter[str] = Counter()
        for task in self.tasks.values():
            if task.ref is None:
                continue
            final[task.ref.state.value] += 1
            self._check_task(task)
        report.final = dict(final)
        for members in self.gangs:
            started = [m.key for m in members if m.ref is not None and m.ref.started()]
            if started and len(started) != len(members):
                report.half_placed.append(f"gang {[m.key for m in members]}: started {started}")
        self._check_released()

    def _check_task(self, task: _Task) -> None:
        ref, report = task.ref, self.report
        assert ref is not None
        runs = len(self.checker.runs.get(task.key, ()))
        if not ref.done():
            report.hung.append(f"task {task.key} ({ref.id}) still {ref.state.value}: {ref.status}")
            return
        if runs > ref.attempts or (runs > 1 and ref.retries == 0):  # includes cancelled ones
            report.doubled.append(
                f"task {task.key}: body ran {runs} times, started {ref.attempts}, "
                f"retried {ref.retries}"
            )
        if ref.state is TaskState.CANCELLED:
            # a retry can be cancelled: the attempts before it may have run (at-least-once)
            if runs and not ref.attempts:
                report.ran_cancelled.append(f"task {task.key}: cancelled, ran {runs} times")
            return
        if task.cancel_said:
            report.ran_cancelled.append(f"task {task.key}: cancel() said True, {ref.state.value}")
        error = ref.exception(0)
        if ref.state is TaskState.FINISHED:
            if ref.result(0) != task.key or not self.checker.ended.get(task.key):
                report.lost.append(
                    f"task {task.key}: finished with {ref.result(0)!r} after {runs} runs"
                )
        elif not isinstance(error, TaskError) and not (task.fail and isinstance(error, ValueError)):
            report.lost.append(f"task {task.key}: failed with {error!r}")

    def _check_released(self) -> None:
        """Every node's CPU and fixed labels are free again (bounded wait for stragglers)."""
        deadline = time.monotonic() + min(30.0, self.config.drain_timeout)
        while True:
            state = self.backend.get_cluster_state()
            leaked = []
            for node_id, node in state.nodes.items():
                for name in ("CPU", *self.fixed):
                    total = node.total.get(name, 0.0)
                    if node.available.get(name, 0.0) + EPSILON < total:
                        leaked.append(
                            f"{node_id}: {name} available {node.available.get(name, 0.0)} "
                            f"of {total} after every task ended"
                        )
            if not leaked or time.monotonic() > deadline:
                self.report.leaked = leaked
                return
            time.sleep(0.1)

    def _cleanup(self) -> None:
        _SINKS.pop(self.sink, None)
        with _FILES_LOCK:
            fd = _FILES.pop(self.sink, None)
        if fd is not None:
            os.close(fd)
        if self.sink_dir is not None:
            shutil.rmtree(self.sink_dir, ignore_errors=True)
        labels = dict.fromkeys([*self.churn_labels, *self.mark_labels, *self.fixed], 0.0)
        try:
            for node in self.backend.get_cluster_state().nodes:
                with contextlib.suppress(EscherError):  # the node may be leaving
                    self.backend.set_resources(labels, node)
            if self.churn is not None:
                for node in list(self.spares):
                    self.churn.kill(self.backend, node)
        except EscherError:
            pass  # a closed backend: nothing left to clean


def run_stress(
    backend: Backend,
    config: StressConfig | None = None,
    *,
    churn: NodeChurn | None = None,
    **overrides: Any,
) -> StressReport:
    """Run the random-operations workload on `backend` and check the invariants as it runs.

    Args:
        backend: The backend under test (real time; at least one alive node with a CPU).
        config: Size and knobs (default `StressConfig()`); `overrides` replace fields.
        churn: How to add and kill nodes (default: `NodeChurn` on backends with
            Capability.NODE_MEMBERSHIP, else no node loss).
        **overrides: `StressConfig` fields, e.g. ``threads=4, operations=100``.

    Returns:
        A `StressReport`; ``report.assert_ok()`` fails with every problem found.

    Raises:
        UnsupportedError: a virtual-clock backend, or no node with a CPU.
    """
    config = replace(config or StressConfig(), **overrides)
    return _Stress(backend, config, churn).run()
