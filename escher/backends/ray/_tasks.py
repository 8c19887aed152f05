"""The task table: escher tasks this process launched on Ray, from submission to settling.

It submits attempts to Ray (Ray's own retries off: `max_retries=0`,
`retry_exceptions=False`), learns which attempts started and where from the start gate
(`escher.backends.ray._gate`), settles handles when Ray reports an attempt's end, and asks the one
retry rule (`TaskRef.retry`) before running a failed attempt again. Ray's errors become
escher errors naming the task and the node, with Ray's error chained.
"""

from __future__ import annotations

import contextlib
import itertools
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from escher.backends.ray._completion import on_completed
from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._entry import Entry, SplitRequest
from escher.backends.ray._gate import Gate, attempt_key, block_of, retry_key
from escher.backends.ray._runner import CANCELLED, GATE_FAILED, bound_runner, run_task
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

#: Seconds between two looks at the start gate for the tasks that started.
SYNC_PERIOD = 0.1
#: Seconds between two checks that the nodes of running attempts are still alive.
NODE_CHECK_PERIOD = 1.0
#: Seconds a retry waits at most for Ray to drop a node escher saw die.
PARK_SECONDS = 60.0
#: Functions with a remote function of their own, at most (others take the generic runner).
MAX_BOUND = 256
#: Ray options every attempt gets: escher alone decides retries.
NO_RAY_RETRIES: dict[str, Any] = {"max_retries": 0, "retry_exceptions": False}


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
    ) -> None:
        import ray

        self._session = session_id
        self._config = config
        self._store = store
        self._gate = Gate(config.prefix, session_id, timeout)
        self._blocks: dict[int, int] = {}  # key block -> entries not settled yet
        self._forget: list[int] = []  # key blocks whose entries all settled
        self._timeout = timeout
        self._explain_wait = explain_wait
        self._nodes = nodes
        self._parked: list[tuple[float, Entry]] = []  # retries waiting for Ray to drop dead nodes
        self._held: list[Entry] = []  # held back by a pending shrink: submitted again soon
        self._remote = ray.remote(run_task)
        self._option_cache: dict[Any, Any] = {}
        self._seen: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._bound: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
        self._bind_lock = threading.Lock()
        self._seq = itertools.count(1)
        self._last_block = 0
        self._lock = threading.RLock()
        self._learn_lock = threading.Lock()
        self._by_key: dict[str, Entry] = {}
        self._completions: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        self._settler: threading.Thread | None = None
        self._syncer: threading.Thread | None = None
        self._closed = False

    # --- entries -----------------------------------------------------------------------
    def new_entry(self, spec: TaskSpec, request: SplitRequest) -> Entry:
        """A tracked entry (and its handle) for `spec`; not submitted yet."""
        options = dict(request.options)
        extra = self._store.ray_resources(request.labels)
        if extra:
            options["resources"] = {**options.get("resources", {}), **extra}
        options.update(NO_RAY_RETRIES)
        key = attempt_key(self._session, next(self._seq))
        holder: list[Entry] = []
        ref = TaskRef(spec, canceller=lambda _ref: self.cancel(holder[0]))
        entry = Entry(ref=ref, request=request, options=options, key=key)
        holder.append(entry)
        block = block_of(key)
        with self._lock:
            self._by_key[key] = entry
            self._blocks[block] = self._blocks.get(block, 0) + 1
            if block > self._last_block:
                if self._last_block not in self._blocks:  # it settled while it was the last
                    self._forget.append(self._last_block)
                self._last_block = block
        return entry

    def live(self) -> list[Entry]:
        """Entries not settled yet."""
        with self._lock:
            return list(self._by_key.values())

    def entry_of(self, ref: TaskRef) -> Entry | None:
        """The live entry of `ref`, if any."""
        with self._lock:
            return next((e for e in self._by_key.values() if e.ref is ref), None)

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
        if entry.ref.done():  # cancelled before it was submitted
            self._drop(entry)
            return
        self._store.flush()
        dead = self._nodes.dead.snapshot()
        if dead and getattr(strategy, "soft", False) and getattr(strategy, "node_id", "") in dead:
            strategy = None  # a placement hint to a node that died
        try:
            object_ref = self._call(entry, strategy)
        except Exception as exc:
            error = task_error(f"Ray refused it: {exc}", entry.ref, TaskFailedError)
            error.__cause__ = exc
            self._finish(entry, error=error)
            return
        entry.object_ref = object_ref
        key, put = entry.key, self._completions.put
        # Ray calls this on its own I/O thread, which must never block: hand over.
        on_completed(object_ref, lambda result: put((key, result)))
        self._ensure_threads()

    def _remote_for(self, fn: Any) -> tuple[Any, bool]:
        """The Ray remote function for `fn`: from its second launch on, one with `fn` bound
        (Ray ships it once), else the generic runner that takes `fn` as an argument.
        Returns (remote function, whether `fn` is bound)."""
        import ray

        try:
            with self._bind_lock:
                bound = self._bound.get(fn)
                if bound is not None:
                    return bound, True
                seen = self._seen.get(fn, 0) + 1
                if seen >= 2 and len(self._bound) < MAX_BOUND:
                    bound = ray.remote(bound_runner(self._config, fn))
                    self._bound[fn] = bound
                    self._seen.pop(fn, None)
                    return bound, True
                self._seen[fn] = seen
        except TypeError:  # not weakly referenceable: always the generic runner
            pass
        return self._remote, False

    def _call(self, entry: Entry, strategy: Any) -> Any:
        """Submit the current attempt of `entry` to Ray; its ObjectRef."""
        spec = entry.spec
        remote, bound = self._remote_for(spec.fn)
        options = self._options(remote, entry, strategy)
        if bound:
            if not spec.args and not spec.kwargs:
                return options.remote(entry.key)
            return options.remote(entry.key, spec.args, dict(spec.kwargs))
        return options.remote(self._config, entry.key, spec.fn, spec.args, dict(spec.kwargs))

    def _options(self, remote: Any, entry: Entry, strategy: Any) -> Any:
        """`remote.options(...)` for an attempt, cached for the common (no strategy) case."""
        if strategy is not None:
            return remote.options(
                name=entry.spec.name, scheduling_strategy=strategy, **entry.options
            )
        resources = entry.options.get("resources")
        cache_key = (
            id(remote),
            entry.spec.name,
            entry.options.get("num_cpus"),
            entry.options.get("num_gpus"),
            entry.options.get("memory"),
            tuple(sorted(resources.items())) if resources else (),
        )
        with_options = self._option_cache.get(cache_key)
        if with_options is None:
            if len(self._option_cache) > 1024:
                self._option_cache.clear()
            with_options = remote.options(name=entry.spec.name, **entry.options)
            self._option_cache[cache_key] = (remote, with_options)  # keeps id(remote) valid
            return with_options
        return with_options[1]

    # --- settling ----------------------------------------------------------------------
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
        if isinstance(out, tuple) and len(out) == 3 and out[0] == GATE_FAILED:
            _, node, message = out
            entry.where = node
            error = task_error(
                f"on node {node}: escher's start gate failed ({message}); the body did not run",
                entry.ref,
                TaskFailedError,
            )
            self._finish(entry, error=error, key=key)
            return
        node, value = out
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
            entry.key = retry_key(entry.key, entry.ref.retries)
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
                self._settled(block_of(entry.key))
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

    def _settled(self, block: int) -> None:  # called with self._lock held
        left = self._blocks.get(block, 1) - 1
        if left > 0:
            self._blocks[block] = left
            return
        self._blocks.pop(block, None)
        if block < self._last_block:
            self._forget.append(block)  # a full block, all settled: its keys can go

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
        """What the table knows about one live task (for `Backend.describe_task`)."""
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
        import ray

        if entry.gang is not None:
            # Unplaced: the whole gang is cancelled. Placed: too late, every member runs
            # (cancelling one at the start gate would leave the gang half run).
            if entry.gang.cancel_unplaced():
                return entry.ref.state.value == "cancelled"
            return False
        if self._store.withdraw(entry):
            self._finish(entry, cancelled=True)
            return True
        with self._lock:
            key = entry.key
            if self._by_key.get(key) is not entry:
                return entry.ref.state.value == "cancelled"
        try:
            will_not_run = self._gate.cancel(key)
        except Exception:
            return False
        if not will_not_run:
            return False
        # Settled now; the entry stays until Ray reports the attempt (its claim is refused).
        entry.ref.set_cancelled()
        if entry.object_ref is not None:
            with contextlib.suppress(Exception):
                ray.cancel(entry.object_ref, force=False)
        return entry.ref.state is TaskState.CANCELLED

    # --- running state -----------------------------------------------------------------
    def _ensure_threads(self) -> None:
        settler, syncer = self._settler, self._syncer
        if settler is not None and syncer is not None and settler.is_alive() and syncer.is_alive():
            return
        with self._lock:
            self._settler = keep_running(self._settler, self._settle_loop, "escher-ray-settle")
            self._syncer = keep_running(self._syncer, self._sync_loop, "escher-ray-sync")

    def _settle_loop(self) -> None:
        while not self._closed and ray_up():
            try:
                key, out = self._completions.get(timeout=0.5)
            except queue.Empty:
                continue
            if not key:
                continue
            try:
                self._on_done(key, out)
            except Exception as exc:  # never lose a task to a bug in one settle
                with self._lock:
                    entry = self._by_key.get(key)
                if entry is not None:
                    self._finish(
                        entry,
                        error=task_error(
                            f"escher could not settle it: {exc!r}", entry.ref, TaskFailedError
                        ),
                    )

    def _sync_loop(self) -> None:
        """Learn which attempts started (and where) from the start gate; every
        `NODE_CHECK_PERIOD`, put back in line the attempts whose node left the cluster."""
        last_check = time.monotonic()
        while not self._closed and ray_up():
            time.sleep(SYNC_PERIOD)
            if self._closed or not ray_up():
                return
            self._unpark()
            self._resubmit_held()
            if self._sync_once():
                return
            if time.monotonic() - last_check >= NODE_CHECK_PERIOD:
                last_check = time.monotonic()
                self._check_nodes()

    def _learn_starts(self) -> bool:
        """Ask the gate which submitted attempts started (and where), and mark them running;
        False if the gate did not answer. One at a time: a settle that waits for it then
        sees every start the gate reported before."""
        with self._learn_lock:
            return self._learn_starts_locked()

    def _learn_starts_locked(self) -> bool:
        with self._lock:
            waiting = {
                key
                for key, e in self._by_key.items()
                if e.object_ref is not None and e.ref.state is TaskState.PENDING
            }
            forget, self._forget = self._forget, []
        for block in forget:
            with contextlib.suppress(Exception):  # left for garbage collection
                self._gate.forget_block(block)
        try:
            started = self._gate.started(waiting)
        except Exception:
            return False
        with self._lock:
            for key, node in started.items():
                entry = self._by_key.get(key)
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
            if idle and not self._by_key and not self._forget and not self._parked:
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
        for entry in self.live():
            if not entry.ref.started():
                with contextlib.suppress(Exception):
                    self.cancel(entry)
        self._closed = True
        self._completions.put(("", None))
        for thread in (self._syncer, self._settler):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=2.0)
        with self._lock:
            settled = not self._by_key
        if settled:  # else a cancel mark must stay: left for garbage collection
            with contextlib.suppress(Exception):
                self._gate.forget(f"{self._session}:")
