"""Resize mode: ephemeral resources as real Ray custom resources on a live node.

Uses the GCS call Ray's autoscaler uses for in-place resize
(`GcsClient.resize_raylet_resource_instances`). Its reply is the node's new totals, so a
write is known at once; the GCS view used by readers catches up about 100 ms later, so
recent replies are overlaid on reads (read-your-writes). Other processes learn a write
through the control actor: writes are buffered and sent in batches by a flusher thread
(off the caller's path), and flushed synchronously wherever causality leaves this process
(before it submits a task, before a task body's result is returned, on a read of the shared
view, at close), so a reader that could know of a write also sees it; where two writes of
the same resource meet, the one stamped later wins. Ray silently keeps a capacity that is
still in use when asked to shrink below it; such writes are remembered and re-applied (by a
small reconciler thread) until the node reports the asked capacity.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from escher.backends.ray._state import ray_up, wait_for
from escher.core.errors import BackendError, UnknownNodeError

EPS = 1e-9
#: Ray versions whose resize call escher was tested against.
TESTED_RAY_VERSIONS = frozenset({"2.60.0"})
#: Ray stores quantities as int64 ten-thousandths (about 9.2e14 at most); larger capacities
#: (escher.MAX_CAPACITY means "unbounded") are stored as this and read back as MAX_CAPACITY.
RAY_MAX_CAPACITY = 1e14
#: Seconds the flusher waits after a write, to send the writes of a burst in one call.
FLUSH_DELAY = 0.025


def resize_call() -> Callable[[str, dict[str, float]], dict[str, float]] | None:
    """The resize method of this process's GCS client, or None if this Ray lacks it."""
    import ray

    gcs = getattr(ray._private.worker.global_worker, "gcs_client", None)
    method = getattr(gcs, "resize_raylet_resource_instances", None)
    return method if callable(method) else None


class ResizeStore:
    """Applies ephemeral capacities with the resize call; keeps an overlay and a to-do list."""

    def __init__(
        self,
        prefix: str,
        control: Callable[[], Any],
        *,
        overlay_seconds: float = 1.0,
        share_writes: bool = True,
        timeout: float = 60.0,
    ) -> None:
        call = resize_call()
        if call is None:
            raise BackendError("this Ray has no resize_raylet_resource_instances; use ledger.")
        self._call = call
        self._prefix = prefix
        self._control = control
        self._share = share_writes
        self._timeout = timeout
        self._overlay_seconds = overlay_seconds
        self._lock = threading.Lock()
        # (node, Ray name) -> (monotonic time, total, wall-clock stamp) of this process's writes
        self._overlay: dict[tuple[str, str], tuple[float, float, float]] = {}
        self._outbox: dict[tuple[str, str], tuple[float, float]] = {}  # not sent yet
        self._flush_lock = threading.Lock()  # one send at a time, in order
        self._flush_wake = threading.Event()
        self._flusher: threading.Thread | None = None
        self._pending: dict[tuple[str, str], float] = {}  # (node, ray name) -> wanted
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def window(self) -> float:
        """Seconds a write stays in the overlay (Ray's view has caught up by then)."""
        return self._overlay_seconds

    # --- writes ------------------------------------------------------------------------
    def apply(self, node: str, label: str, capacity: float) -> float:
        """Set `label` on `node`; return the capacity Ray now reports (may differ: in use)."""
        name = self._prefix + label
        capacity = min(capacity, RAY_MAX_CAPACITY)
        with self._lock:
            try:
                totals = self._call(node, {name: capacity})
            except ValueError as exc:  # "Raylet ... is not alive."
                self._pending.pop((node, name), None)
                raise UnknownNodeError(
                    f"node {node!r} is not an alive Ray node ({exc}); read "
                    "escher.get_cluster_state() for the current node ids."
                ) from None
            actual = float(totals.get(name, 0.0))
            self._remember(node, name, actual)
            if abs(actual - capacity) > EPS:
                self._pending[(node, name)] = capacity
                self._ensure_reconciler()
            else:
                self._pending.pop((node, name), None)
        return actual

    def _remember(self, node: str, name: str, total: float) -> None:
        stamp = time.time()
        self._overlay[(node, name)] = (time.monotonic(), total, stamp)
        if self._share:  # sent by the flusher, or by a synchronous flush, whichever is first
            self._outbox[(node, name)] = (total, stamp)
            self._ensure_flusher()

    # --- sharing writes ----------------------------------------------------------------
    def _take_outbox(self) -> list[tuple[str, str, float, float]]:
        with self._lock:
            out, self._outbox = self._outbox, {}
        return [(node, name, total, stamp) for (node, name), (total, stamp) in out.items()]

    def flush(self, timeout: float) -> None:
        """Make every write of this process so far visible to readers in any process.

        Returns at once when nothing is unsent and no send is in flight. Raises what the
        control actor call raised (e.g. TimeoutError); the writes are then sent again later.
        """
        if not self._share or (not self._outbox and not self._flush_lock.locked()):
            return
        with self._flush_lock:  # waits for a send in flight, which may hold older writes
            self._send(self._take_outbox(), timeout)

    def _send(self, writes: list[tuple[str, str, float, float]], timeout: float) -> None:
        if not writes or not ray_up():
            return
        try:
            wait_for(self._control().notes.remote(writes), timeout)
        except Exception:
            self._requeue(writes)
            raise

    def _ensure_flusher(self) -> None:  # called with self._lock held
        self._flush_wake.set()
        if self._flusher is None or not self._flusher.is_alive():
            self._flusher = threading.Thread(
                target=self._flush_loop, name="escher-ray-flush", daemon=True
            )
            self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._closed and ray_up():
            if not self._flush_wake.wait(1.0):
                with self._lock:
                    if not self._outbox:  # idle: the next write starts a new flusher
                        self._flusher = None
                        return
                continue
            time.sleep(FLUSH_DELAY)  # let a burst of writes gather
            self._flush_wake.clear()
            if not self._outbox:
                continue
            with contextlib.suppress(Exception), self._flush_lock:
                self._send(self._take_outbox(), self._timeout)

    # --- reads -------------------------------------------------------------------------
    def start_recent(self) -> _Recent:
        """Start reading node -> ephemeral totals (Ray names) written by any process in the
        overlay window; collect it with `.result(timeout)` (so a caller can read Ray
        meanwhile). Sends this process's unsent writes in the same call; where the shared
        view and this process's own writes disagree, the newer write wins."""
        writes = self._take_outbox() if self._share else []
        future: Any = None
        if self._share:
            try:
                future = self._control().exchange.remote(writes, self._overlay_seconds).future()
            except Exception:
                self._requeue(writes)
                writes = []
        return _Recent(self, future, writes)

    def _requeue(self, writes: list[tuple[str, str, float, float]]) -> None:
        with self._lock:  # keep them, unless a newer write of the same key came
            for node, name, total, stamp in writes:
                self._outbox.setdefault((node, name), (total, stamp))

    def _merge(
        self, shared: dict[tuple[str, str], tuple[float, float]]
    ) -> dict[str, dict[str, float]]:
        now = time.monotonic()
        merged = dict(shared)
        with self._lock:
            for key in [
                k for k, (t, _, _) in self._overlay.items() if now - t > self._overlay_seconds
            ]:
                del self._overlay[key]
            for key, (_, total, stamp) in self._overlay.items():
                if key not in merged or stamp > merged[key][1]:
                    merged[key] = (total, stamp)
        out: dict[str, dict[str, float]] = {}
        for (node, name), (total, _) in merged.items():
            out.setdefault(node, {})[name] = total
        return out

    # --- reconciling shrinks that Ray ignored -------------------------------------------
    def poke(self) -> None:
        """Something was released: retry pending shrinks now."""
        if self._pending:
            self._wake.set()

    def pending(self) -> dict[tuple[str, str], float]:
        """(node, Ray resource name) -> capacity still to be applied."""
        with self._lock:
            return dict(self._pending)

    def _ensure_reconciler(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(
                target=self._reconcile, name="escher-ray-reconcile", daemon=True
            )
            self._thread.start()

    def _reconcile(self) -> None:
        while not self._closed and ray_up():
            self._wake.wait(0.2)
            self._wake.clear()
            if self._closed or not ray_up():
                return
            with self._lock:
                for (node, name), wanted in list(self._pending.items()):
                    try:
                        totals = self._call(node, {name: wanted})
                    except ValueError:  # the node left: nothing to shrink any more
                        del self._pending[(node, name)]
                        continue
                    except Exception:  # GCS hiccup: try again on the next round
                        continue
                    actual = float(totals.get(name, 0.0))
                    self._remember(node, name, actual)
                    if abs(actual - wanted) <= EPS:
                        del self._pending[(node, name)]
                if not self._pending:
                    self._thread = None
                    return

    def close(self, timeout: float) -> None:
        """Send the unsent writes; stop the reconciler and the flusher (and wait for them, so
        that nothing calls Ray after the caller disconnects)."""
        with contextlib.suppress(Exception):
            self.flush(timeout)
        self._closed = True
        self._wake.set()
        self._flush_wake.set()
        for thread in (self._flusher, self._thread):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=1.0)


class _Recent:
    """A `ResizeStore.recent` read in flight."""

    def __init__(
        self, store: ResizeStore, future: Any, writes: list[tuple[str, str, float, float]]
    ) -> None:
        self._store, self._future, self._writes = store, future, writes

    def result(self, timeout: float) -> dict[str, dict[str, float]]:
        """The merged view; this process's writes only if the control actor did not answer."""
        shared: dict[tuple[str, str], tuple[float, float]] = {}
        if self._future is not None:
            try:
                shared = self._future.result(timeout=timeout)
            except Exception:  # unreachable or slow: this process's writes only
                self._store._requeue(self._writes)
        return self._store._merge(shared)
