"""Ledger mode: ephemeral resources kept in the control actor's table, tasks pinned to nodes.

For Ray versions without a working resize call. The control actor holds node -> label ->
(total, used) and grants units atomically; a dispatcher thread in the launching process
keeps the tasks that wait for units (FIFO, but a waiting task does not block others), asks
the actor for grants, and submits granted tasks pinned with `NodeAffinitySchedulingStrategy`.
Ray still accounts for CPU, GPU and memory on the chosen node. Units given back travel with
the next grant call (one actor call for a batch of grants and releases, not one per task).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escher.backends.ray._entry import Entry
from escher.backends.ray._state import (
    RawView,
    keep_running,
    node_affinity,
    ray_up,
    wait_for,
    wakeups,
)
from escher.backends.ray._store import EphemeralStore, EphemeralView, Submit, WritePlan
from escher.core.errors import UnknownNodeError
from escher.core.resources import Resources
from escher.core.task import Status, StatusCode


@dataclass
class Waiting:
    """A task waiting for ephemeral units."""

    key: str
    units: dict[str, float]
    physical: Resources
    granted: Callable[[str], None]  # called with the granted node id


class LedgerStore(EphemeralStore):
    """Ephemeral units in the control actor's table; tasks are pinned to granted nodes."""

    mode = "ledger"

    def __init__(
        self,
        control: Callable[[], Any],
        candidates: Callable[[Resources], list[str]],
        *,
        session_id: str,
        timeout: float = 60.0,
    ) -> None:
        self._control = control
        self._candidates = candidates
        self._session = session_id
        self._timeout = timeout
        self._lock = threading.Lock()
        self._waiting: dict[str, Waiting] = {}
        self._releases: list[tuple[str, dict[str, float]]] = []  # not sent to the actor yet
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    # --- writes and reads --------------------------------------------------------------
    def write(self, plan: WritePlan) -> None:
        """One actor call for every node of `plan` (checked alive first: all or nothing)."""
        import ray._private.state as ray_state

        alive = ray_state.total_resources_per_node()  # type: ignore[no-untyped-call]
        for node in plan:
            if node not in alive:
                raise UnknownNodeError(
                    f"node {node!r} is not an alive Ray node; read escher.get_cluster_state() "
                    "for the current node ids."
                )
        changes = {node: dict(caps) for node, caps in plan.items() if caps}
        wait_for(self._control().set_many.remote(changes, self._session), self._timeout)
        self._wake.set()

    def begin_read(self) -> _LedgerRead:
        return _LedgerRead(self, self._control().table.remote().future())

    def view(self, raw: RawView, table: Any) -> EphemeralView:
        """The ephemeral part of each alive node, from the actor's table."""
        _, totals, used = table
        alive = set(raw.total)
        if set(totals) - alive or set(used) - alive:
            self._control().purge.remote(sorted(alive))
        out: EphemeralView = {}
        for node in raw.total:
            total = dict(totals.get(node, {}))
            in_use = used.get(node, {})
            out[node] = (total, {k: max(0.0, v - in_use.get(k, 0.0)) for k, v in total.items()})
        return out

    # --- tasks -------------------------------------------------------------------------
    def ray_resources(self, labels: Mapping[str, float]) -> dict[str, float]:
        return {}  # Ray never sees ephemeral labels in this mode

    def dispatch(self, entry: Entry, submit: Submit) -> None:
        def granted(node: str) -> None:
            entry.node = node  # given back when it settles (at once if cancelled meanwhile)
            entry.ref.set_status(Status(StatusCode.PENDING, f"granted its units on {node}"))
            submit(entry, node_affinity(node, soft=False))

        if not entry.ref.retries:  # a retry's status already says what it waits for
            entry.ref.set_status(
                Status(
                    StatusCode.UNSCHEDULABLE,
                    f"waiting for ephemeral units {entry.request.labels} on some node",
                )
            )
        self._add(Waiting(entry.key, dict(entry.request.labels), entry.request.physical, granted))

    def withdraw(self, entry: Entry) -> bool:
        with self._lock:
            return self._waiting.pop(entry.key, None) is not None

    def release(self, entry: Entry) -> None:
        node, entry.node = entry.node, None
        if node is not None and entry.request.labels:
            self._release(node, entry.request.labels)

    def _release(self, node: str, units: Mapping[str, float]) -> None:
        """Give back `units` on `node` with the dispatcher's next actor call."""
        with self._lock:
            self._releases.append((node, dict(units)))
            self._thread = keep_running(self._thread, self._run, "escher-ray-ledger")
        self._wake.set()

    def _take_releases(self) -> list[tuple[str, dict[str, float]]]:
        with self._lock:
            releases, self._releases = self._releases, []
        return releases

    def _unsent(self, releases: list[tuple[str, dict[str, float]]]) -> None:
        """Releases whose call could not be sent: first in line for the next one."""
        with self._lock:
            self._releases[:0] = releases

    def reserve_gang(self, entries: Sequence[Entry]) -> list[str] | None:
        requests = [
            (e.key, dict(e.request.labels), self._candidates(e.request.physical)) for e in entries
        ]
        releases = self._take_releases()
        try:
            call = self._control().acquire_all.remote(requests, releases)
        except Exception:
            self._unsent(releases)
            raise
        granted = wait_for(call, self._timeout)
        if granted is None:
            return None
        for entry, node in zip(entries, granted, strict=True):
            entry.node = node or None
        return list(granted)

    def unreserve_gang(self, entries: Sequence[Entry]) -> None:
        for entry in entries:
            self.release(entry)

    # --- the dispatcher ----------------------------------------------------------------
    def _add(self, item: Waiting) -> None:
        with self._lock:
            self._waiting[item.key] = item
            self._thread = keep_running(self._thread, self._run, "escher-ray-ledger")
        self._wake.set()

    def _running(self) -> bool:
        return not self._closed and ray_up()

    def _run(self) -> None:
        for _ in wakeups(self._wake, 0.1, self._running):
            if not self._round():
                return

    def _round(self) -> bool:
        """One grant call for what waits, with the releases so far; False once there is
        nothing to do (the thread stops). A function of its own, so that nothing of a round
        stays referenced while the thread waits for the next."""
        with self._lock:
            batch = list(self._waiting.values())
            releases, self._releases = self._releases, []
            if not batch and not releases:
                self._thread = None
                return False
        requests = [(w.key, w.units, self._candidates(w.physical)) for w in batch]
        try:
            call = self._control().acquire.remote(requests, releases)
        except Exception:  # not sent: the releases go with the next round
            self._unsent(releases)
            return True
        try:  # sent: its releases are never sent again (they would count twice)
            granted = wait_for(call, self._timeout)
        except Exception:  # the actor is restarting or busy: retry on the next round
            return True
        for item in batch:
            node = granted.get(item.key)
            if node is None:
                continue
            with self._lock:
                still = self._waiting.pop(item.key, None) is not None
            if still:
                item.granted(node)
            else:  # withdrawn between the batch read and the grant
                self._release(node, item.units)
        return True

    def describe(self) -> dict[str, Any]:
        with self._lock:
            waiting = len(self._waiting)
        return {"mode": self.mode, "waiting_for_units": waiting}

    def describe_task(self, entry: Entry) -> dict[str, Any]:
        with self._lock:
            waiting = entry.key in self._waiting
        facts: dict[str, Any] = {"units_granted_on": entry.node}
        if waiting:
            facts["waiting_for_units"] = dict(entry.request.labels)
        return facts

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        with self._lock:
            self._waiting = {}
        releases = self._take_releases()
        if releases:
            with contextlib.suppress(Exception):
                self._control().acquire.remote([], releases)


class _LedgerRead:
    def __init__(self, store: LedgerStore, future: Any) -> None:
        self._store, self._future = store, future

    def finish(self, raw: RawView) -> EphemeralView:
        return self._store.view(raw, self._future.result(timeout=self._store._timeout))

    def abandon(self) -> None:
        self._future.cancel()
