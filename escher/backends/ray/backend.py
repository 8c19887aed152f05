"""`RayBackend`: escher on a real Ray cluster."""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from escher.backends.base import Backend, Capability
from escher.backends.ray._control import ControlActor, actor_options
from escher.backends.ray._ledger import LedgerQueue, Waiting
from escher.backends.ray._resize import (
    RAY_MAX_CAPACITY,
    TESTED_RAY_VERSIONS,
    ResizeStore,
    resize_call,
)
from escher.backends.ray._runner import CANCELLED, WorkerConfig, run_task
from escher.backends.ray._state import NodeCache, is_node_defined, ray_up, read_raw, wait_for
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState, Node
from escher.core.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    NodeDiedError,
    ReservedResourceError,
    TaskFailedError,
    UnknownNodeError,
    UnschedulableError,
    UnsupportedError,
    did_you_mean,
)
from escher.core.nodespec import NodeSpec
from escher.core.resources import EPSILON, MAX_CAPACITY, Resources, validate_label
from escher.core.task import RetryCause, Status, StatusCode, TaskRef, TaskSpec, task_error

MODES = ("auto", "resize", "ledger")
_SYNC_PERIOD = 0.1
#: Seconds a read's knowledge of freshly written labels is used for placement hints.
_HINT_SECONDS = 1.0


@dataclass
class _Entry:
    """A launched task this process tracks until it settles."""

    ref: TaskRef
    spec: TaskSpec
    ephemeral: dict[str, float]  # ledger mode: units held while it runs
    options: dict[str, Any]
    object_ref: Any = None
    node: str | None = None  # ledger mode: the granted node
    gang: Any = None
    extras: dict[str, Any] = field(default_factory=dict)


class RayBackend(Backend):
    """Ephemeral resources and tasks on a Ray cluster.

    Two ways to hold ephemeral resources, chosen by `mode`:

    * ``"resize"``: real Ray custom resources, created, resized and deleted on a live node
      by the GCS call Ray's autoscaler uses; Ray's own scheduler matches tasks to them.
    * ``"ledger"``: a named detached actor keeps the table; tasks that request ephemeral
      units are granted a node by it and pinned there (`NodeAffinitySchedulingStrategy`).
    * ``"auto"`` (default): resize when this Ray has the call and is a tested version.

    Args:
        address: None starts a local Ray (or reuses one this process already started);
            ``"auto"`` or ``"host:port"`` connects to a running cluster.
        namespace: Ray namespace of escher's control actor.
        prefix: Prefix of escher's Ray resource names, keeping them apart from the
            application's own custom resources (``grp`` becomes ``escher_grp`` in Ray).
        mode: ``"auto"``, ``"resize"`` or ``"ledger"``.
        timeout: Seconds every internal wait on Ray may take.
        gang_strategy: Placement-group strategy for `launch_gang` (``"PACK"``,
            ``"SPREAD"``, ``"STRICT_PACK"``, ``"STRICT_SPREAD"``).
        init_options: Extra keyword arguments for `ray.init` when this backend starts Ray.
        share_writes: Resize mode: publish each write to the control actor, so that reads
            in every process see it at once (Ray's own view lags about 100 ms). False saves
            that call (about 0.1-0.5 ms per write); other processes then see a write when
            Ray's view catches up.
    """

    name: ClassVar[str] = "ray"
    capabilities: ClassVar[Capability] = (
        Capability.FRACTIONAL | Capability.ATOMIC_GANG | Capability.PYTHON_TASKS
    )

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
    ) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - the registry reports it first
            raise BackendUnavailableError(
                f"the ray backend needs Ray ({exc}): pip install 'escher-sched[ray]'"
            ) from exc
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}.")
        if not isinstance(prefix, str) or not prefix or is_node_defined(prefix):
            raise ConfigError(f"prefix must be a non-empty, non-reserved string; got {prefix!r}.")
        if gang_strategy not in ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"):
            raise ConfigError(f"unknown gang_strategy {gang_strategy!r}.")
        self._owns_ray = False
        if not ray.is_initialized():
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
            self._owns_ray = True
        self._setup(
            WorkerConfig(
                namespace=namespace,
                prefix=prefix,
                mode=self._resolve_mode(mode),
                control_name=f"escher-control-{prefix}",
                share_writes=share_writes,
            ),
            timeout=timeout,
            gang_strategy=gang_strategy,
            driver=True,
        )

    @classmethod
    def _attached(cls, config: WorkerConfig) -> RayBackend:
        """A backend for a worker process where Ray is already connected."""
        backend = cls.__new__(cls)
        backend._owns_ray = False
        backend._setup(config, timeout=60.0, gang_strategy="PACK", driver=False)
        return backend

    @staticmethod
    def _resolve_mode(mode: str) -> str:
        import ray

        has_resize = resize_call() is not None
        if mode == "auto":
            return "resize" if has_resize and ray.__version__ in TESTED_RAY_VERSIONS else "ledger"
        if mode == "resize" and not has_resize:
            raise BackendUnavailableError(
                f"Ray {ray.__version__} has no GcsClient.resize_raylet_resource_instances; "
                "use mode='ledger' (or 'auto')."
            )
        return mode

    def _setup(
        self, config: WorkerConfig, *, timeout: float, gang_strategy: str, driver: bool
    ) -> None:
        import ray

        self._config = config
        self._attached_to_worker = not driver
        self._prefix = config.prefix
        self._timeout = timeout
        self._gang_strategy = gang_strategy
        self._clock = RealClock()
        self._driver_id = uuid.uuid4().hex[:12]
        self._keys = itertools.count(1)
        self._lock = threading.RLock()
        self._entries: dict[str, _Entry] = {}
        self._done_keys: list[str] = []
        self._closed = False
        self._cache = NodeCache(config.prefix)
        self._control_handle: Any = None
        self._remote = ray.remote(run_task)
        self._resize = (
            ResizeStore(
                config.prefix, self._control, share_writes=config.share_writes, timeout=timeout
            )
            if config.mode == "resize"
            else None
        )
        self._ledger = (
            LedgerQueue(self._control, self._candidates, timeout)
            if config.mode == "ledger"
            else None
        )
        self._completions: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._settler: threading.Thread | None = None
        self._sync_thread: threading.Thread | None = None
        self._in_task = threading.local()
        self._fresh_labels: tuple[float, dict[str, list[str]]] = (-1e9, {})
        if driver:
            self._control()  # create it now: fail early, and not inside the first task

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

    def ray_resource_name(self, label: str) -> str:
        """The Ray custom-resource name of ephemeral `label` (resize mode)."""
        return self._prefix + validate_label(label)

    # --- the control actor ---------------------------------------------------------------
    def _control(self) -> Any:
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
                    here = ray.get_runtime_context().get_node_id()
                    handle = (
                        ray.remote(ControlActor)
                        .options(**actor_options(name, namespace, here))
                        .remote()
                    )
                wait_for(handle.ping.remote(), self._timeout)
                self._control_handle = handle
        return self._control_handle

    # --- state -------------------------------------------------------------------------
    def get_cluster_state(self) -> ClusterState:
        # Resize mode: ask the control actor for recent writes first, read Ray meanwhile.
        pending = self._resize.start_recent() if self._resize is not None else None
        try:
            raw = read_raw()
        except Exception as exc:
            if pending is not None:
                pending.result(0.0)  # gives unsent writes back to the outbox
            raise BackendError(f"cannot read the Ray cluster state: {exc}") from exc
        labels = self._cache.labels(set(raw.total))
        if self._ledger is not None:
            ephemeral_total, ephemeral_used = self._ledger_table(set(raw.total))
        nodes: dict[str, Node] = {}
        recent = pending.result(self._timeout) if pending is not None else {}
        for node_id, totals in raw.total.items():
            physical = self._cache.physical_part(totals)
            avail_raw = raw.available.get(node_id, {})
            avail = {k: min(float(avail_raw.get(k, 0.0)), v) for k, v in physical.items()}
            if self._resize is not None:
                eph_total, eph_avail = self._resize_view(totals, avail_raw, recent.get(node_id))
            else:
                eph_total = dict(ephemeral_total.get(node_id, {}))
                used = ephemeral_used.get(node_id, {})
                eph_avail = {k: max(0.0, v - used.get(k, 0.0)) for k, v in eph_total.items()}
            total = dict(physical)
            total.update(eph_total)
            avail.update(eph_avail)
            nodes[node_id] = Node(
                id=node_id,
                total=Resources._trusted({k: v for k, v in total.items() if v > EPSILON}),
                available=Resources._trusted({k: v for k, v in avail.items() if v > EPSILON}),
                labels=dict(labels.get(node_id, {})),
                alive=True,
                ephemeral=frozenset(eph_total),
            )
        if self._resize is not None:
            self._note_fresh_labels(recent, nodes)
        return ClusterState(nodes=nodes, time=self._clock.now())

    @property
    def waits_for_labels(self) -> bool:
        """True if `wait_for_labels` really waits (resize mode, writes shared)."""
        return self._resize is not None and self._config.share_writes

    def wait_for_labels(self, labels: Sequence[str], timeout: float) -> bool:
        """Block until every label of `labels` was just created (capacity > 0) on some node
        by any process, or `timeout` seconds passed; True if so.

        A cheap readiness signal for labels made for the occasion (one control-actor call
        that returns as soon as the writes arrive, instead of polling
        `get_cluster_state()`): `escher.esl.Gang` waits on it for its ghosts' labels.
        Tasks launched next that request one of them go straight to its node (see
        `_placement_hint`). Resize mode only; in ledger mode it returns False at once.
        """
        if self._resize is None or not self.waits_for_labels:
            return False
        names = {self.ray_resource_name(label): label for label in labels}
        try:
            self._flush_writes()
            ref = self._control().written.remote(list(names), self._resize.window, timeout)
            where = wait_for(ref, timeout + self._timeout)
        except Exception:
            return False
        if where is None:
            return False
        at, known = self._fresh_labels
        if time.monotonic() - at > _HINT_SECONDS:
            known = {}
        self._fresh_labels = (
            time.monotonic(),
            {**known, **{names[name]: list(nodes) for name, nodes in where.items()}},
        )
        return True

    def _note_fresh_labels(
        self, recent: dict[str, dict[str, float]], nodes: dict[str, Node]
    ) -> None:
        """Remember where labels written in the overlay window are (see `_placement_hint`)."""
        cut = len(self._prefix)
        fresh = {name[cut:] for writes in recent.values() for name in writes}
        where: dict[str, list[str]] = {}
        for node_id, node in nodes.items():
            for label in node.ephemeral & fresh:
                where.setdefault(label, []).append(node_id)
        self._fresh_labels = (time.monotonic(), where)

    def _placement_hint(self, ephemeral: Mapping[str, float]) -> str | None:
        """Resize mode: the one node holding every label of `ephemeral`, if they were all
        written so recently that Ray's scheduler view may not show them yet (a gang
        member's label, a follower of a task that marked its node).

        Such a task is sent straight to that node's raylet (soft node affinity), whose view
        of its own resources is current, instead of waiting in the local raylet until Ray's
        resource broadcast (about 100 ms) shows the label. Soft: if the label is gone, Ray
        schedules the task as usual."""
        at, where = self._fresh_labels
        if not ephemeral or time.monotonic() - at > _HINT_SECONDS:
            return None
        candidates: set[str] | None = None
        for label in ephemeral:
            nodes = set(where.get(label, ()))
            candidates = nodes if candidates is None else candidates & nodes
        if candidates is None or len(candidates) != 1:
            return None
        return next(iter(candidates))

    def _resize_view(
        self,
        totals: Mapping[str, float],
        avail_raw: Mapping[str, float],
        overlay: dict[str, float] | None,
    ) -> tuple[dict[str, float], dict[str, float]]:
        prefix, cut = self._prefix, len(self._prefix)
        gcs = {k: float(v) for k, v in totals.items() if k.startswith(prefix)}
        current = {**gcs, **(overlay or {})}
        eph_total: dict[str, float] = {}
        eph_avail: dict[str, float] = {}
        for name, total in current.items():
            if total <= EPSILON:
                continue
            in_use = max(0.0, gcs.get(name, 0.0) - float(avail_raw.get(name, 0.0)))
            if name not in gcs:
                in_use = 0.0
            if total >= RAY_MAX_CAPACITY:  # stored clamped: it was set as unbounded
                total = MAX_CAPACITY
            eph_total[name[cut:]] = total
            eph_avail[name[cut:]] = min(total, max(0.0, total - in_use))
        return eph_total, eph_avail

    def _ledger_table(
        self, alive: set[str]
    ) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:

        _, totals, used = wait_for(self._control().table.remote(), self._timeout)
        if set(totals) - alive or set(used) - alive:
            self._control().purge.remote(sorted(alive))
        return totals, used

    # --- ephemeral resources ---------------------------------------------------------
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
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
            targets = [node]
            self._check_not_node_defined(label, {node: physical[node]})
        else:
            state = self.get_cluster_state()
            targets = spec.select(state)
            self._check_not_node_defined(label, {n: state.nodes[n].physical for n in targets})
        for node in targets:
            self._apply(node, label, capacity)
        return targets

    def _caller_node(self) -> str:
        from escher.core.errors import NotInTaskError

        node = self.current_node_id()
        if node is None:
            raise NotInTaskError(
                "node_spec=None means 'the node this task runs on', but the caller is not a "
                "task. Pass a node id or a resource vector instead."
            )
        return node

    def _check_not_node_defined(self, label: str, physical: Mapping[str, Resources]) -> None:
        for node, res in physical.items():
            if label in res:
                raise ReservedResourceError(
                    f"{label!r} is a resource node {node!r} defines itself; set_resource only "
                    "manages escher's ephemeral labels. Pick another label."
                )

    def _apply(self, node: str, label: str, capacity: float) -> None:
        if self._resize is not None:
            self._resize.apply(node, label, capacity)
            return

        wait_for(self._control().set.remote(node, label, capacity), self._timeout)
        assert self._ledger is not None
        self._ledger.poke()

    def current_node_id(self) -> str | None:
        import ray

        if not ray.is_initialized():
            return None
        context = ray.get_runtime_context()
        if context.worker.mode != ray._private.worker.WORKER_MODE:
            return None
        return str(context.get_node_id())

    # --- requests ----------------------------------------------------------------------
    def _split(
        self, request: Resources
    ) -> tuple[dict[str, Any], dict[str, float], dict[str, float]]:
        """Ray task options; the ephemeral units the ledger must grant (ledger mode, else
        empty: in resize mode they are Ray resources in the options); the ephemeral labels
        requested (escher's names, either mode)."""
        options: dict[str, Any] = {"num_cpus": request.get("CPU", 0.0)}
        if request.get("GPU"):
            options["num_gpus"] = request["GPU"]
        if request.get("memory"):
            options["memory"] = int(request["memory"])
        custom: dict[str, float] = {}
        ephemeral: dict[str, float] = {}
        app = self._cache.app_names()
        for name, quantity in request.items():
            if name in ("CPU", "GPU", "memory"):
                continue
            if name in app or is_node_defined(name) or not _is_label(name):
                custom[name] = quantity
            else:
                ephemeral[name] = quantity
        labels = ephemeral
        if self._resize is not None:
            custom.update({self._prefix + k: q for k, q in ephemeral.items()})
            ephemeral = {}
        if custom:
            options["resources"] = custom
        return options, ephemeral, labels

    def _physical_request(self, request: Resources) -> Resources:
        app = self._cache.app_names()
        return Resources._trusted(
            {
                k: q
                for k, q in request.items()
                if k in ("CPU", "GPU", "memory")
                or k in app
                or is_node_defined(k)
                or not _is_label(k)
            }
        )

    def _candidates(self, physical: Resources) -> list[str]:
        """Alive nodes whose node-defined totals could fit `physical`, in id order."""
        return sorted(n for n, res in self._cache.physical().items() if physical.fits_in(res))

    def _infeasible_reason(self, request: Resources) -> str | None:
        physical = self._physical_request(request)
        if not physical:
            return None
        if self._candidates(physical):
            return None
        self._cache.refresh()
        if self._candidates(self._physical_request(request)):
            return None
        return (
            f"no node of the Ray cluster has {physical.to_dict()} in total, so the request "
            "can never be placed; ask for less or add a bigger node."
        )

    # --- launch ------------------------------------------------------------------------
    def _new_ref(self, spec: TaskSpec) -> tuple[str, TaskRef]:
        key = f"{self._driver_id}:{next(self._keys)}"
        ref = TaskRef(spec, canceller=lambda r: self._cancel(key, r))
        return key, ref

    def _launch(self, spec: TaskSpec) -> TaskRef:
        self._check_open()
        if spec.fn is None:
            raise UnsupportedError(
                "the ray backend runs Python callables; container tasks need the kubernetes "
                "backend."
            )
        key, ref = self._new_ref(spec)
        reason = self._infeasible_reason(spec.resources)
        if reason is not None:
            ref.set_status(Status(StatusCode.INFEASIBLE, reason))
            ref.set_exception(task_error(reason, ref, UnschedulableError))
            return ref
        options, ephemeral, labels = self._split(spec.resources)
        options["max_retries"] = spec.max_retries
        options["retry_exceptions"] = spec.retry_exceptions
        if self._resize is not None:
            hint = self._placement_hint(labels)
            if hint is not None:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(hint, soft=True)
        entry = _Entry(ref=ref, spec=spec, ephemeral=ephemeral, options=options)
        with self._lock:
            self._entries[key] = entry
        if ephemeral:
            self._queue_for_units(key, entry)
        else:
            ref.set_status(Status(StatusCode.PENDING, "queued in Ray's scheduler"))
            self._submit(key, entry, options)
        return ref

    def _queue_for_units(self, key: str, entry: _Entry) -> None:
        assert self._ledger is not None
        entry.ref.set_status(
            Status(
                StatusCode.UNSCHEDULABLE,
                f"waiting for ephemeral units {entry.ephemeral} on some node",
            )
        )
        physical = self._physical_request(entry.spec.resources)
        self._ledger.add(
            Waiting(key, entry.ephemeral, physical, lambda node: self._submit_pinned(key, node))
        )

    def _submit_pinned(self, key: str, node: str) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        with self._lock:
            entry = self._entries.get(key)
        if entry is None or entry.ref.done():
            if self._ledger is not None and entry is not None:
                self._ledger.release(node, entry.ephemeral)
            return
        entry.node = node
        options = dict(entry.options)
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False)
        if not entry.spec.retry_exceptions:
            options["max_retries"] = 0  # node loss is retried by escher, on another node
        entry.ref.set_status(Status(StatusCode.PENDING, f"granted units on {node}"))
        self._submit(key, entry, options)

    def _flush_writes(self) -> None:
        """Resize mode: make this process's writes visible to every process now (a task
        about to be submitted, or whose result is about to be returned, may read them).
        Best effort: if the control actor does not answer within the timeout, the writes stay
        queued and readers see them once sent, or once Ray's own view catches up."""
        if self._resize is not None:
            with contextlib.suppress(Exception):
                self._resize.flush(self._timeout)

    def _submit(self, key: str, entry: _Entry, options: dict[str, Any]) -> None:
        spec = entry.spec
        fn: Any = spec.fn
        self._flush_writes()
        try:
            object_ref = self._remote.options(name=spec.name, **options).remote(
                self._config, key, fn, spec.args, dict(spec.kwargs)
            )
        except Exception as exc:
            self._settle_error(
                key, entry, task_error(f"Ray refused it: {exc}", entry.ref, TaskFailedError)
            )
            return
        entry.object_ref = object_ref
        # Ray calls this on its own I/O thread, which must never block: hand over.
        object_ref.future().add_done_callback(lambda fut: self._completions.put((key, fut)))
        self._ensure_sync()

    # --- completion --------------------------------------------------------------------
    def _on_done(self, key: str, future: Any) -> None:
        import ray.exceptions as rex

        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return
        ref = entry.ref
        try:
            out = future.result()
        except rex.TaskCancelledError:
            self._finish_entry(key, entry, cancelled=True)
            return
        except rex.RayTaskError as exc:
            cause = getattr(exc, "cause", None)
            error: BaseException = (
                cause if isinstance(cause, BaseException) else exc.as_instanceof_cause()  # type: ignore[no-untyped-call]
            )
            self._settle_error(key, entry, error)
            return
        except (
            rex.WorkerCrashedError,
            rex.NodeDiedError,
            rex.TaskUnschedulableError,
            rex.OwnerDiedError,
            rex.ObjectLostError,
        ) as exc:
            if self._retry_elsewhere(key, entry):
                return
            self._settle_error(
                key, entry, task_error(f"its Ray worker or node died ({exc})", ref, NodeDiedError)
            )
            return
        except Exception as exc:
            self._settle_error(
                key, entry, task_error(f"Ray failed it: {exc}", ref, TaskFailedError)
            )
            return
        if isinstance(out, str) and out == CANCELLED:
            self._finish_entry(key, entry, cancelled=True)
            return
        node, value = out
        with self._lock:
            if not ref.started():
                ref.set_running(node)
        self._finish_entry(key, entry, value=value)

    def _retry_elsewhere(self, key: str, entry: _Entry) -> bool:
        """Ledger mode: a pinned task whose node died goes back to the queue, if it may."""
        if self._ledger is None or entry.node is None:
            return False
        with self._lock:
            if not entry.ref.retry(RetryCause.NODE_LOST, "its node died; retrying elsewhere"):
                return False
        with contextlib.suppress(Exception):
            self._ledger.release(entry.node, entry.ephemeral)
        entry.node = None
        with self._lock:
            self._done_keys.append(key)
        self._queue_for_units(key, entry)
        return True

    def _settle_error(self, key: str, entry: _Entry, error: BaseException) -> None:
        self._finish_entry(key, entry, error=error)

    def _finish_entry(
        self,
        key: str,
        entry: _Entry,
        *,
        value: Any = None,
        error: BaseException | None = None,
        cancelled: bool = False,
    ) -> None:
        with self._lock:
            self._entries.pop(key, None)
            self._done_keys.append(key)
            if cancelled:
                entry.ref.set_cancelled()
            elif error is not None:
                entry.ref.set_exception(error)
            else:
                entry.ref.set_result(value)
        if self._ledger is not None and entry.node is not None and entry.ephemeral:
            node, entry.node = entry.node, None
            with contextlib.suppress(Exception):
                self._ledger.release(node, entry.ephemeral)
        if self._resize is not None:
            self._resize.poke()
        if entry.gang is not None:
            entry.gang.member_done()

    # --- running-state sync ---------------------------------------------------------------
    def _settle_loop(self) -> None:
        while not self._closed and ray_up():
            try:
                key, future = self._completions.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                self._on_done(key, future)
            except Exception as exc:  # never lose a task to a bug in one settle
                with self._lock:
                    entry = self._entries.get(key)
                if entry is not None:
                    self._finish_entry(
                        key,
                        entry,
                        error=task_error(
                            f"escher could not settle it: {exc!r}", entry.ref, TaskFailedError
                        ),
                    )

    def _ensure_sync(self) -> None:
        with self._lock:
            if self._settler is None or not self._settler.is_alive():
                self._settler = threading.Thread(
                    target=self._settle_loop, name="escher-ray-settle", daemon=True
                )
                self._settler.start()
            if self._sync_thread is None or not self._sync_thread.is_alive():
                self._sync_thread = threading.Thread(
                    target=self._sync_loop, name="escher-ray-sync", daemon=True
                )
                self._sync_thread.start()

    def _sync_loop(self) -> None:
        """Learn which tasks started (and where) from the control actor's gate."""

        while not self._closed and ray_up():
            time.sleep(_SYNC_PERIOD)
            if self._closed or not ray_up():
                return
            with self._lock:
                done, self._done_keys = self._done_keys, []
                idle = not self._entries
            try:
                fresh = wait_for(self._control().sync.remote(self._driver_id, done), self._timeout)
            except Exception:
                with self._lock:
                    self._done_keys.extend(done)
                continue
            with self._lock:
                for key, node in fresh.items():
                    entry = self._entries.get(key)
                    if entry is not None and not entry.ref.done() and not entry.ref.started():
                        entry.ref.set_running(node)
                if idle and not self._entries and not self._done_keys:
                    self._sync_thread = None
                    return

    # --- cancel ------------------------------------------------------------------------
    def _cancel(self, key: str, ref: TaskRef) -> bool:
        import ray

        if self._ledger is not None and self._ledger.remove(key):
            with self._lock:
                entry = self._entries.pop(key, None)
                ref.set_cancelled()
            return entry is not None or ref.state.value == "cancelled"
        with self._lock:
            entry = self._entries.get(key)
        if entry is None:
            return ref.state.value == "cancelled"
        try:
            will_not_run = wait_for(
                self._control().cancel.remote(key, ref.started()), self._timeout
            )
        except Exception:
            return False
        if not will_not_run:
            return False
        if entry.object_ref is not None:
            with contextlib.suppress(Exception):
                ray.cancel(entry.object_ref, force=False)
        with self._lock:
            if entry.object_ref is None:  # a gang member not submitted yet
                self._entries.pop(key, None)
                self._done_keys.append(key)
            ref.set_cancelled()
        return True

    # --- gangs -------------------------------------------------------------------------
    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        from escher.backends.ray._gang import launch_gang

        self._check_open()
        return launch_gang(self, specs)

    # --- lifecycle ---------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise BackendError("this RayBackend is closed; call escher.init() again.")

    def close(self) -> None:
        if self._closed:
            return
        with self._lock:
            waiting = list(self._entries.items())
        for key, entry in waiting:
            if not entry.ref.started():
                with contextlib.suppress(Exception):
                    self._cancel(key, entry.ref)
        self._closed = True
        if self._ledger is not None:
            self._ledger.close()
        if self._resize is not None:
            self._resize.close(self._timeout)
        # Let the background threads see `_closed` and stop, so that none of them calls
        # Ray after the caller disconnects (Ray ends the process when that happens).
        self._completions.put(("", None))
        for thread in (self._sync_thread, self._settler):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=2.0)
        if self._owns_ray:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()

    def __repr__(self) -> str:
        return f"<RayBackend mode={self.mode!r} prefix={self._prefix!r}>"


def _is_label(name: str) -> bool:
    try:
        validate_label(name)
    except Exception:
        return False
    return True


__all__ = ["MODES", "RayBackend"]
