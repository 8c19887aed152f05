"""Resize mode: ephemeral resources as real Ray custom resources on a live node.

Uses the GCS call Ray's autoscaler uses for in-place resize
(`GcsClient.resize_raylet_resource_instances`, feature-detected: present and working). One
call per node sets every label of a write on that node; writes to different nodes run
concurrently (a bounded pool). Its reply is the node's new totals, so a write is known at
once; `escher.backends.ray._writelog` makes it visible to reads in every process before
Ray's own view catches up.

Ray lowers a total by at most what is available, so a shrink below what is in use leaves
Ray's total at the use. escher emulates the decided semantics: the total is reported as
asked, the shrink is recorded as pending at the control actor, whose start gate holds back
any task that would take the label above the asked capacity (`escher.backends.ray._shrink`:
Ray would hand a freed unit to a late task before a resize could take it away), and a
reconciler applies the asked capacity in Ray once the use drops.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from escher.backends.ray._entry import Entry
from escher.backends.ray._shrink import SHRINK_LEASE
from escher.backends.ray._state import (
    PROBE_PREFIX,
    RawView,
    is_ray_internal,
    keep_running,
    node_affinity,
    ray_up,
    resize_call,
    wait_for,
    wakeups,
)
from escher.backends.ray._store import EphemeralStore, EphemeralView, Submit, WritePlan
from escher.backends.ray._writelog import RecentWrites, WriteLog
from escher.core.errors import BackendError, UnknownNodeError
from escher.core.resources import EPSILON, MAX_CAPACITY

EPS = 1e-9
#: Ray stores quantities as int64 ten-thousandths (about 9.2e14 at most); larger capacities
#: (escher.MAX_CAPACITY means "unbounded") are stored as this and read back as MAX_CAPACITY.
RAY_MAX_CAPACITY = 1e14
#: Nodes written at once by one bulk write.
WRITE_POOL = 8
#: Seconds a read's knowledge of freshly written labels is used for placement hints.
HINT_SECONDS = 1.0


def probe_resize() -> str | None:
    """Feature-detect the resize call: None if it creates and deletes a custom resource on a
    live node as escher needs, else why not."""
    import ray._private.state as ray_state

    call = resize_call()
    if call is None:
        return "this Ray's GcsClient has no resize_raylet_resource_instances"
    from escher.backends.ray._control import head_node_id

    head = head_node_id()  # alive as long as the cluster is
    nodes = [head] if head else sorted(ray_state.total_resources_per_node())  # type: ignore[no-untyped-call]
    if not nodes:
        return "no alive node to probe the resize call on"
    name = f"{PROBE_PREFIX}{uuid.uuid4().hex[:8]}"  # never shown as a label (`is_ray_internal`)
    try:
        created = call(nodes[0], {name: 1.5})
        deleted = call(nodes[0], {name: 0})
    except Exception as exc:
        return f"the resize call failed ({type(exc).__name__}: {exc})"
    if abs(float(created.get(name, 0.0)) - 1.5) > EPS or name in deleted:
        return "the resize call did not create and delete a custom resource"
    return None


def outlast_marker_reads() -> None:
    """Wait until every worker's read of a node marker sent before this write published a
    pending shrink has expired: once per write call (the argument is beside
    `escher.backends.ray._shrink.SHRINK_LEASE`)."""
    time.sleep(SHRINK_LEASE)


class ResizeStore(EphemeralStore):
    """Applies ephemeral capacities with the resize call; Ray's scheduler does the matching."""

    mode = "resize"

    def __init__(
        self,
        prefix: str,
        control: Callable[[], Any],
        *,
        session_id: str,
        share_writes: bool = True,
        timeout: float = 60.0,
        node_gone: Callable[[str], bool] = lambda node: False,
    ) -> None:
        call = resize_call()
        if call is None:
            raise BackendError("this Ray has no resize_raylet_resource_instances; use ledger.")
        self._call = call
        self._node_gone = node_gone
        self._prefix = prefix
        self._control = control
        self._timeout = timeout
        self.log = WriteLog(control, session_id=session_id, share=share_writes, timeout=timeout)
        self._lock = threading.Lock()
        self._node_locks: dict[str, threading.Lock] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[tuple[str, str], float] = {}  # (node, Ray name) -> wanted
        # (node, Ray name) -> (capacity, stamp) of pending shrinks the control actor knows
        self._announced: dict[tuple[str, str], tuple[float, float]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._fresh: tuple[float, dict[str, list[str]]] = (-1e9, {})

    # --- writes ------------------------------------------------------------------------
    def write(self, plan: WritePlan) -> None:
        items = [(node, caps) for node, caps in plan.items() if caps]
        if len(items) <= 1:
            announced = [self._write_node(node, caps) for node, caps in items]
        else:
            with self._lock:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        WRITE_POOL, thread_name_prefix="escher-ray-write"
                    )
                pool = self._pool
            futures = [pool.submit(self._write_node, node, caps) for node, caps in items]
            errors = [f.exception() for f in futures]
            for error in errors:
                if error is not None:
                    raise error
            announced = [f.result() for f in futures]
        if any(announced):
            outlast_marker_reads()

    def _node_lock(self, node: str) -> threading.Lock:
        with self._lock:
            return self._node_locks.setdefault(node, threading.Lock())

    def _write_node(self, node: str, capacities: Mapping[str, float]) -> bool:
        """One resize call for every label of `capacities` on `node`; True if it announced a
        new pending shrink (`_announce`)."""
        wanted = {self._prefix + k: min(float(v), RAY_MAX_CAPACITY) for k, v in capacities.items()}
        with self._node_lock(node):
            self._end_replaced(node, wanted)
            try:
                totals = self._call(node, dict(wanted))
            except Exception as exc:  # "Raylet ... is not alive." (or its raylet is gone)
                if not isinstance(exc, ValueError) and not self._node_gone(node):
                    raise
                with self._lock:
                    for name in wanted:
                        self._pending.pop((node, name), None)
                raise UnknownNodeError(
                    f"node {node!r} is not an alive Ray node ({exc}); read "
                    "escher.get_cluster_state() for the current node ids."
                ) from None
            ignored = {n: c for n, c in wanted.items() if abs(totals.get(n, 0.0) - c) > EPS}
            if ignored:
                totals.update(self._hold_at_use(node, ignored, totals))
            with self._lock:
                for name, capacity in wanted.items():
                    self.log.remember(node, name, capacity)
                    if name in ignored and abs(totals.get(name, 0.0) - capacity) > EPS:
                        self._pending[(node, name)] = capacity
                    else:
                        self._pending.pop((node, name), None)
                if self._pending:
                    self._ensure_reconciler()
            return self._announce(node, wanted)

    def _end_replaced(self, node: str, wanted: Mapping[str, float]) -> None:
        """Before a write that replaces a pending shrink's capacity: end that pending shrink at
        the control actor and wait (an admission in flight there applies the old capacity
        before this write, never after it)."""
        with self._lock:
            names = [
                name
                for name, capacity in wanted.items()
                if (node, name) in self._announced
                and abs(self._announced[(node, name)][0] - capacity) > EPS
            ]
        if not names:
            return
        with contextlib.suppress(Exception):
            over = self._control().shrink_over
            wait_for(over.remote(self._prefix, node, names, time.time()), self._timeout)
        with self._lock:
            for name in names:
                self._announced.pop((node, name), None)

    def _announce(self, node: str, names: Mapping[str, float]) -> bool:
        """Tell the control actor which shrinks of `names` on `node` are pending now and which
        are over; True if it announced a new pending shrink (the write then waits
        `SHRINK_LEASE` before it returns)."""
        with self._lock:
            start: dict[str, float] = {}
            over: list[str] = []
            for name in names:
                capacity = self._pending.get((node, name))
                known = self._announced.get((node, name))
                if capacity is not None and (known is None or abs(known[0] - capacity) > EPS):
                    start[name] = capacity
                elif capacity is None and known is not None:
                    over.append(name)
        if not start and not over:
            return False
        stamp = time.time()
        try:
            control = self._control()
            if over:  # order does not matter: the actor compares stamps
                control.shrink_over.remote(self._prefix, node, over, stamp)
            if start:
                wait_for(
                    control.shrink_pending.remote(self._prefix, node, start, stamp),
                    self._timeout,
                )
        except Exception:  # the reconciler announces it again on its next round
            return False
        with self._lock:
            for name in over:
                self._announced.pop((node, name), None)
            for name, capacity in start.items():
                if self._pending.get((node, name)) == capacity:
                    self._announced[(node, name)] = (capacity, stamp)
        return bool(start)

    def _hold_at_use(
        self, node: str, ignored: Mapping[str, float], totals: Mapping[str, float]
    ) -> dict[str, float]:
        """Ray kept totals it was asked to shrink below their use: lower them to the use, so
        nothing new starts on them (the asked capacity is applied once the use drops)."""
        import ray._private.state as ray_state

        try:
            avail = ray_state.available_resources_per_node().get(node, {})  # type: ignore[no-untyped-call]
        except Exception:
            return {}
        hold: dict[str, float] = {}
        for name, capacity in ignored.items():
            in_use = float(totals.get(name, 0.0)) - float(avail.get(name, 0.0))
            target = max(capacity, in_use)
            if target < float(totals.get(name, 0.0)) - EPS:
                hold[name] = target
        if not hold:
            return {}
        try:
            return {n: float(v) for n, v in self._call(node, hold).items() if n in hold}
        except Exception:
            return {}

    def _ensure_reconciler(self) -> None:  # called with self._lock held
        self._thread = keep_running(self._thread, self._reconcile, "escher-ray-reconcile")

    def _running(self) -> bool:
        return not self._closed and ray_up()

    def _reconcile(self) -> None:
        for _ in wakeups(self._wake, 0.2, self._running):
            with self._lock:
                todo = dict(self._pending)
            by_node: dict[str, dict[str, float]] = {}
            for (node, name), capacity in todo.items():
                by_node.setdefault(node, {})[name[len(self._prefix) :]] = capacity
            for node, caps in by_node.items():
                try:
                    self._write_node(node, caps)
                except UnknownNodeError:  # the node left: nothing to shrink any more
                    continue  # (_write_node dropped its pending shrinks)
                except Exception:  # a GCS hiccup: try again on the next round
                    continue
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return

    def pending_shrinks(self) -> dict[tuple[str, str], float]:
        cut = len(self._prefix)
        with self._lock:
            return {(node, name[cut:]): cap for (node, name), cap in self._pending.items()}

    # --- reads -------------------------------------------------------------------------
    def begin_read(self) -> _ResizeRead:
        return _ResizeRead(self, self.log.start_recent())

    def view(self, raw: RawView, recent: dict[str, dict[str, float]]) -> EphemeralView:
        """The ephemeral part of each node: Ray's totals, recent writes on top, asked
        capacities of pending shrinks as totals."""
        with self._lock:
            pending = dict(self._pending)
        out: EphemeralView = {}
        for node, totals in raw.total.items():
            out[node] = self._node_view(
                node, totals, raw.available.get(node, {}), recent.get(node), pending
            )
        self._note_fresh(recent, out)
        return out

    def _node_view(
        self,
        node: str,
        totals: Mapping[str, float],
        avail_raw: Mapping[str, float],
        overlay: dict[str, float] | None,
        pending: Mapping[tuple[str, str], float],
    ) -> tuple[dict[str, float], dict[str, float]]:
        prefix, cut = self._prefix, len(self._prefix)
        gcs = {
            k: float(v)
            for k, v in totals.items()
            if k.startswith(prefix) and not is_ray_internal(k)
        }
        current = {**gcs, **(overlay or {})}
        eph_total: dict[str, float] = {}
        eph_avail: dict[str, float] = {}
        for name, raw_total in current.items():
            total = pending.get((node, name), raw_total)
            if total <= EPSILON:
                continue
            in_use = max(0.0, gcs[name] - float(avail_raw.get(name, 0.0))) if name in gcs else 0.0
            if total >= RAY_MAX_CAPACITY:  # stored clamped: it was set as unbounded
                total = MAX_CAPACITY
            eph_total[name[cut:]] = total
            if (node, name) in pending:  # Ray kept it at what is in use, above the total
                eph_avail[name[cut:]] = 0.0  # (Ray's state view may not show that use yet)
            else:
                eph_avail[name[cut:]] = min(total, max(0.0, total - in_use))
        return eph_total, eph_avail

    def _note_fresh(self, recent: dict[str, dict[str, float]], view: EphemeralView) -> None:
        """Remember where labels written in the overlay window are (see `dispatch`)."""
        cut = len(self._prefix)
        fresh = {name[cut:] for writes in recent.values() for name in writes}
        where: dict[str, list[str]] = {}
        for node, (totals, _) in view.items():
            for label in fresh.intersection(totals):
                where.setdefault(label, []).append(node)
        self._fresh = (time.monotonic(), where)

    # --- tasks -------------------------------------------------------------------------
    def ray_resources(self, labels: Mapping[str, float]) -> dict[str, float]:
        return {self._prefix + k: q for k, q in labels.items()}

    def dispatch(self, entry: Entry, submit: Submit) -> None:
        """Submit now. A task whose labels were all written in the last second on exactly
        one node goes straight to that node's raylet (soft node affinity): its view of its
        own resources is current, while the rest of Ray learns of them about 100 ms later.
        If the label is gone, Ray schedules the task as usual."""
        hint = self._hint(entry.request.labels)
        submit(entry, None if hint is None else node_affinity(hint, soft=True))

    def _hint(self, labels: Mapping[str, float]) -> str | None:
        at, where = self._fresh
        if not labels or time.monotonic() - at > HINT_SECONDS:
            return None
        candidates: set[str] | None = None
        for label in labels:
            nodes = set(where.get(label, ()))
            candidates = nodes if candidates is None else candidates & nodes
        if candidates is None or len(candidates) != 1:
            return None
        return next(iter(candidates))

    def release(self, entry: Entry) -> None:
        if self._pending:
            self._wake.set()

    def reserve_gang(self, entries: Sequence[Entry]) -> list[str] | None:
        return []  # the placement group reserves the labels with the rest

    def flush(self) -> None:
        try:
            self.log.flush(self._timeout)
        except Exception:  # best effort: sent later, or seen when Ray's view catches up
            return

    # --- readiness -------------------------------------------------------------------------
    @property
    def waits_for_labels(self) -> bool:
        return self.log.shared

    def wait_for_labels(self, labels: Sequence[str], timeout: float) -> bool:
        if not self.waits_for_labels:
            return False
        names = {self._prefix + label: label for label in labels}
        try:
            self.flush()
            ref = self._control().written.remote(list(names), self.log.window, timeout)
            where = wait_for(ref, timeout + self._timeout)
        except Exception:
            return False
        if where is None:
            return False
        at, known = self._fresh
        if time.monotonic() - at > HINT_SECONDS:
            known = {}
        self._fresh = (
            time.monotonic(),
            {**known, **{names[name]: list(nodes) for name, nodes in where.items()}},
        )
        return True

    def describe_task(self, entry: Entry) -> dict[str, Any]:
        if not entry.request.labels:
            return {}
        return {"ray_resources": self.ray_resources(entry.request.labels)}

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "share_writes": self.log.shared}

    def close(self) -> None:
        self.log.close(self._timeout)
        self._closed = True
        with self._lock:
            announced, self._announced = self._announced, {}
        by_node: dict[str, list[str]] = {}
        for node, name in announced:  # nobody applies them any more: stop holding tasks back
            by_node.setdefault(node, []).append(name)
        with contextlib.suppress(Exception):
            for node, names in by_node.items():
                self._control().shrink_over.remote(self._prefix, node, names, time.time())
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False)


class _ResizeRead:
    def __init__(self, store: ResizeStore, recent: RecentWrites) -> None:
        self._store, self._recent = store, recent

    def finish(self, raw: RawView) -> EphemeralView:
        return self._store.view(raw, self._recent.result(self._store._timeout))

    def abandon(self) -> None:
        self._recent.abandon()
