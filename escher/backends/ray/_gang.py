"""Atomic gangs on Ray: one placement group, one bundle per member, removed when all settle."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

from escher.backends.ray._state import ray_up
from escher.core.errors import UnschedulableError, UnsupportedError
from escher.core.task import Status, StatusCode, TaskRef, TaskSpec, task_error

if TYPE_CHECKING:
    from escher.backends.ray.backend import RayBackend

#: A bundle must reserve something; members that request nothing reserve this much CPU.
MIN_BUNDLE_CPU = 0.001
#: Seconds to wait for a placement group before asking for it again (doubling).
FIRST_PERIOD = 0.5
MAX_PERIOD = 5.0


class _Gang:
    """Places one gang: creates its placement group, submits the members once it is ready,
    and removes the group when every member settled.

    Ray's placement-group scheduler does not retry a group it found infeasible when a
    resized resource appears later (only when nodes join), and a group asked for right
    after a resize can be judged on the GCS's older view. So a group not ready within
    `period` is removed and asked for again (doubling `period`, up to `MAX_PERIOD`).
    """

    def __init__(
        self, backend: RayBackend, bundles: list[dict[str, float]], members: list[tuple[str, Any]]
    ) -> None:
        self._backend = backend
        self._bundles = bundles
        self._members = members  # (key, entry)
        self._left = len(members)
        self._lock = threading.Lock()
        self.pg: Any = None

    def start(self) -> None:
        """Start placing (in a thread: waiting for the group must not block the caller)."""
        threading.Thread(target=self._place, name="escher-ray-gang", daemon=True).start()

    def _place(self) -> None:
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        backend, period = self._backend, FIRST_PERIOD
        while not backend._closed and ray_up():
            if all(entry.ref.done() for _, entry in self._members):
                return  # every member was cancelled before the gang was placed
            pg = placement_group(self._bundles, strategy=backend._gang_strategy)
            ready, _ = ray.wait([pg.ready()], timeout=period)
            if ready:
                break
            with contextlib.suppress(Exception):
                remove_placement_group(pg)
            period = min(period * 2, MAX_PERIOD)
        else:
            return
        with self._lock:
            self.pg = pg
        for index, (key, entry) in enumerate(self._members):
            if entry.ref.done():  # cancelled while the gang was being placed
                self.member_done()
                continue
            options = dict(entry.options)
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=index
            )
            backend._submit(key, entry, options)

    def member_done(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
            pg = self.pg
        if last and pg is not None:
            from ray.util.placement_group import remove_placement_group

            with contextlib.suppress(Exception):
                remove_placement_group(pg)


def _bundle(options: dict[str, Any]) -> dict[str, float]:
    bundle: dict[str, float] = {}
    if options.get("num_cpus"):
        bundle["CPU"] = float(options["num_cpus"])
    if options.get("num_gpus"):
        bundle["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        bundle["memory"] = float(options["memory"])
    bundle.update(options.get("resources") or {})
    return bundle or {"CPU": MIN_BUNDLE_CPU}


def launch_gang(backend: RayBackend, specs: list[TaskSpec]) -> list[TaskRef]:
    """Reserve every member's request in one placement group; Ray does it all or nothing."""

    from escher.backends.ray.backend import _Entry

    if any(spec.fn is None for spec in specs):
        raise UnsupportedError("the ray backend runs Python callables, not container tasks.")
    planned = []
    for spec in specs:
        options, ephemeral, _ = backend._split(spec.resources)
        if ephemeral:
            raise UnsupportedError(
                "in ledger mode a gang member cannot request ephemeral labels "
                f"({sorted(ephemeral)}): Ray's placement groups only reserve Ray resources. "
                "Use mode='resize' (Ray 2.60), or escher.esl.Gang."
            )
        planned.append((spec, options))
    keyed = [backend._new_ref(spec) for spec, _ in planned]
    refs = [ref for _, ref in keyed]
    reasons = [backend._infeasible_reason(spec.resources) for spec in specs]
    if any(reasons):
        why = next(r for r in reasons if r)
        for ref in refs:
            ref.set_status(Status(StatusCode.INFEASIBLE, f"a gang member: {why}"))
            ref.set_exception(task_error(f"a gang member: {why}", ref, UnschedulableError))
        return refs
    members = []
    for (spec, options), (key, ref) in zip(planned, keyed, strict=True):
        options = dict(options)
        options["max_retries"] = spec.max_retries
        options["retry_exceptions"] = spec.retry_exceptions
        entry = _Entry(ref=ref, spec=spec, ephemeral={}, options=options)
        with backend._lock:
            backend._entries[key] = entry
        ref.set_status(Status(StatusCode.PENDING, "waiting for its placement group"))
        members.append((key, entry))
    gang = _Gang(backend, [_bundle(options) for _, options in planned], members)
    for _, entry in members:
        entry.gang = gang
    gang.start()
    return refs
