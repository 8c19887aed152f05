"""Ledger mode: ephemeral resources kept in the control actor's table, tasks pinned to nodes.

For Ray versions without the resize call. The control actor holds node -> label ->
(total, used) and grants units atomically; a dispatcher thread in the launching process
keeps the tasks that wait for units (FIFO, but a waiting task does not block others), asks
the actor for grants, and submits granted tasks pinned with `NodeAffinitySchedulingStrategy`.
Ray still accounts for CPU/GPU/memory on the chosen node.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.backends.ray._state import ray_up, wait_for
from escher.core.resources import Resources


@dataclass
class Waiting:
    """A task waiting for ephemeral units."""

    key: str
    units: dict[str, float]
    physical: Resources
    submit: Callable[[str], None]  # called with the granted node id
    extra: dict[str, Any] = field(default_factory=dict)


class LedgerQueue:
    """Tasks waiting for ephemeral units, and the thread that gets them granted."""

    def __init__(
        self,
        control: Callable[[], Any],
        candidates: Callable[[Resources], list[str]],
        timeout: float,
    ) -> None:
        self._control = control
        self._candidates = candidates
        self._timeout = timeout
        self._lock = threading.Lock()
        self._waiting: dict[str, Waiting] = {}
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, item: Waiting) -> None:
        """Queue a task; it is submitted once its units are granted."""
        with self._lock:
            self._waiting[item.key] = item
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="escher-ray-ledger", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def remove(self, key: str) -> bool:
        """Drop a waiting task; True if it was still waiting (so it will never run)."""
        with self._lock:
            return self._waiting.pop(key, None) is not None

    def poke(self) -> None:
        """Units may have appeared: try again now."""
        self._wake.set()

    def release(self, node: str, units: Mapping[str, float]) -> None:
        """Return units to the ledger (ordered before this process's next acquire)."""
        self._control().release.remote(node, dict(units))  # actor calls keep their order
        self._wake.set()

    def close(self) -> list[Waiting]:
        """Stop the dispatcher; return what was still waiting."""
        self._closed = True
        self._wake.set()
        with self._lock:
            left, self._waiting = list(self._waiting.values()), {}
        return left

    def _run(self) -> None:

        while not self._closed and ray_up():
            self._wake.wait(0.1)
            self._wake.clear()
            if self._closed or not ray_up():
                return
            with self._lock:
                batch = list(self._waiting.values())
            if not batch:
                with self._lock:
                    if not self._waiting:
                        self._thread = None
                        return
                continue
            requests = [(w.key, w.units, self._candidates(w.physical)) for w in batch]
            try:
                granted = wait_for(self._control().acquire.remote(requests), self._timeout)
            except Exception:  # the actor is restarting or busy: retry on the next round
                continue
            for item in batch:
                node = granted.get(item.key)
                if node is None:
                    continue
                with self._lock:
                    still = self._waiting.pop(item.key, None) is not None
                if still:
                    item.submit(node)
                else:  # cancelled between the batch read and the grant
                    self.release(node, item.units)
