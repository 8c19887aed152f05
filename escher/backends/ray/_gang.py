"""Atomic gangs on Ray: every member placed at once or none.

A gang is one placement group with a bundle per member (Ray reserves it all or nothing),
removed when every member settled. In ledger mode the members' ephemeral units are granted
first, all at once, and each member's bundle is pinned to its granted node (Ray's
``ray.io/node-id`` node label; a member that requests no node-defined resources goes
straight to its node).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Sequence
from typing import Any

from escher.backends.ray._entry import Entry
from escher.backends.ray._gangfit import gang_unfit_reason
from escher.backends.ray._state import NODE_ID_LABEL, NodeCache, node_affinity, ray_up
from escher.backends.ray._store import EphemeralStore
from escher.backends.ray._tasks import TaskTable
from escher.core.errors import TaskFailedError, UnschedulableError
from escher.core.task import Status, StatusCode, task_error

#: A bundle must reserve something; members that request nothing reserve this much CPU.
MIN_BUNDLE_CPU = 0.001
#: Seconds to wait for a placement group before asking for it again (doubling).
FIRST_PERIOD = 0.5
MAX_PERIOD = 5.0


def bundle_selector_supported() -> bool:
    """True if this Ray can pin a placement-group bundle to a node by its id label."""
    import ray
    from ray.util.placement_group import placement_group

    if "bundle_label_selector" not in inspect.signature(placement_group).parameters:
        return False
    nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
    return bool(nodes) and all(NODE_ID_LABEL in (n.get("Labels") or {}) for n in nodes)


def bundle(options: dict[str, Any]) -> dict[str, float]:
    """The placement-group bundle that reserves what a task with Ray `options` asks for."""
    out: dict[str, float] = {}
    if options.get("num_cpus"):
        out["CPU"] = float(options["num_cpus"])
    if options.get("num_gpus"):
        out["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        out["memory"] = float(options["memory"])
    out.update(options.get("resources") or {})
    return out or {"CPU": MIN_BUNDLE_CPU}


class Gang:
    """Places one gang from a thread of its own, and frees it when every member settled.

    Ray's placement-group scheduler does not retry a group it found infeasible when a
    resized resource appears later (only when nodes join), and a group asked for right
    after a resize can be judged on the GCS's older view. So a group not ready within
    `period` is removed and asked for again (doubling `period`, up to `MAX_PERIOD`).
    Before each try the gang is checked against the live nodes' totals: a gang that no set
    of live nodes could ever hold fails with `UnschedulableError`.
    """

    def __init__(
        self,
        table: TaskTable,
        store: EphemeralStore,
        cache: NodeCache,
        members: list[Entry],
        *,
        strategy: str,
        closed: Callable[[], bool],
    ) -> None:
        self._table = table
        self._store = store
        self._cache = cache
        self._members = members
        self._strategy = strategy
        self._closed = closed
        self._left = len(members)
        self._lock = threading.Lock()
        self._placed = False
        self._cancelled = False
        self._wake = threading.Event()
        self.pg: Any = None

    def start(self) -> None:
        """Start placing (in a thread: waiting for the group must not block the caller)."""
        for entry in self._members:
            entry.gang = self
        threading.Thread(target=self._run, name="escher-ray-gang", daemon=True).start()

    # --- placing -----------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._place()
        except Exception as exc:  # Ray failed (or a bug): never leave members waiting
            for entry in self._members:
                error = task_error(
                    f"gang member: Ray failed to place the gang ({type(exc).__name__}: {exc})",
                    entry.ref,
                    TaskFailedError,
                )
                error.__cause__ = exc
                self._table.fail_unsubmitted(entry, error)

    def _place(self) -> None:
        period = FIRST_PERIOD
        while not self._closed() and ray_up():
            if all(e.ref.done() for e in self._members):
                return  # every member was cancelled before the gang was placed
            reason = self.unfit_reason()
            if reason is not None:
                self._fail_all(f"a gang that no set of live nodes could ever hold: {reason}")
                return
            if self._try(period):
                return
            period = min(period * 2, MAX_PERIOD)

    def _try(self, period: float) -> bool:
        """One attempt to place the gang; True once it is (members submitted)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        nodes = self._store.reserve_gang(self._members)
        if nodes is None:
            self._status("waiting until every member's ephemeral units are free at once")
            self._wake.wait(period)
            return False
        pg = self._placement_group(nodes)
        if pg is not None and not ray.wait([pg.ready()], timeout=period)[0]:
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
            self._store.unreserve_gang(self._members)
            self._status("waiting for room: Ray has not placed the gang's placement group yet")
            return False
        with self._lock:
            cancelled = self._cancelled
            if not cancelled:
                self.pg, self._placed = pg, True
        if cancelled:
            if pg is not None:
                with contextlib.suppress(Exception):
                    remove_placement_group(pg)
            self._store.unreserve_gang(self._members)
            return True
        self._submit(pg, nodes)
        return True

    def _placement_group(self, nodes: Sequence[str]) -> Any:
        """The gang's placement group (None if no member needs a bundle)."""
        from ray.util.placement_group import placement_group

        bundles: list[dict[str, float]] = []
        selectors: list[dict[str, str]] = []
        for index, entry in enumerate(self._members):
            node = nodes[index] if nodes else ""
            if node and not entry.request.physical:
                continue  # only ephemeral units, granted on its node: no bundle needed
            bundles.append(bundle(entry.options))
            selectors.append({NODE_ID_LABEL: node} if node else {})
        if not bundles:
            return None
        if any(selectors):
            return placement_group(
                bundles, strategy=self._strategy, bundle_label_selector=selectors
            )
        return placement_group(bundles, strategy=self._strategy)

    def _submit(self, pg: Any, nodes: Sequence[str]) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        index = 0
        for position, entry in enumerate(self._members):
            node = nodes[position] if nodes else ""
            if node and not entry.request.physical:
                strategy: Any = node_affinity(node, soft=False)
            else:
                strategy = PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)
                index += 1
            # A retry of a member keeps its bundle, unless the store pinned it (ledger: its
            # units are given back on failure, and it is routed again like any task).
            entry.strategy = strategy if entry.node is None else None
            entry.ref.set_status(Status(StatusCode.PENDING, "its gang is placed; starting"))
            self._table.submit(entry, strategy)

    # --- checks and outcomes -------------------------------------------------------------
    def unfit_reason(self) -> str | None:
        """Why no set of live nodes could ever hold the gang (None if some could)."""
        members = [e.request.physical for e in self._members]
        reason = gang_unfit_reason(members, self._cache.physical(), self._strategy)
        if reason is None:
            return None
        return gang_unfit_reason(members, self._cache.physical(fresh=True), self._strategy)

    def _status(self, reason: str) -> None:
        for entry in self._members:
            entry.ref.set_status(Status(StatusCode.UNSCHEDULABLE, f"gang member: {reason}"))

    def _fail_all(self, reason: str) -> None:
        for entry in self._members:
            entry.ref.set_status(Status(StatusCode.INFEASIBLE, reason))
            self._table.fail_unsubmitted(
                entry, task_error(f"gang member: {reason}", entry.ref, UnschedulableError)
            )

    # --- GangHook ------------------------------------------------------------------------
    def member_done(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
            pg = self.pg
        if last and pg is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(pg)

    def cancel_unplaced(self) -> bool:
        with self._lock:
            if self._placed:
                return False
            self._cancelled = True
        for entry in self._members:
            self._table.fail_unsubmitted(entry, None)
        self._wake.set()
        return True
