"""`RayBackend`: escher on a real Ray cluster."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from escher.backends import checked_options
from escher.backends.base import Backend, Capability, GarbageReport
from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._control import ControlActor, actor_options, head_node_id
from escher.backends.ray._entry import Entry, SplitRequest
from escher.backends.ray._gang import Gang, bundle_selector_supported
from escher.backends.ray._gangfit import gang_unfit_reason
from escher.backends.ray._garbage import LeaseKeeper, collect
from escher.backends.ray._gate import NodeAgents
from escher.backends.ray._ledger import LedgerStore
from escher.backends.ray._requests import RequestSplitter
from escher.backends.ray._resize import ResizeStore, probe_resize
from escher.backends.ray._state import NodeCache, is_node_defined, read_raw, wait_for
from escher.backends.ray._store import EphemeralStore
from escher.backends.ray._tasks import TaskTable
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState, Node
from escher.core.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    EscherError,
    NotInTaskError,
    ReservedResourceError,
    UnknownNodeError,
    UnschedulableError,
    UnsupportedError,
    did_you_mean,
)
from escher.core.nodespec import NodeSpec
from escher.core.resources import EPSILON, Resources, validate_label
from escher.core.task import Status, StatusCode, TaskRef, TaskSpec, task_error

MODES = ("auto", "resize", "ledger")
GANG_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")


class RayBackend(Backend):
    """Ephemeral resources and tasks on a Ray cluster.

    Two ways to hold ephemeral resources, chosen by `mode`:

    * ``"resize"``: real Ray custom resources, created, resized and deleted on a live node
      by the GCS call Ray's autoscaler uses; Ray's own scheduler matches tasks to them.
    * ``"ledger"``: a named detached actor keeps the table; tasks that request ephemeral
      units are granted a node by it and pinned there (`NodeAffinitySchedulingStrategy`).
    * ``"auto"`` (default): resize when this Ray has the call and it works (probed once on
      a live node), else ledger.

    Args:
        address: None starts a local Ray (or reuses one this process already started);
            ``"auto"``, ``"host:port"`` or ``"ray://host:10001"`` connects to a running
            cluster.
        namespace: Ray namespace of escher's control actor.
        prefix: Prefix of escher's Ray resource names, keeping them apart from the
            application's own custom resources (``grp`` becomes ``escher_grp`` in Ray).
        mode: ``"auto"``, ``"resize"`` or ``"ledger"``.
        timeout: Seconds every internal wait on Ray may take.
        gang_strategy: Placement-group strategy for `launch_gang` (``"PACK"``,
            ``"SPREAD"``, ``"STRICT_PACK"``, ``"STRICT_SPREAD"``).
        init_options: Extra keyword arguments for `ray.init` when this backend starts Ray
            (e.g. ``runtime_env``).
        share_writes: Resize mode: publish each write to the control actor, so that reads
            in every process see it at once (Ray's own view lags about 100 ms). False saves
            the synchronous sends; other processes then see a write when Ray's view catches
            up.
        lease_seconds: How long this session's lease lasts without renewal (it is renewed
            every sixth of it); `collect_garbage` removes what sessions whose lease expired
            left on the cluster.
    """

    name: ClassVar[str] = "ray"
    capabilities: ClassVar[Capability] = (
        Capability.FRACTIONAL | Capability.ATOMIC_GANG | Capability.PYTHON_TASKS
    )

    @checked_options
    def __init__(
        self,
        address: str | None = None,
        *,
        namespace: str = "escher",
        prefix: str = "escher_",
        mode: str = "auto",
        timeout: float = 60.0,
        gang_strategy: str = "PACK",
        init_options: Mapping[str, Any] | None = None,
        share_writes: bool = True,
        lease_seconds: float = 60.0,
    ) -> None:
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}.")
        if not prefix or is_node_defined(prefix):
            raise ConfigError(f"prefix must be a non-empty, non-reserved string; got {prefix!r}.")
        if gang_strategy not in GANG_STRATEGIES:
            raise ConfigError(
                f"unknown gang_strategy {gang_strategy!r}; use one of {GANG_STRATEGIES}."
            )
        if not lease_seconds > 0:
            raise ConfigError(f"lease_seconds must be a number > 0, got {lease_seconds!r}.")
        self._owns_ray = _connect(address, namespace, init_options)
        self._lease_seconds = float(lease_seconds)
        config = WorkerConfig(
            namespace=namespace,
            prefix=prefix,
            mode=self._resolve_mode(mode),
            control_name=f"escher-control-{prefix}",
            share_writes=share_writes,
            session_id=self.session_id,
            attach=RayBackend.attached,
        )
        self._setup(config, timeout=timeout, gang_strategy=gang_strategy, driver=True)

    @classmethod
    def attached(cls, config: WorkerConfig) -> RayBackend:
        """A backend for a worker process where Ray is already connected (tasks use it to
        call escher); it acts for the driver's session."""
        backend = cls.__new__(cls)
        backend._owns_ray = False
        backend._lease_seconds = 60.0
        backend.session_id = config.session_id or backend.session_id
        backend._setup(config, timeout=60.0, gang_strategy="PACK", driver=False)
        return backend

    @staticmethod
    def _resolve_mode(mode: str) -> str:
        import ray

        if mode == "ledger":
            return mode
        why_not = probe_resize()
        if mode == "auto":
            return "resize" if why_not is None else "ledger"
        if why_not is not None:
            raise BackendUnavailableError(
                f"mode='resize' needs Ray's in-place resize call, which Ray {ray.__version__} "
                f"lacks here ({why_not}); use mode='ledger' (or 'auto')."
            )
        return mode

    def _setup(
        self, config: WorkerConfig, *, timeout: float, gang_strategy: str, driver: bool
    ) -> None:
        self._config = config
        self._attached_to_worker = not driver
        self._prefix = config.prefix
        self._timeout = timeout
        self._gang_strategy = gang_strategy
        self._clock = RealClock()
        self._lock = threading.RLock()
        self._closed = False
        self._cache = NodeCache(config.prefix)
        self._splitter = RequestSplitter(self._cache)
        self._plans: dict[int, LaunchPlan] = {}  # id(request) -> its launch plan
        self._control_handle: Any = None
        self._store = self._make_store(config, timeout)
        self._agents = NodeAgents(config.prefix, config.namespace, timeout)
        self._table = TaskTable(
            session_id=self.session_id,
            config=config,
            store=self._store,
            timeout=timeout,
            explain_wait=self._explain_wait,
            nodes=self._cache,
            agents=self._agents,
            arm_nodes=driver,
        )
        self._lease: LeaseKeeper | None = None
        if driver:
            self.control()  # create it now: fail early, and not inside the first task
            self._table.arm_nodes()  # the start gate's node agents (they arm in the background)
            self._lease = LeaseKeeper(self.control, self.session_id, self._lease_seconds)
            self._lease.start()

    def _make_store(self, config: WorkerConfig, timeout: float) -> EphemeralStore:
        if config.mode == "resize":
            return ResizeStore(
                config.prefix,
                self.control,
                session_id=self.session_id,
                share_writes=config.share_writes,
                timeout=timeout,
                node_gone=lambda node: self._table.node_died(node),
            )
        return LedgerStore(
            self.control,
            self._splitter.candidates,
            session_id=self.session_id,
            timeout=timeout,
        )

    # --- properties --------------------------------------------------------------------
    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def mode(self) -> str:
        """The resolved mode: ``"resize"`` or ``"ledger"``."""
        return self._config.mode

    @property
    def prefix(self) -> str:
        """Prefix of escher's Ray resource names."""
        return self._prefix

    @property
    def attached_to_worker(self) -> bool:
        """True for the backend a Ray worker process builds to run escher tasks."""
        return self._attached_to_worker

    @property
    def store(self) -> EphemeralStore:
        """Where this backend keeps ephemeral resources (the mode's implementation)."""
        return self._store

    def ray_resource_name(self, label: str) -> str:
        """The Ray custom-resource name of ephemeral `label` (resize mode)."""
        return self._prefix + validate_label(label)

    # --- the control actor ---------------------------------------------------------------
    def control(self) -> Any:
        """The handle of escher's control actor (created on the head node if missing)."""
        if self._control_handle is not None:
            return self._control_handle
        import ray

        with self._lock:
            if self._control_handle is None:
                name, namespace = self._config.control_name, self._config.namespace
                handle: Any
                try:
                    handle = ray.get_actor(name, namespace=namespace)
                except ValueError:
                    handle = (
                        ray.remote(ControlActor)
                        .options(**actor_options(name, namespace, head_node_id() is not None))
                        .remote(namespace)
                    )
                try:
                    wait_for(handle.ping.remote(), self._timeout)
                except Exception as exc:
                    raise BackendUnavailableError(
                        f"escher's control actor {name!r} does not answer ({exc})."
                    ) from exc
                self._control_handle = handle
        return self._control_handle

    def flush_writes(self) -> None:
        """Make this process's writes visible to every process now (best effort)."""
        self._store.flush()

    # --- state -------------------------------------------------------------------------
    def get_cluster_state(self) -> ClusterState:
        read = self._store.begin_read()  # the store's read runs while Ray is read
        try:
            raw = read_raw()
        except Exception as exc:
            read.abandon()
            raise BackendError(f"cannot read the Ray cluster state: {exc}") from exc
        dead = self._cache.dead.snapshot(set(raw.total))
        for node in dead:  # seen dead by escher, not yet by Ray's control store
            raw.total.pop(node, None)
        labels = self._cache.labels(set(raw.total))
        try:
            ephemeral = read.finish(raw)
        except Exception as exc:
            raise BackendError(f"cannot read escher's ephemeral table: {exc}") from exc
        nodes: dict[str, Node] = {}
        for node_id, totals in raw.total.items():
            physical = self._cache.physical_part(totals)
            avail_raw = raw.available.get(node_id, {})
            avail = {k: min(float(avail_raw.get(k, 0.0)), v) for k, v in physical.items()}
            eph_total, eph_avail = ephemeral.get(node_id, ({}, {}))
            total = {**physical, **eph_total}
            avail.update(eph_avail)
            nodes[node_id] = Node(
                id=node_id,
                total=Resources._trusted({k: v for k, v in total.items() if v > EPSILON}),
                available=Resources._trusted({k: v for k, v in avail.items() if v > EPSILON}),
                labels=dict(labels.get(node_id, {})),
                alive=True,
                ephemeral=frozenset(eph_total),
            )
        return ClusterState(nodes=nodes, time=self._clock.now())

    @property
    def waits_for_labels(self) -> bool:
        """True if `wait_for_labels` really waits (resize mode, writes shared)."""
        return self._store.waits_for_labels

    def wait_for_labels(self, labels: Sequence[str], timeout: float) -> bool:
        """Block until every label of `labels` was just created (capacity > 0) on some node
        by any process, or `timeout` seconds passed; True if so.

        A cheap readiness signal for labels made for the occasion (one control-actor call
        that returns as soon as the writes arrive, instead of polling
        `get_cluster_state()`): `escher.esl.Gang` waits on it for its ghosts' labels.
        Tasks launched next that request one of them go straight to its node. Resize mode
        only; in ledger mode it returns False at once.
        """
        return self._store.wait_for_labels(labels, timeout)

    # --- ephemeral resources ---------------------------------------------------------
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
        return self._set_resources({label: capacity}, spec)

    def _set_resources(self, capacities: dict[str, float], spec: NodeSpec) -> Sequence[str]:
        """Choose the nodes once, then write every label of `capacities` on each of them in
        one update (one resize call per node, nodes concurrently; one actor call in ledger
        mode)."""
        targets = self._targets(spec, capacities)
        try:
            self._store.write({node: capacities for node in targets})
        except EscherError:
            raise
        except Exception as exc:  # Ray's own errors (actor died, RPC failed) as escher's
            raise BackendError(
                f"Ray failed to set {sorted(capacities)} on node(s) {targets}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        return targets

    def _targets(self, spec: NodeSpec, labels: Mapping[str, float]) -> list[str]:
        if spec.node_id is not None or spec.is_local:
            node = spec.node_id if spec.node_id is not None else self._caller_node()
            physical = self._cache.physical()
            if node not in physical:
                physical = self._cache.physical(fresh=True)
            if node not in physical:
                raise UnknownNodeError(
                    f"no alive Ray node {node!r}; read escher.get_cluster_state() for the ids."
                    + did_you_mean(node, physical)
                )
            self._check_not_node_defined(labels, {node: physical[node]})
            return [node]
        state = self.get_cluster_state()
        targets = spec.select(state)
        self._check_not_node_defined(labels, {n: state.nodes[n].physical for n in targets})
        return targets

    def _caller_node(self) -> str:
        node = self.current_node_id()
        if node is None:
            raise NotInTaskError(
                "node_spec=None means 'the node this task runs on', but the caller is not a "
                "task. Pass a node id or a resource vector instead."
            )
        return node

    @staticmethod
    def _check_not_node_defined(
        labels: Mapping[str, float], physical: Mapping[str, Resources]
    ) -> None:
        for node, res in physical.items():
            for label in labels:
                if label in res:
                    raise ReservedResourceError(
                        f"{label!r} is a resource node {node!r} defines itself; set_resource "
                        "only manages escher's ephemeral labels. Pick another label."
                    )

    def current_node_id(self) -> str | None:
        import ray

        if not ray.is_initialized():
            return None
        context = ray.get_runtime_context()
        if context.worker.mode != ray._private.worker.WORKER_MODE:
            return None
        return str(context.get_node_id())

    # --- launch ------------------------------------------------------------------------
    def _launch(self, spec: TaskSpec) -> TaskRef:
        self._check_open()
        if spec.fn is None:
            raise UnsupportedError(
                "the ray backend runs Python callables; container tasks need the kubernetes "
                "backend."
            )
        plan = self._plan_of(spec.resources)
        if plan is None:
            generation = self._cache.generation  # the view the split starts from
            request = self._splitter.split(spec.resources)
            entry = self._table.new_entry(spec, request)
            reason = self._splitter.infeasible_reason(request)
            if reason is not None:
                entry.set_status(Status(StatusCode.INFEASIBLE, reason))
                self._table.fail_unsubmitted(entry, task_error(reason, entry, UnschedulableError))
                return entry
            entry.set_status(self._remember_plan(spec.resources, request, generation).status)
        else:
            entry = self._table.new_entry_with(spec, plan.request, plan.options, plan.status)
        self._table.start(entry)
        return entry

    def _plan_of(self, resources: Resources) -> LaunchPlan | None:
        """What every launch of `resources` shares, if known for the current node view (a
        stale view is re-read behind, as a split does)."""
        self._cache.physical()
        plan = self._plans.get(id(resources))
        if plan is None or plan.resources is not resources:
            return None
        return plan if plan.generation == self._cache.generation else None

    def _remember_plan(
        self, resources: Resources, request: SplitRequest, generation: int
    ) -> LaunchPlan:
        """The plan of a feasible request just split from node view `generation` (kept
        while the view stays that one)."""
        if not request.labels:
            status = _QUEUED
        elif self.mode == "resize":
            status = _queued_for(tuple(request.labels.items()))
        else:
            status = _PENDING  # ledger mode: the store says what it waits for
        plan = LaunchPlan(
            resources=resources,
            request=request,
            options=self._table.options_of(request),
            status=status,
            generation=generation,
        )
        if len(self._plans) >= _MAX_PLANS:
            self._plans.clear()
        self._plans[id(resources)] = plan  # the plan keeps `resources`: the id stays valid
        return plan

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        self._check_open()
        if any(spec.fn is None for spec in specs):
            raise UnsupportedError("the ray backend runs Python callables, not container tasks.")
        requests = [self._splitter.split(spec.resources) for spec in specs]
        mixed = any(r.labels and r.physical for r in requests)
        if self.mode == "ledger" and mixed and not bundle_selector_supported():
            raise UnsupportedError(
                "in ledger mode on this Ray a gang member cannot request both ephemeral "
                "labels and node-defined resources (its placement-group bundle cannot be "
                "pinned to the node of its units); use escher.esl.Gang."
            )
        entries = [self._table.new_entry(s, r) for s, r in zip(specs, requests, strict=True)]
        reason = next(filter(None, map(self._splitter.infeasible_reason, requests)), None)
        if reason is None:
            reason = gang_unfit_reason(
                [r.physical for r in requests], self._cache.physical(), self._gang_strategy
            )
        if reason is not None:
            for entry in entries:
                entry.ref.set_status(Status(StatusCode.INFEASIBLE, f"a gang member: {reason}"))
                self._table.fail_unsubmitted(
                    entry, task_error(f"a gang member: {reason}", entry.ref, UnschedulableError)
                )
            return [e.ref for e in entries]
        for entry in entries:
            entry.ref.set_status(Status(StatusCode.PENDING, "waiting for its gang to be placed"))
        Gang(
            self._table,
            self._store,
            self._cache,
            entries,
            strategy=self._gang_strategy,
            closed=lambda: self._closed,
        ).start()
        return [e.ref for e in entries]

    def _explain_wait(self, entry: Entry) -> str:
        """What a task put back in line waits for (its status after a failed attempt)."""
        labels = entry.request.labels
        if not labels:
            return "queued in Ray's scheduler"
        try:
            state = self.get_cluster_state()
        except Exception:
            return f"waiting for {sorted(labels)}"
        missing = sorted(label for label in labels if not state.holding(label))
        if missing:
            return (
                f"waiting for label(s) {missing}, which no live node holds now (a policy or "
                "set_resource must create them again)"
            )
        return f"waiting for a node with {labels} available"

    # --- introspection -------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        import ray

        facts = super().describe()
        facts.update(self._store.describe())
        facts.update(
            {
                "ray_version": ray.__version__,
                "namespace": self._config.namespace,
                "prefix": self._prefix,
                "session_id": self.session_id,
            }
        )
        return facts

    def describe_task(self, ref: TaskRef) -> dict[str, Any]:
        entry = self._table.entry_of(ref)
        facts: dict[str, Any] = {"node": ref.node_id, "mode": self.mode}
        if entry is None:
            return facts
        facts["node"] = ref.node_id or entry.where or entry.node
        facts.update(self._table.describe(entry))
        facts.update(self._store.describe_task(entry))
        return {k: v for k, v in facts.items() if v is not None}

    def collect_garbage(self, *, dry_run: bool = False) -> GarbageReport:
        """Remove the ephemeral resources of sessions whose lease expired (resize mode: Ray
        custom resources; ledger mode: the table's entries); never a live session's."""
        try:
            return collect(
                self.control,
                self._store,
                self._prefix,
                self._agents,
                dry_run=dry_run,
                timeout=self._timeout,
            )
        except EscherError:
            raise
        except Exception as exc:
            raise BackendError(
                f"garbage collection on Ray failed: {type(exc).__name__}: {exc}"
            ) from exc

    # --- lifecycle ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("this RayBackend is closed; call escher.init() again.")

    def close(self) -> None:
        if self._closed:
            return
        self._table.close()
        self._closed = True
        self._store.close()
        if self._lease is not None:
            self._lease.stop(self._timeout)
        if self._owns_ray:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()

    def __repr__(self) -> str:
        return f"<RayBackend mode={self.mode!r} prefix={self._prefix!r}>"


#: The status of a task without labels handed to Ray.
_QUEUED = Status(StatusCode.PENDING, "queued in Ray's scheduler")
#: The status of a task not handed to Ray yet.
_PENDING = Status(StatusCode.PENDING)
#: Launch plans kept at most (emptied when full).
_MAX_PLANS = 1024


@dataclass(frozen=True, slots=True)
class LaunchPlan:
    """What every launch of one request shares while the node view stays the same: its
    split, its Ray options, that it is feasible, and the status it starts with (so a launch
    of a request seen before neither splits nor checks it again).

    Attributes:
        resources: The request (kept, so that its id names it while the plan lives).
        request: Its split for Ray.
        options: The Ray options of every attempt.
        status: The handle's first status.
        generation: The node view (`NodeCache.generation`) it was made for.
    """

    resources: Resources
    request: SplitRequest
    options: dict[str, Any]
    status: Status
    generation: int


@functools.lru_cache(maxsize=1024)
def _queued_for(labels: tuple[tuple[str, float], ...]) -> Status:
    """The status of a task requesting `labels` handed to Ray (resize mode)."""
    return Status(StatusCode.PENDING, f"queued in Ray's scheduler for {dict(labels)}")


def _connect(address: str | None, namespace: str, init_options: Mapping[str, Any] | None) -> bool:
    """Connect this process to Ray (start a local one for address None); True if it did."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - the registry reports it first
        raise BackendUnavailableError(
            f"the ray backend needs Ray ({exc}): pip install 'escher-sched[ray]'"
        ) from exc
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"namespace": namespace, "log_to_driver": False}
    if address is None:
        kwargs["include_dashboard"] = False
    kwargs.update(init_options or {})
    try:
        ray.init(address=address, **kwargs)
    except Exception as exc:
        raise BackendUnavailableError(
            f"cannot start or reach Ray at {address or 'a new local instance'}: {exc}"
        ) from exc
    return True


__all__ = ["GANG_STRATEGIES", "MODES", "RayBackend"]
