"""Launch by the proof: run-time choices follow a verified witness while it stays valid.

`follow(plan, result)` makes the witness of a FEASIBLE verdict on `plan` (a planning run's
plan of the same code) the guide of the run:

* a `CoLocation` group places itself on the node the witness gives its members (the plan's
  `Colocated` intent of that group, matched by the group's source, stable across runs), when
  that node is alive and has room for the group;
* every other task (plain, or under another ESL) launched on the active backend goes to the
  node the witness gives its replica (launches are named as the planning run names them,
  ``web``, ``web-2``, ..., and matched to planned tasks by `PlanRun.replicas`), when that
  node is alive and has room for its whole request at launch. The pin is an ephemeral
  resource on that node (``follow<N>-<M>``) added to the task's request, so it works on every
  backend; it is deleted once the block is left and its tasks ended.

Otherwise a task is placed as without a guide (first fit). Without a guide nothing changes.

A block guides the thread (`contextvars` context) that opens it: its launches, and those of
the timers and done callbacks it schedules (they run in its context, see `Backend.steered`).
Other threads launching on the same backend at the same time are not guided, and a
co-location group placed from another thread takes no witness node. Task bodies run on the
backend's own threads or processes, so launches made inside a task are not guided either (a
planning run does not record them).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from escher.backends.base import Backend
from escher.core.context import active_backend
from escher.core.errors import EscherError, ValidationError
from escher.core.plan import Colocated, Plan
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec

# the follow blocks open in this context, innermost last
_guides: contextvars.ContextVar[tuple[Guide, ...]] = contextvars.ContextVar(
    "escher_guides", default=()
)
_numbers = itertools.count(1)
# per thread: the first attempt of the task being relaunched (`fallback_of`)
_attempts = threading.local()


@contextlib.contextmanager
def fallback_of(first: TaskRef) -> Iterator[None]:
    """The launch inside is a later attempt of the task whose first attempt is `first` (a
    `FirstOf` fallback): a guide gives it that task's name and replica, as the planning
    run records the task once."""
    _attempts.first = first
    try:
        yield
    finally:
        _attempts.first = None


class Guide:
    """Where a verified witness puts each co-location group and each other task's replicas.

    Attributes:
        groups: Group source (e.g. ``CoLocation('colo').group('a')``) -> node id.
        tasks: Planned task (not of a co-location group) -> the witness's node of each
            replica, in launch order.
    """

    def __init__(
        self,
        plan: Plan,
        witness: Mapping[str, Sequence[str]],
        replicas: Mapping[str, str] | None = None,
    ) -> None:
        self.groups: dict[str, str] = {}
        grouped: set[str] = set()
        for intent in plan.intents:
            if not isinstance(intent, Colocated) or intent.topology_key is not None:
                continue
            nodes = [n for t in intent.tasks for n in witness.get(t, ())]
            if nodes and not intent.preferred:
                self.groups.setdefault(intent.source, nodes[0])
                grouped.update(intent.tasks)
        self.tasks: dict[str, tuple[str, ...]] = {
            t.name: tuple(witness.get(t.name, ()))
            for t in plan.tasks
            if t.name not in grouped and witness.get(t.name)
        }
        self._replicas = dict(replicas or {})
        self._lock = threading.Lock()
        self._names: set[str] = set()
        self._suffixes: dict[str, int] = {}
        self._used: dict[str, int] = {}
        self._nodes: dict[str, str | None] = {}  # launch name -> its replica's node
        self._by_ref: dict[str, str] = {}  # task id -> launch name

    def launch_name(self, ref: TaskRef) -> str | None:
        """The name a task launched inside the block has in the planning run (``web``,
        ``web-2``, ...; a `FirstOf` fallback attempt keeps the name of the task it
        replaces), or None if it was not launched inside the block on the steered backend."""
        with self._lock:
            return self._by_ref.get(ref.id)

    def group_node(self, source: str) -> str | None:
        """The witness's node for the group of this source, or None."""
        return self.groups.get(source)

    def _name(self, name: str) -> tuple[str, str | None]:
        """Name the next launch of a task called `name` as the planning run does (the
        first free of ``name``, ``name-2``, ...) and give the witness's node of the
        planned replica it is, or None (not planned, a co-location group's, or past the
        planned count)."""
        with self._lock:
            launch = name
            if launch in self._names:
                number = self._suffixes.get(name, 2)
                while f"{name}-{number}" in self._names:
                    number += 1
                launch = f"{name}-{number}"
                self._suffixes[name] = number + 1
            self._names.add(launch)
            task = self._replicas.get(launch, launch)
            nodes = self.tasks.get(task, ())
            index = self._used.get(task, 0)
            self._used[task] = index + 1
            node = nodes[index] if index < len(nodes) else None
            self._nodes[launch] = node
            return launch, node

    def _attempt(self, first: TaskRef) -> tuple[str, str | None] | None:
        """The name and node of the task whose first attempt was `first` (None: unknown)."""
        with self._lock:
            name = self._by_ref.get(first.id)
            return None if name is None else (name, self._nodes.get(name))

    def _launched(self, ref: TaskRef, name: str) -> None:
        with self._lock:
            self._by_ref[ref.id] = name


class _Pins:
    """The `Steering` of one follow block: pins each launch to its replica's node."""

    def __init__(self, guide: Guide, backend: Backend) -> None:
        self.guide = guide
        self.backend = backend
        self.prefix = f"follow{next(_numbers)}"
        nodes = sorted({n for ns in guide.tasks.values() for n in ns})
        self.labels = {node: f"{self.prefix}-{i}" for i, node in enumerate(nodes)}
        self.capacity = {node: sum(ns.count(node) for ns in guide.tasks.values()) for node in nodes}
        self._lock = threading.Lock()
        self._set: set[str] = set()  # nodes whose pin label exists
        self._live: dict[str, int] = {}  # node -> pinned tasks not ended
        self._closed = False
        self._naming: dict[int, list[str]] = {}  # id of a steered spec -> its launch names

    def steer(self, spec: TaskSpec) -> TaskSpec:
        if self._closed:  # a timer or callback of the block that runs after it ended
            return spec
        first = getattr(_attempts, "first", None)
        known = self.guide._attempt(first) if first is not None else None
        name, node = known if known is not None else self.guide._name(spec.name)
        steered = self._pin(spec, node)
        with self._lock:  # for `launched`, told of the task launched with `steered`
            self._naming.setdefault(id(steered), []).append(name)
        return steered

    def _pin(self, spec: TaskSpec, node: str | None) -> TaskSpec:
        if node is None:
            return spec
        found = self.backend.get_cluster_state().nodes.get(node)
        if found is None or not found.alive or not spec.resources.fits_in(found.available):
            return spec  # the witness's node is gone or full: placed as without a guide
        label = self.labels[node]
        with self._lock:
            if self._closed:  # the block ended meanwhile: no new pins
                return spec
            if node not in self._set:
                try:
                    self.backend.set_resource(label, self.capacity[node], node)
                except EscherError:
                    return spec
                self._set.add(node)
        return dataclasses.replace(spec, resources=spec.resources + Resources({label: 1}))

    def launched(self, ref: TaskRef) -> None:
        with self._lock:
            names = self._naming.get(id(ref.spec))
            name = names.pop(0) if names else None
            if names == []:
                del self._naming[id(ref.spec)]
        if name is not None:
            self.guide._launched(ref, name)
        for node, label in self.labels.items():
            if label in ref.spec.resources:  # counted once launched (a refused one holds none)
                with self._lock:
                    self._live[node] = self._live.get(node, 0) + 1
                ref.add_done_callback(functools.partial(self._ended, node))
                return

    def _ended(self, node: str, _ref: TaskRef) -> None:
        with self._lock:
            self._live[node] -= 1
            drop = self._closed and self._live[node] == 0 and node in self._set
            if drop:
                self._set.discard(node)
        if drop:
            self._delete(node)

    def close(self) -> None:
        """The block ended: delete the pins no running or waiting task holds."""
        with self._lock:
            self._closed = True
            idle = [n for n in self._set if self._live.get(n, 0) == 0]
            self._set.difference_update(idle)
        for node in idle:
            self._delete(node)

    def _delete(self, node: str) -> None:
        with contextlib.suppress(EscherError):
            self.backend.set_resource(self.labels[node], 0, node)


@contextlib.contextmanager
def follow(plan: Any, result: Any) -> Iterator[Guide]:
    """Inside the block, run-time placement choices follow the witness of `result`.

    Co-location groups take the witness's node of their members; every other task launched
    on the active backend (escher's, when the block starts) takes the witness's node of its
    replica; each only while that node is alive and has room, else as without a guide.

    Args:
        plan: The planning run (`escher.esl.plan_app(app, state)`, whose `replicas` match
            launches to planned tasks exactly), or the `Plan` that was verified.
        result: Its `VerificationResult` (FEASIBLE), or the witness itself (task name ->
            node of each replica).

    Returns:
        A context manager giving the `Guide`.

    Raises:
        ValidationError: `result` has no witness (the plan was not proven feasible).

    Example:
        >>> run = plan_app(app, state)                        # doctest: +SKIP
        >>> result = verify(run.plan, state)                  # doctest: +SKIP
        >>> with escher.init(backend), follow(run, result):  # doctest: +SKIP
        ...     app()
    """
    witness = getattr(result, "witness", result)
    if not isinstance(witness, Mapping):
        raise ValidationError(
            "follow() needs the witness of a FEASIBLE verdict (result.witness); this result "
            "has none: verify the plan first and follow only a feasible one."
        )
    replicas = getattr(plan, "replicas", None)
    plan = getattr(plan, "plan", plan)
    if not isinstance(plan, Plan):
        raise ValidationError(
            f"follow() takes the planning run or the verified Plan first, got "
            f"{type(plan).__name__}."
        )
    guide = Guide(plan, witness, replicas)
    backend = active_backend()
    pins = _Pins(guide, backend) if isinstance(backend, Backend) else None
    token = _guides.set((*_guides.get(), guide))
    try:
        with backend.steered(pins) if pins is not None else contextlib.nullcontext():
            yield guide
    finally:
        _guides.reset(token)
        if pins is not None:
            pins.close()


def followed_group_node(source: str) -> str | None:
    """The node the innermost guide of the calling context gives the group of `source`
    (None: no guide)."""
    guides = _guides.get()
    return guides[-1].group_node(source) if guides else None
