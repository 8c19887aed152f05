"""The task table: escher tasks this process launched on Ray, from submission to settling.

It submits attempts to Ray (Ray's own retries off: `max_retries=0`,
`retry_exceptions=False`), learns which attempts started and where from the start gate
(`escher.backends.ray._gate`), settles handles when Ray reports an attempt's end (in batches,
`escher.backends.ray._waiter`), and asks the one retry rule (`TaskRef.retry`) before running a
failed attempt again. Ray's errors become
escher errors naming the task and the node, with Ray's error chained.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._entry import Entry, SplitRequest
from escher.backends.ray._gate import Gate, NodeAgents
from escher.backends.ray._runner import (
    CANCELLED,
    CLAIMED_IN_STORE,
    GATE_FAILED,
    bound_runner,
    run_task,
)
from escher.backends.ray._shrink import waits_for_shrink
from escher.backends.ray._state import (
    NodeCache,
    keep_running,
    ray_task_state,
    ray_up,
    raylet_reachable,
    read_raw,
)
from escher.backends.ray._store import EphemeralStore
from escher.backends.ray._waiter import Waiter
from escher.core.errors import NodeDiedError, TaskFailedError
from escher.core.task import (
    RetryCause,
    Status,
    StatusCode,
    TaskRef,
    TaskSpec,
    TaskState,
    task_error,
)

#: Seconds between two turns of the sync thread (parked retries, held-back attempts) ...
SYNC_PERIOD = 0.1
#: ... and between two looks at the start gate for the tasks that started, plus this per
#: submitted attempt not settled (a look asks every node agent and Ray's control store:
#: during a burst of tasks that costs Ray's own work more than its CPU shows) ...
SYNC_PER_ATTEMPT = 1e-3
#: ... and no more than this (how late a start is noticed, at most, unless someone asks
#: about the task: `describe` looks at once if the last look is older than `SYNC_PERIOD`).
MAX_SYNC_PERIOD = 1.0
#: Seconds a look at the start gate takes at most for `describe` to look again at once.
SLOW_LOOK = 0.5
#: Seconds between two checks that the nodes of running attempts are still alive.
NODE_CHECK_PERIOD = 1.0
#: Seconds a retry waits at most for Ray to drop a node escher saw die.
PARK_SECONDS = 60.0
#: Functions with a remote function of their own, at most (others take the generic runner).
MAX_BOUND = 256
#: Ray options every attempt gets: escher alone decides retries.
NO_RAY_RETRIES: dict[str, Any] = {"max_retries": 0, "retry_exceptions": False}


def look_period(outstanding: int) -> float:
    """Seconds between two looks at the start gate with `outstanding` attempts submitted
    and not settled."""
    return min(SYNC_PERIOD + SYNC_PER_ATTEMPT * outstanding, MAX_SYNC_PERIOD)


class NodeLeftError(Exception):
    """escher saw a running attempt's node leave the cluster before Ray reported it."""


class TaskTable:
    """Tracks this process's escher tasks on Ray.

    Args:
        session_id: The first part of every start-gate key.
        config: Passed to every task (how the worker builds its backend).
        store: The ephemeral store (routes tasks that request labels).
        timeout: Seconds every wait on Ray may take.
        explain_wait: Says what a task put back in line waits for (its status reason).
        nodes: What is known about the cluster's nodes.
        agents: The start gate's node agents.
        arm_nodes: Start the agents of nodes that have none (the driver does).
    """

    def __init__(
        self,
        *,
        session_id: str,
        config: WorkerConfig,
        store: EphemeralStore,
        timeout: float,
        explain_wait: Callable[[Entry], str],
        nodes: NodeCache,
        agents: NodeAgents,
        arm_nodes: bool,
    ) -> None:
        import ray

        self._session = session_id
        self._config = config
        self._store = store
        self._agents = agents
        self._arm_nodes = arm_nodes
        self._gate = Gate(config.prefix, session_id, agents, timeout)
        # Settled attempts whose gate files (node -> Ray task ids; "" = every node) and
        # control-store keys are still to be removed.
        self._forget_files: dict[str, list[str]] = {}
        self._forget_keys: list[str] = []
        self._timeout = timeout
        self._explain_wait = explain_wait
        self._nodes = nodes
        self._parked: list[tuple[float, Entry]] = []  # retries waiting for Ray to drop dead nodes
        self._held: list[Entry] = []  # held back by a pending shrink: submitted again soon
        self._remote = ray.remote(run_task)
        self._option_cache: dict[tuple[Any, ...], tuple[Any, Any, Any, Any]] = {}
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        # fn -> its bound remote functions [without arguments, with arguments], made as needed
        self._bound: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        self._bind_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self._learn_lock = threading.Lock()
        self._last_look = 0.0  # time.monotonic() when the last look at the start gate began
        self._look_took = 0.0  # and how long it took
        self._by_key: dict[str, Entry] = {}
        self._by_ref: dict[int, Entry] = {}  # id(handle) -> its live entry
        self._request_options: dict[int, tuple[SplitRequest, dict[str, Any]]] = {}
        # One bound method for every handle (a closure per handle would tie each handle and
        # its entry in a cycle that only Python's cyclic collector frees).
        self._cancel_handle = self._cancel_ref
        self._by_task_id: dict[str, Entry] = {}  # Ray task id of the current attempt -> entry
        self._waiter = Waiter(self._settle, timeout)
        self._syncer: threading.Thread | None = None
        self._closed = False

    # --- entries -----------------------------------------------------------------------
    def new_entry(self, spec: TaskSpec, request: SplitRequest) -> Entry:
        """A tracked entry (and its handle) for `spec`; not submitted yet."""
        key = f"{next(self._seq)}.0"
        ref = TaskRef(spec, canceller=self._cancel_handle)
        entry = Entry(ref=ref, request=request, options=self._options_of(request), key=key)
        with self._lock:
            self._by_key[key] = entry
            self._by_ref[id(ref)] = entry
        return entry

    def _options_of(self, request: SplitRequest) -> dict[str, Any]:
        """The Ray options of every attempt of a task with `request` (one dict per request
        object: the splitter hands out one request object per distinct request)."""
        cached = self._request_options.get(id(request))
        if cached is not None and cached[0] is request:
            return cached[1]
        options = dict(request.options)
        extra = self._store.ray_resources(request.labels)
        if extra:
            options["resources"] = {**options.get("resources", {}), **extra}
        options.update(NO_RAY_RETRIES)
        if len(self._request_options) > 4096:
            self._request_options.clear()
        self._request_options[id(request)] = (request, options)  # keeps the id valid
        return options

    def _cancel_ref(self, ref: TaskRef) -> bool:
        """`TaskRef.cancel` of the handles this table made."""
        entry = self.entry_of(ref)
        if entry is None:  # settled meanwhile
            return ref.state is TaskState.CANCELLED
        return self.cancel(entry)

    def live(self) -> list[Entry]:
        """Entries not settled yet."""
        with self._lock:
            return list(self._by_key.values())

    def entry_of(self, ref: TaskRef) -> Entry | None:
        """The live entry of `ref`, if any."""
        with self._lock:
            entry = self._by_ref.get(id(ref))
        return entry if entry is not None and entry.ref is ref else None

    # --- submitting --------------------------------------------------------------------
    def start(self, entry: Entry) -> None:
        """Send an attempt on its way: through the store if it requests labels."""
        if entry.strategy is not None:
            self.submit(entry, entry.strategy)
        elif entry.request.labels:
            self._store.dispatch(entry, self.submit)
        else:
            self.submit(entry, None)

    def submit(self, entry: Entry, strategy: Any) -> None:
        """Hand the current attempt of `entry` to Ray (with `strategy`, or Ray's default)."""
        self._store.flush()
        dead = self._nodes.dead.snapshot()
        if dead and getattr(strategy, "soft", False) and getattr(strategy, "node_id", "") in dead:
            strategy = None  # a placement hint to a node that died
        with entry.submitting:  # a cancel waits until the attempt has its Ray task id
            if entry.ref.done():  # cancelled before it was submitted
                self._drop(entry)
                return
            try:
                object_ref = self._call(entry, strategy)
            except Exception as exc:
                error = task_error(f"Ray refused it: {exc}", entry.ref, TaskFailedError)
                error.__cause__ = exc
                self._finish(entry, error=error)
                return
            entry.object_ref = object_ref
            entry.task_id = object_ref.task_id().hex()
            with self._lock:
                self._by_task_id[entry.task_id] = entry
        self._waiter.add(object_ref, entry.key)
        self._ensure_threads()

    def _remote_for(self, fn: Any, with_args: bool) -> tuple[Any, bool]:
        """The Ray remote function for `fn`: from its second launch on, one with `fn` bound
        (Ray ships it once; one without parameters for a call without arguments), else the
        generic runner that takes `fn` as an argument.
        Returns (remote function, whether `fn` is bound)."""
        import ray

        try:
            with self._bind_lock:
                bound = self._bound.get(fn)
                if bound is None:
                    seen = self._seen.get(fn, 0) + 1
                    if seen < 2 or len(self._bound) >= MAX_BOUND:
                        self._seen[fn] = seen
                        return self._remote, False
                    self._seen.pop(fn, None)
                    bound = self._bound[fn] = [None, None]
                remote = bound[with_args]
                if remote is None:
                    remote = ray.remote(bound_runner(self._config, fn, with_args=with_args))
                    bound[with_args] = remote
                return remote, True
        except TypeError:  # not weakly referenceable: always the generic runner
            return self._remote, False

    def _call(self, entry: Entry, strategy: Any) -> Any:
        """Submit the current attempt of `entry` to Ray; its ObjectRef."""
        spec = entry.spec
        with_args = bool(spec.args or spec.kwargs)
        remote, bound = self._remote_for(spec.fn, with_args)
        options = self._options(remote, entry, strategy)
        if not bound:
            return options.remote(self._config, spec.fn, spec.args, dict(spec.kwargs))
        if with_args:
            return options.remote(spec.args, dict(spec.kwargs))
        return options.remote()

    def _options(self, remote: Any, entry: Entry, strategy: Any) -> Any:
        """`remote.options(...)` for an attempt, cached unless `strategy` is a placement
        group's (node affinities are one object per node: `_state.node_affinity`)."""
        if strategy is not None and type(strategy).__name__ != "NodeAffinitySchedulingStrategy":
            return remote.options(
                name=entry.spec.name, scheduling_strategy=strategy, **entry.options
            )
        options = entry.options
        cache_key = (id(remote), id(strategy), id(options), entry.spec.name)
        cached = self._option_cache.get(cache_key)
        if cached is not None:
            return cached[-1]
        if len(self._option_cache) > 1024:
            self._option_cache.clear()
        placed = {} if strategy is None else {"scheduling_strategy": strategy}
        with_options = remote.options(name=entry.spec.name, **placed, **options)
        self._option_cache[cache_key] = (remote, strategy, options, with_options)  # ids valid
        return with_options

    # --- settling ----------------------------------------------------------------------
    def _settle(self, key: str, out: Any) -> None:
        """The waiter's report of attempt `key`'s end: settle it, never losing the task to a
        bug in one settle."""
        try:
            self._on_done(key, out)
        except Exception as exc:
            with self._lock:
                entry = self._by_key.get(key)
            if entry is not None:
                self._finish(
                    entry,
                    error=task_error(
                        f"escher could not settle it: {exc!r}", entry.ref, TaskFailedError
                    ),
                )

    def _on_done(self, key: str, out: Any) -> None:
        """Settle attempt `key` with what Ray stored: its value, or the error instead."""
        import ray.exceptions as rex

        with self._lock:
            entry = self._by_key.get(key)
        if entry is None:
            return
        if not isinstance(out, BaseException):
            self._on_value(entry, out, key)
        elif isinstance(out, rex.TaskCancelledError):
            self._finish(entry, cancelled=True, key=key)
        elif isinstance(out, rex.RayTaskError):
            self._learn_starts()  # the body claimed its start before it raised: count it
            cause = getattr(out, "cause", None)
            error: BaseException = (
                cause if isinstance(cause, BaseException) else out.as_instanceof_cause()  # type: ignore[no-untyped-call]
            )
            reason = f"attempt raised {type(error).__name__}"
            if not self.retry(entry, RetryCause.RAISED, reason, key=key):
                self._finish(entry, error=error, key=key)
        elif isinstance(out, rex.RayError):  # the attempt's worker or node failed
            self._on_lost(entry, out, key)
        else:
            error = self._wrapped(entry, "Ray failed it", out, TaskFailedError)
            self._finish(entry, error=error, key=key)

    def _on_value(self, entry: Entry, out: Any, key: str) -> None:
        if waits_for_shrink(out):
            self._hold_back(entry, out[1], key)
            return
        if isinstance(out, str) and out == CANCELLED:
            self._finish(entry, cancelled=True, key=key)
            return
        if isinstance(out, list) and len(out) == 3 and out[0] == GATE_FAILED:
            _, node, message = out
            entry.where = node
            error = task_error(
                f"on node {node}: escher's start gate failed ({message}); the body did not run",
                entry.ref,
                TaskFailedError,
            )
            self._finish(entry, error=error, key=key)
            return
        if len(out) == 3 and out[2] == CLAIMED_IN_STORE:
            with self._lock:
                self._forget_keys.append(entry.task_id)
        node, value = out[0], out[1]
        entry.where = node
        with self._lock:
            if entry.key == key and entry.ref.state is TaskState.PENDING:
                entry.ref.set_running(node)
        self._finish(entry, value=value, key=key)

    def _on_lost(self, entry: Entry, exc: BaseException, key: str) -> None:
        lost = entry.ref.node_id or entry.where or entry.node
        if lost is not None:
            self.node_died(lost)
        node = lost or "an unknown node"
        reason = f"its node {node} or worker was lost ({type(exc).__name__})"
        if self.retry(entry, RetryCause.NODE_LOST, reason, key=key):
            return
        self._finish(entry, error=self._wrapped(entry, reason, exc, NodeDiedError), key=key)

    def _wrapped(
        self,
        entry: Entry,
        what: str,
        exc: BaseException,
        kind: type[TaskFailedError] | type[NodeDiedError],
    ) -> BaseException:
        node = entry.ref.node_id or entry.where or entry.node
        where = f" (node {node})" if node else ""
        error = task_error(f"{what}{where}: {exc}", entry.ref, kind)
        error.__cause__ = exc
        return error

    def retry(self, entry: Entry, cause: RetryCause, reason: str, *, key: str) -> bool:
        """Put `entry` back in line if the retry rule allows it, as a new attempt. `key` is
        the failed attempt's: an attempt already retried (or settled) is not retried again."""
        old_node = entry.ref.node_id or entry.where
        if not entry.ref.may_retry(cause):
            return False
        lost = f" on {old_node}" if old_node else ""
        why = f"{reason}{lost}; retry {entry.ref.retries + 1}: {self._explain_wait(entry)}"
        with self._lock:
            if entry.key != key or self._by_key.get(key) is not entry:
                return True  # someone else already handled this attempt
            if not entry.ref.retry(cause, why):
                return False
            self._by_key.pop(entry.key, None)
            self._forget_attempt(entry)
            entry.key = f"{entry.key.rpartition('.')[0]}.{entry.ref.retries}"
            entry.object_ref = None
            self._by_key[entry.key] = entry
        self._store.release(entry)
        if self._nodes.dead.snapshot():
            # Ray's own view may still list a node escher saw die, and could send the new
            # attempt there: wait (bounded) until Ray drops it.
            with self._lock:
                self._parked.append((time.monotonic(), entry))
            self._ensure_threads()
            return True
        self.start(entry)
        return True

    def _hold_back(self, entry: Entry, node: str, key: str) -> None:
        """The gate held the attempt back (a pending shrink on `node` leaves no room; its
        body did not run): submit the same attempt again at the next sync."""
        with self._lock:
            if entry.key != key or self._by_key.get(key) is not entry:
                return
            entry.object_ref = None
            self._forget_attempt(entry)
            entry.ref.set_status(
                Status(
                    StatusCode.UNSCHEDULABLE,
                    f"held back on {node}: a label it requests was shrunk below its use there",
                )
            )
            self._held.append(entry)
        self._ensure_threads()

    def _resubmit_held(self) -> None:
        with self._lock:
            held, self._held = self._held, []
        for entry in held:
            self.start(entry)

    def _unpark(self) -> None:
        """Start the parked retries once Ray lists no node escher saw die (or after
        `PARK_SECONDS`)."""
        with self._lock:
            if not self._parked:
                return
            parked = list(self._parked)
        try:
            listed = set(read_raw().total)
        except Exception:
            return
        dead_listed = self._nodes.dead.snapshot() & listed
        now = time.monotonic()
        ready = [e for at, e in parked if not dead_listed or now - at > PARK_SECONDS]
        if not ready:
            return
        with self._lock:
            self._parked = [(at, e) for at, e in self._parked if e not in ready]
        for entry in ready:
            self.start(entry)

    def _finish(
        self,
        entry: Entry,
        *,
        value: Any = None,
        error: BaseException | None = None,
        cancelled: bool = False,
        key: str | None = None,
    ) -> None:
        """Settle `entry` (once); with `key`, only if that attempt is still the current one."""
        with self._lock:
            if key is not None and entry.key != key:
                return  # a stale report of an attempt that was retried meanwhile
            live = self._by_key.get(entry.key) is entry
            if live:
                del self._by_key[entry.key]
                self._by_ref.pop(id(entry.ref), None)
                self._forget_attempt(entry)
            if cancelled:
                entry.ref.set_cancelled()
            elif error is not None:
                entry.ref.set_exception(error)
            else:
                entry.ref.set_result(value)
        if live:  # once per entry: a second settle (a lost race) changes nothing
            self._store.release(entry)
            if entry.gang is not None:
                entry.gang.member_done()

    def _forget_attempt(self, entry: Entry) -> None:  # called with self._lock held
        """The current attempt of `entry` is over: its gate files and keys can go."""
        task_id = entry.task_id
        if not task_id:
            return
        self._by_task_id.pop(task_id, None)
        # A cancel marked every node (and the control store); a claim, the node it ran on.
        node = "" if entry.cancel_marked else (entry.where or "")
        self._forget_files.setdefault(node, []).append(task_id)
        if entry.cancel_marked:
            self._forget_keys.append(task_id)
        entry.task_id, entry.cancel_marked = "", False

    def _drop(self, entry: Entry) -> None:
        """An entry that will never be submitted (cancelled first)."""
        self._finish(entry, cancelled=True)

    def fail_unsubmitted(self, entry: Entry, error: BaseException | None) -> None:
        """Settle an entry that was never submitted: with `error`, or cancelled (None)."""
        if error is None:
            self._finish(entry, cancelled=True)
        else:
            self._finish(entry, error=error)

    def describe(self, entry: Entry) -> dict[str, Any]:
        """What the table knows about one live task (for `Backend.describe_task`). If it was
        submitted and is not known to have started, the start gate is asked first (unless
        it was asked in the last `SYNC_PERIOD`, or the last look was slow: a node agent that
        does not answer must not hold up every question): its handle then says whether it
        runs."""
        if (
            entry.task_id
            and entry.ref.state is TaskState.PENDING
            and time.monotonic() - self._last_look > SYNC_PERIOD
            and self._look_took < SLOW_LOOK
        ):
            self._learn_starts()
        facts: dict[str, Any] = {"attempt_key": entry.key, "retries": entry.ref.retries}
        if entry.object_ref is not None:
            with contextlib.suppress(Exception):
                facts["ray_task_id"] = entry.object_ref.task_id().hex()
            facts.update(ray_task_state(entry.object_ref))
        else:
            facts["ray"] = "not submitted to Ray yet"
        return facts

    # --- cancel ------------------------------------------------------------------------
    def cancel(self, entry: Entry) -> bool:
        """Cancel `entry` if its body never ran and never will; True if so."""
        if entry.gang is not None:
            # Unplaced: the whole gang is cancelled. Placed: too late, every member runs
            # (cancelling one at the start gate would leave the gang half run).
            if entry.gang.cancel_unplaced():
                return entry.ref.state.value == "cancelled"
            return False
        if self._store.withdraw(entry):
            self._finish(entry, cancelled=True)
            return True
        return bool(self._cancel_at_gate([entry]))

    def _cancel_at_gate(self, entries: list[Entry]) -> list[Entry]:
        """Cancel entries not in a gang at the start gate, all in one round; those that
        will never run (settled as cancelled)."""
        import ray

        cancelled: list[Entry] = []
        submitted: dict[str, Entry] = {}
        for entry in entries:
            with entry.submitting, self._lock:
                if self._by_key.get(entry.key) is not entry:  # settled
                    if entry.ref.state is TaskState.CANCELLED:
                        cancelled.append(entry)
                elif not entry.task_id:  # not with Ray now: it is never submitted again
                    if entry.ref.set_cancelled() or entry.ref.state is TaskState.CANCELLED:
                        cancelled.append(entry)
                else:
                    entry.cancel_marked = True
                    submitted[entry.task_id] = entry
        if not submitted:
            return cancelled
        try:
            never = self._gate.cancel(list(submitted), alive=self._node_alive)
        except Exception:
            return cancelled
        for task_id in never:
            entry = submitted[task_id]
            with entry.submitting, self._lock:
                # The attempt never started. If it is still with Ray, or ended without
                # running (refused at the gate, or held back and not submitted again), the
                # task never runs: settled now (the entry stays until Ray reports the
                # attempt). If a new attempt is with Ray already, promise nothing.
                if entry.task_id in (task_id, ""):
                    entry.ref.set_cancelled()
                object_ref = entry.object_ref if entry.task_id == task_id else None
            if object_ref is not None:
                with contextlib.suppress(Exception):
                    ray.cancel(object_ref, force=False)
            if entry.ref.state is TaskState.CANCELLED:
                cancelled.append(entry)
        return cancelled

    @staticmethod
    def _node_alive(node: str) -> bool:
        """Whether Ray's control store lists `node` alive (if in doubt, it is)."""
        try:
            return node in read_raw().total
        except Exception:
            return True

    # --- running state -----------------------------------------------------------------
    def _ensure_threads(self) -> None:
        syncer = self._syncer
        if syncer is not None and syncer.is_alive():
            return
        with self._lock:
            self._syncer = keep_running(self._syncer, self._sync_loop, "escher-ray-sync")

    def _sync_loop(self) -> None:
        """Learn which attempts started (and where) from the start gate, every `look_period`;
        every `NODE_CHECK_PERIOD`, put back in line the attempts whose node left the cluster."""
        last_check = last_look = time.monotonic()
        while not self._closed and ray_up():
            time.sleep(SYNC_PERIOD)
            if self._closed or not ray_up():
                return
            self._unpark()
            self._resubmit_held()
            if time.monotonic() - last_look >= look_period(len(self._by_task_id)):
                last_look = time.monotonic()
                if self._sync_once():
                    return
            if time.monotonic() - last_check >= NODE_CHECK_PERIOD:
                last_check = time.monotonic()
                self._check_nodes()
                if self._arm_nodes:
                    self.arm_nodes()

    def arm_nodes(self) -> None:
        """Start the start-gate agents of alive nodes that have none (best effort)."""
        with contextlib.suppress(Exception):
            self._agents.ensure(self._nodes.physical())

    def _learn_starts(self) -> bool:
        """Ask the gate which submitted attempts started (and where), and mark them running;
        False if the gate did not answer. One at a time: a settle that waits for it then
        sees every start the gate reported before."""
        with self._learn_lock:
            return self._learn_starts_locked()

    def _learn_starts_locked(self) -> bool:
        self._last_look = began = time.monotonic()
        try:
            return self._look()
        finally:
            self._look_took = time.monotonic() - began

    def _look(self) -> bool:
        with self._lock:
            waiting = any(
                e.task_id and e.ref.state is TaskState.PENDING for e in self._by_key.values()
            )
            files, self._forget_files = self._forget_files, {}
            keys, self._forget_keys = self._forget_keys, []
        if keys:
            with contextlib.suppress(Exception):  # else removed with the session
                self._gate.forget(keys)
        if not waiting and not files:
            return True
        try:
            started = self._gate.started(files, skip=self._nodes.dead.snapshot())
        except Exception:
            with self._lock:  # try again at the next sync
                for node, task_ids in files.items():
                    self._forget_files.setdefault(node, []).extend(task_ids)
            return False
        with self._lock:
            for task_id, node in started.items():
                entry = self._by_task_id.get(task_id)
                if entry is not None and entry.ref.state is TaskState.PENDING:
                    entry.where = node
                    entry.ref.set_running(node)
        return True

    def _sync_once(self) -> bool:
        """One sync with the gate; True when the table is idle and the thread may stop."""
        with self._lock:
            idle = not self._by_key and not self._parked
        if not self._learn_starts():
            return False
        with self._lock:
            forgotten = not self._forget_files and not self._forget_keys
            if idle and forgotten and not self._by_key and not self._parked:
                self._syncer = None
                return True
        return False

    def node_died(self, node: str) -> bool:
        """Whether `node` is dead: Ray no longer lists it, or its raylet refuses connections
        (then it is marked dead at once, before Ray's control store notices)."""
        if node in self._nodes.dead.snapshot():
            return True
        if not raylet_reachable(self._nodes.endpoint(node)):
            self._nodes.dead.mark(node)
            return True
        return False

    def _check_nodes(self) -> None:
        """Attempts running on a node that left the cluster are lost: settle or retry them
        now, instead of waiting until Ray reports them (which can take many seconds)."""
        with self._lock:
            running = [e for e in self._by_key.values() if e.ref.state is TaskState.RUNNING]
        if not running:
            return
        try:
            alive = set(read_raw().total)
        except Exception:
            return
        nodes = {e.ref.node_id for e in running} - {None}
        gone = {n for n in nodes if n is not None and (n not in alive or self.node_died(n))}
        for entry in running:
            node = entry.ref.node_id
            if node in gone and entry.ref.state is TaskState.RUNNING:
                lost = NodeLeftError(f"node {node} left the Ray cluster")
                self._on_lost(entry, lost, entry.key)

    # --- lifecycle ---------------------------------------------------------------------
    def close(self) -> None:
        """Cancel what did not start; stop the threads (and wait for them)."""
        at_gate = []
        for entry in self.live():
            if entry.ref.started():
                continue
            if entry.gang is not None:
                with contextlib.suppress(Exception):
                    self.cancel(entry)
            elif self._store.withdraw(entry):
                self._finish(entry, cancelled=True)
            else:
                at_gate.append(entry)
        with contextlib.suppress(Exception):
            self._cancel_at_gate(at_gate)
        self._closed = True
        self._waiter.close()
        thread = self._syncer
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        with self._lock:
            settled = not self._by_key
        if settled:  # else a cancel mark must stay: left for garbage collection
            with contextlib.suppress(Exception):
                self._gate.forget_session()
