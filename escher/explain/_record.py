"""`Recorder`: record the tasks launched on a backend as a workload `what_if` can replay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from escher.backends.base import Backend
from escher.core.plan import Plan
from escher.core.task import TaskRef, TaskSpec
from escher.explain._workload import TaskTiming, Workload


@dataclass
class Recorded:
    """One launch: when, what, and (once known) where it ran and when it finished."""

    arrival: float
    spec: TaskSpec
    ref: TaskRef
    finish: float | None = None

    @property
    def node(self) -> str | None:
        """The node it ran on (None if it never started)."""
        return self.ref.node_id if self.ref.started() else None


def _creates(spec: TaskSpec) -> dict[str, float]:
    """Resources the task body creates on its own node before it runs (an ESL's on_start)."""
    actions = getattr(spec.fn, "on_start", ()) or ()
    return {
        a.label: a.capacity
        for a in actions
        if getattr(a, "node_spec", 0) is None and hasattr(a, "label")
    }


class Recorder:
    """Records every task launched through `backend` (with its launch time) until `stop`.

    Use it as a context manager. `workload()` turns the record into a `Workload`, one plan
    task per launch (request, duration, and the resources an ESL makes it create where it
    lands), arriving when it was launched.

    Args:
        backend: The backend to watch (its `launch` is wrapped while recording).
    """

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.launches: list[Recorded] = []
        self._launch = backend.launch
        backend.launch = self._record  # type: ignore[method-assign]

    def _record(self, spec: TaskSpec) -> TaskRef:
        clock = self.backend.clock
        arrival = clock.now()
        ref = self._launch(spec)
        row = Recorded(arrival, spec, ref)
        self.launches.append(row)

        def done(_ref: TaskRef) -> None:
            row.finish = clock.now()

        ref.add_done_callback(done)
        return ref

    def stop(self) -> None:
        """Stop recording (the backend's `launch` is its own again)."""
        if self.backend.__dict__.get("launch") is not None:
            del self.backend.launch

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def workload(self, *, origin: float | None = None) -> Workload:
        """The record as a workload (arrival times relative to `origin`, default the first)."""
        start = (
            origin if origin is not None else min((r.arrival for r in self.launches), default=0.0)
        )
        plan = Plan()
        timings = []
        for index, row in enumerate(self.launches):
            task = plan.add_task(
                f"{row.spec.name}-{index}",
                row.spec.resources,
                creates=_creates(row.spec) or None,
                source=f"recorded launch of {row.spec.name!r}",
            )
            duration = row.spec.duration or 0.0
            timings.append(
                TaskTiming(task, (row.arrival - start,), (duration,), row.spec.name, task.name)
            )
        return Workload(plan, tuple(timings))
