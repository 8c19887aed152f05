"""Resize mode: ephemeral resources as real Ray custom resources on a live node.

Uses the GCS call Ray's autoscaler uses for in-place resize
(`GcsClient.resize_raylet_resource_instances`). Its reply is the node's new totals, so a
write is known at once; the GCS view used by readers catches up about 100 ms later, so
recent replies are overlaid on reads (read-your-writes). Ray silently keeps a capacity that
is still in use when asked to shrink below it; such writes are remembered and re-applied
(by a small reconciler thread) until the node reports the asked capacity.
"""

from __future__ import annotations

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
    ) -> None:
        call = resize_call()
        if call is None:
            raise BackendError("this Ray has no resize_raylet_resource_instances; use ledger.")
        self._call = call
        self._prefix = prefix
        self._control = control
        self._share = share_writes
        self._overlay_seconds = overlay_seconds
        self._lock = threading.Lock()
        self._overlay: dict[tuple[str, str], tuple[float, float]] = {}
        self._pending: dict[tuple[str, str], float] = {}  # (node, ray name) -> wanted
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False

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
        self._overlay[(node, name)] = (time.monotonic(), total)
        # Shared through the control actor, in the caller's path: the call is queued before
        # set_resource returns, so a read that starts later (in any process) sees it.
        if self._share:
            self._control().note.remote(node, name, total)

    # --- reads -------------------------------------------------------------------------
    def recent(self, timeout: float) -> dict[str, dict[str, float]]:
        """Node -> ephemeral totals (Ray names) written by any process in the overlay window."""

        try:
            if not self._share:
                raise LookupError("writes are not shared")
            shared: dict[str, dict[str, float]] = wait_for(
                self._control().recent.remote(self._overlay_seconds), timeout
            )
            return shared
        except Exception:  # not shared, or the actor is unreachable: this process's writes
            pass
        now = time.monotonic()
        out: dict[str, dict[str, float]] = {}
        with self._lock:
            for key in [
                k for k, (t, _) in self._overlay.items() if now - t > self._overlay_seconds
            ]:
                del self._overlay[key]
            for (node, name), (_, total) in self._overlay.items():
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

    def close(self) -> None:
        """Stop the reconciler."""
        self._closed = True
        self._wake.set()
