"""What a policy adds to one task (`Constraint`) and how that becomes a `TaskSpec`.

A constraint is resources the task requests, plus `Action`s the task performs itself: before
its body runs (e.g. create a group's label on the node where it landed) and after its body
returned (e.g. set an event). `build_spec` wraps the body so the actions run inside the task.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.core.context import current_backend
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import Resources
from escher.core.task import TASK_OPTIONS, TaskSpec

#: Called with (label, node, capacity) for each resource a task set from inside.
Recorder = Callable[[str, str, float], None]


@dataclass(frozen=True)
class Action:
    """A `set_resource` a task performs itself: `node_spec` None means its own node."""

    label: str
    capacity: float
    node_spec: NodeSpecLike = None

    def run(self, backend: Any) -> tuple[str, ...]:
        """Apply it through `backend` (from inside the task)."""
        return tuple(backend.set_resource(self.label, self.capacity, self.node_spec))


@dataclass(frozen=True)
class Constraint:
    """What a policy adds to one task.

    Attributes:
        resources: Added to the task's request (AND of policies = sum of these).
        on_start: Resources the task sets before its body runs (e.g. an unknown group's
            resource on the node where the first member landed).
        on_done: Resources the task sets after its body returned (task signalling).
        source: The policy call that made it, in the user's terms.
    """

    resources: Resources = field(default_factory=Resources)
    on_start: tuple[Action, ...] = ()
    on_done: tuple[Action, ...] = ()
    source: str = ""

    def __and__(self, other: Constraint) -> Constraint:
        return Constraint(
            self.resources + other.resources,
            self.on_start + other.on_start,
            self.on_done + other.on_done,
            " & ".join(s for s in (self.source, other.source) if s),
        )


class TaskBody:
    """A task body that performs a constraint's actions around the user's function.

    Module-level and free of closures so that process-based backends can pickle it; inside
    the task `escher.current_backend()` is the backend running it. The recorder (the
    driver's ledger) does not cross processes: there, the ESL finds the labels by reading
    the cluster state.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        on_start: tuple[Action, ...],
        on_done: tuple[Action, ...],
        recorder: Recorder | None = None,
    ) -> None:
        self.fn = fn
        self.on_start = on_start
        self.on_done = on_done
        self.recorder = recorder
        self.__name__ = getattr(fn, "__name__", "task")

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["recorder"] = None  # the driver-side ledger does not cross processes
        return state

    def _apply(self, actions: tuple[Action, ...]) -> None:
        backend = current_backend()
        for action in actions:
            nodes = action.run(backend)
            if self.recorder is not None:
                for node in nodes:
                    self.recorder(action.label, node, action.capacity)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._apply(self.on_start)
        value = self.fn(*args, **kwargs)
        self._apply(self.on_done)
        return value


def build_spec(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    constraint: Constraint,
    resources: Mapping[str, float] | None,
    name: str | None,
    recorder: Recorder | None = None,
    **options: Any,
) -> TaskSpec:
    """The `TaskSpec` for `fn` under `constraint` (request = `resources` + the constraint's)."""
    body: Callable[..., Any] = fn
    if constraint.on_start or constraint.on_done:
        body = TaskBody(fn, constraint.on_start, constraint.on_done, recorder)
    return TaskSpec(
        fn=body,
        args=tuple(args),
        kwargs=dict(kwargs),
        resources=Resources.of(resources) + constraint.resources,
        name=str(name or getattr(fn, "__name__", "task")),
        **options,
    )


def split_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the task options (`escher.core.task.TASK_OPTIONS`) out of `kwargs`."""
    return {k: kwargs.pop(k) for k in TASK_OPTIONS if k in kwargs}
