"""The task table: escher tasks this process launched on Ray, from submission to settling.

Its job is each task's life: it keeps the entries, sends attempts on their way (through the
ephemeral store; `escher.backends.ray._submit` hands them to Ray with Ray's own retries off),
settles handles when Ray reports an attempt's end (in batches, `escher.backends.ray._waiter`)
and asks the one retry rule (`TaskRef.retry`) before running a failed attempt again. Ray's
errors become escher errors naming the task and the node, with Ray's error chained.
Its sync thread runs the other concerns on a clock: start tracking
(`escher.backends.ray._starts`), node liveness and parked retries
(`escher.backends.ray._liveness`), and attempts held back by a pending shrink.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from escher.backends.ray._config import WorkerConfig
from escher.backends.ray._entry import Entry, SplitRequest
from escher.backends.ray._gate import Gate, NodeAgents
from escher.backends.ray._liveness import (
    NODE_CHECK_PERIOD,
    NodeLeftError,
    NodeWatch,
    Parking,
    listed_alive,
)
from escher.backends.ray._runner import CANCELLED, CLAIMED_IN_STORE, GATE_FAILED
from escher.backends.ray._shrink import waits_for_shrink
from escher.backends.ray._starts import SYNC_PERIOD, StartTracker, look_period
from escher.backends.ray._state import NodeCache, keep_running, ray_task_state, ray_up
from escher.backends.ray._store import EphemeralStore
from escher.backends.ray._submit import Submitter
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
        self._session = session_id
        self._store = store
        self._agents = agents
        self._arm_nodes = arm_nodes
        self._timeout = timeout
        self._explain_wait = explain_wait
        self._nodes = nodes
        self._watch = NodeWatch(nodes)
        self._parked = Parking(self._watch)
        self._held: list[Entry] = []  # held back by a pending shrink: submitted again soon
        self._submitter = Submitter(config, store)
        self._starts = StartTracker(
            Gate(config.prefix, session_id, agents, timeout),
            waiting=self._any_waiting,
            mark_started=self._mark_started,
            dead=self._watch.dead,
            wake=self._wake_sync,
        )
        self._seq = itertools.count(1)
        self._lock = threading.RLock()
        self._by_key: dict[str, Entry] = {}  # the current attempt's key -> its live entry
        # One bound method for every handle (a closure per handle would tie each handle and
        # its entry in a cycle that only Python's cyclic collector frees).
        self._cancel_handle = self._cancel_ref
        self._by_task_id: dict[str, Entry] = {}  # Ray task id of the current attempt -> entry
        self._waiter = Waiter(self._settle, timeout)
        self._syncer: threading.Thread | None = None
        self._wake = threading.Event()
        self._closed = False

    # --- entries -----------------------------------------------------------------------
    def new_entry(self, spec: TaskSpec, request: SplitRequest) -> Entry:
        """A tracked entry (and its handle) for `spec`; not submitted yet."""
        return self.new_entry_with(spec, request, self._submitter.options_of(request))

    def new_entry_with(
        self,
        spec: TaskSpec,
        request: SplitRequest,
        options: dict[str, Any],
        status: Status | None = None,
    ) -> Entry:
        """`new_entry` with the Ray options of `request` known (`options_of`) and, if
        given, the handle's first status."""
        key = f"{next(self._seq)}.0"
        entry = Entry(spec, request, options, key, self._cancel_handle, status)
        with self._lock:
            self._by_key[key] = entry
        return entry

    def options_of(self, request: SplitRequest) -> dict[str, Any]:
        """The Ray options of every attempt of a task with `request` (one dict per request
        object)."""
        return self._submitter.options_of(request)

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
        """The live entry of `ref` (the handle is the entry), if this table tracks it."""
        if not isinstance(ref, Entry):
            return None
        with self._lock:
            return ref if self._by_key.get(ref.key) is ref else None

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
        dead = self._watch.dead()
        if dead and getattr(strategy, "soft", False) and getattr(strategy, "node_id", "") in dead:
            strategy = None  # a placement hint to a node that died
        # A cancel waits until the attempt has its Ray task id. A settle here (and the
        # handle's callbacks) comes after the lock is let go.
        refused: Exception | None = None
        with entry.submitting:
            if entry.done():  # cancelled before it was submitted
                object_ref = None
            else:
                try:
                    object_ref = self._submitter.call(entry, strategy)
                except Exception as exc:
                    object_ref, refused = None, exc
                else:
                    entry.object_ref = object_ref
                    entry.task_id = object_ref.task_id().hex()
                    with self._lock:
                        self._by_task_id[entry.task_id] = entry
        if object_ref is None:
            if refused is None:
                self._drop(entry)
            else:
                error = task_error(f"Ray refused it: {refused}", entry, TaskFailedError)
                error.__cause__ = refused
                self._finish(entry, error=error)
            return
        self._waiter.add(object_ref, entry.key)
        self._ensure_threads()

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
            self._starts.learn()  # the body claimed its start before it raised: count it
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
            self._starts.forget_key(entry.task_id)
        node, value = out[0], out[1]
        entry.where = node
        with self._lock:
            if entry.key == key and entry.ref.state is TaskState.PENDING:
                entry.ref.set_running(node)
        self._finish(entry, value=value, key=key)

    def _on_lost(self, entry: Entry, exc: BaseException, key: str) -> None:
        lost = entry.ref.node_id or entry.where or entry.node
        if lost is not None:
            self._watch.died(lost)
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
        if self._watch.any_dead():
            # Ray's own view may still list a node escher saw die, and could send the new
            # attempt there: wait (bounded) until Ray drops it.
            self._parked.park(entry)
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
        """Start the parked retries that may start now."""
        for entry in self._parked.ready():
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
        self._starts.forget(task_id, node, key=entry.cancel_marked)
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
        submitted and is not known to have started, the sync thread is asked for a fresh
        look at the start gate first (`StartTracker.request_look`): its handle then says
        whether it runs. Changes nothing itself."""
        if entry.task_id and entry.ref.state is TaskState.PENDING:
            self._starts.request_look()
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
            never = self._starts.gate.cancel(list(submitted), alive=listed_alive)
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

    # --- running state -----------------------------------------------------------------
    def _ensure_threads(self) -> None:
        syncer = self._syncer
        if syncer is not None and syncer.is_alive():
            return
        with self._lock:
            self._syncer = keep_running(self._syncer, self._sync_loop, "escher-ray-sync")

    def _wake_sync(self) -> None:
        """Have the sync thread take its next turn now (someone asked for a look)."""
        self._wake.set()
        self._ensure_threads()

    def _sync_loop(self) -> None:
        """Learn which attempts started (and where) from the start gate, every `look_period`;
        at once when introspection asked for a look; every `NODE_CHECK_PERIOD`, put back in
        line the attempts whose node left the cluster."""
        last_check = last_look = time.monotonic()
        while not self._closed and ray_up():
            self._wake.wait(SYNC_PERIOD)
            self._wake.clear()
            if self._closed or not ray_up():
                return
            self._unpark()
            self._resubmit_held()
            due = time.monotonic() - last_look >= look_period(len(self._by_task_id))
            if due or self._starts.asked():
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

    def _any_waiting(self) -> bool:
        """Whether some submitted attempt is not known to have started."""
        with self._lock:
            return any(
                e.task_id and e.ref.state is TaskState.PENDING for e in self._by_key.values()
            )

    def _mark_started(self, started: dict[str, str]) -> None:
        """The start gate reported these attempts (Ray task id -> node) started."""
        with self._lock:
            for task_id, node in started.items():
                entry = self._by_task_id.get(task_id)
                if entry is not None and entry.ref.state is TaskState.PENDING:
                    entry.where = node
                    entry.ref.set_running(node)

    def _sync_once(self) -> bool:
        """One sync with the gate; True when the table is idle and the thread may stop."""
        with self._lock:
            idle = not self._by_key and not self._parked
        if not self._starts.learn():
            return False
        with self._lock:
            forgotten = self._starts.cleaned()
            if idle and forgotten and not self._by_key and not self._parked:
                self._syncer = None
                return True
        return False

    def node_died(self, node: str) -> bool:
        """Whether `node` is dead (see `NodeWatch.died`)."""
        return self._watch.died(node)

    def _check_nodes(self) -> None:
        """Attempts running on a node that left the cluster are lost: settle or retry them
        now, instead of waiting until Ray reports them (which can take many seconds)."""
        with self._lock:
            running = [e for e in self._by_key.values() if e.ref.state is TaskState.RUNNING]
        if not running:
            return
        gone = self._watch.gone({e.ref.node_id for e in running if e.ref.node_id is not None})
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
        self._wake.set()  # the sync thread stops now, not after its turn
        self._waiter.close()
        thread = self._syncer
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        with self._lock:
            settled = not self._by_key
        if settled:  # else a cancel mark must stay: left for garbage collection
            with contextlib.suppress(Exception):
                self._starts.gate.forget_session()
