"""Deadlines and plan-ahead (after TetriSched): wait for a busy preferred resource or fall back.

A `DeadlineJob` carries a deadline, and a preference list of `Option`s: what it requests on
each kind of resource and how long it is *estimated* to run there (e.g. 10 s on a GPU node,
else 30 s on 4 CPUs). `PlanAhead` re-plans every pending job on every cycle (every `period`
seconds of the backend's clock, and whenever a job arrives or ends), earliest deadline first,
on a space-time calendar of each node built from what is free now and when its running jobs
are expected to end (see `JobHandle.expected_end` for overdue jobs):

* the most preferred option that can still finish by the deadline wins, even if it has to
  wait for a busy node; the job then keeps a reservation in the calendar, so jobs with later
  deadlines plan around it;
* a job that no option can finish in time any more runs best effort: it starts only where it
  fits now without disturbing the reservations of jobs that can still make it;
* a job starts only when its chosen node has room *now*; otherwise it waits for the next cycle.

Mis-estimates are tolerated because nothing is final until a job starts: a running job that
overruns its estimate is expected to overrun again by as much as it has so far, so the jobs
waiting for its node are re-planned and fall back once waiting would miss their deadline. Estimates
are padded by `padding` (a fraction) when deciding whether waiting still meets a deadline.

A job starts on the node the plan chose: the policy creates a one-unit ephemeral resource on
that node, the job's task requests it, and it is deleted when the task ends.

`Greedy` is the baseline without plan-ahead: at each cycle a job takes the most preferred
option that fits somewhere now, and never waits while a fallback is free.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import EPSILON, Resources, fits, validate_quantity
from escher.core.task import TaskRef
from escher.esl._constraint import Constraint, build_spec, split_options
from escher.esl._esl import ESL, node_ids
from escher.esl._planning import plan_warning, planning_backend
from escher.esl.deadline.check import Busy, DeadlineCheck, check_deadlines
from escher.esl.deadline.jobs import DeadlineJob

__all__ = ["Greedy", "JobHandle", "PlanAhead"]


@dataclass
class JobHandle:
    """A submitted job: where and when it started, and its task.

    Attributes:
        job: The job.
        submitted: Clock time of submission.
        ref: The task, once started (None while waiting).
        option: Index of the option it runs with.
        node: Node it runs on.
        started: Clock time it was launched.
        plan: The latest plan while waiting: (option index, node, planned start).
    """

    job: DeadlineJob
    submitted: float
    ref: TaskRef | None = None
    option: int | None = None
    node: str | None = None
    started: float | None = None
    plan: tuple[int, str, float] | None = None
    seq: int = 0
    _launch: Callable[[int, str], TaskRef] | None = field(default=None, repr=False)

    def done(self) -> bool:
        """True once its task is done."""
        return self.ref is not None and self.ref.done()

    def expected_end(self, now: float, period: float) -> float | None:
        """When its task is expected to end.

        An overdue task is expected to overrun again by as much as it has overrun so far
        (at least one `period`): the longer it overruns, the less a plan relies on it.
        """
        if self.started is None or self.option is None:
            return None
        end = self.started + self.job.options[self.option].runtime
        return end if end > now + EPSILON else now + max(period, now - end)


class _Calendar:
    """Free resources of one node over time: now, plus changes at known times."""

    def __init__(self, free: Resources) -> None:
        self.free = dict(free.items())
        self.changes: list[tuple[float, dict[str, float]]] = []

    def add(self, when: float, delta: Mapping[str, float]) -> None:
        self.changes.append((when, dict(delta)))
        self.changes.sort(key=lambda c: c[0])

    def _at(self, when: float) -> dict[str, float]:
        free = dict(self.free)
        for t, delta in self.changes:
            if t > when + EPSILON:
                break
            for r, q in delta.items():
                free[r] = free.get(r, 0.0) + q
        return free

    def earliest(self, request: Resources, now: float, length: float) -> float | None:
        """The first time >= now when `request` fits for `length` seconds (None: never)."""
        times = sorted({now, *(t for t, _ in self.changes if t > now)})
        for start in times:
            checks = [start, *(t for t in times if start < t < start + length - EPSILON)]
            if all(fits(request, self._at(t)) for t in checks):
                return start
        return None

    def reserve(self, request: Resources, start: float, length: float) -> None:
        self.add(start, {r: -q for r, q in request.items()})
        self.add(start + length, dict(request.items()))


class _DeadlineESL(ESL):
    """Shared machinery: the job list, the cycle, pinned launches."""

    kind = "dl"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        period: float = 1.0,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(backend, name=name)
        self.period = validate_quantity(period, what="period")
        if self.period <= 0:
            raise ValidationError("period must be > 0 seconds.")
        self.nodes = tuple(node_ids(self.backend, nodes))
        self.jobs: list[JobHandle] = []
        self._seq = itertools.count()
        self._ticking = False

    # --- submission -------------------------------------------------------------------------
    def submit(
        self, job: DeadlineJob, fn: Callable[..., Any], *args: Any, **kwargs: Any
    ) -> JobHandle:
        """Queue `job`, whose task runs `fn(*args, **kwargs)` once the policy starts it.

        Args:
            job: The job (deadline, options).
            fn: The task body.
            *args: Its positional arguments.
            **kwargs: Keyword arguments of `fn`, plus ``duration``, ``max_retries`` and
                ``retry_exceptions`` for the task.

        Returns:
            A `JobHandle`; `handle.ref` is the task once it started.

        Raises:
            ValidationError: `job` is not a `DeadlineJob`, no node could ever run any of its
                options, or the policy is closed.
        """
        self._check_open()
        if not isinstance(job, DeadlineJob):
            raise ValidationError(f"submit takes a DeadlineJob, got {job!r}.")
        state = self.backend.get_cluster_state()
        if not any(self._candidates(job, state, i) for i in range(len(job.options))):
            raise ValidationError(
                f"no node of {self.source} could ever run any option of job {job.name!r}; "
                "check the options' requests and labels."
            )
        options = split_options(kwargs)
        handle = JobHandle(job, self.backend.clock.now(), seq=next(self._seq))
        label = self.label(f"job-{handle.seq}-{job.name}")

        def launch(index: int, node: str) -> TaskRef:
            self.set_resource(label, 1, node)
            request = Resources.of(job.options[index].resources)
            spec = build_spec(
                fn, args, kwargs, Constraint(Resources.of({label: 1})), request, job.name, **options
            )
            ref = self.backend.launch(spec)
            ref.add_done_callback(lambda _r: self._ended(label))
            return ref

        handle._launch = launch
        with self._lock:
            self.jobs.append(handle)
        if planning_backend(self.backend) is not None:
            self._plan(job, fn, args, kwargs, options)
        self._request_cycle()
        return handle

    def _plan(
        self,
        job: DeadlineJob,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: dict[str, Any],
    ) -> None:
        """In a planning run, record `job` as a task that waits its turn and may run with
        any option's request (its cycles never run while planning)."""
        planning = planning_backend(self.backend)
        assert planning is not None
        requests = [Resources.of(o.resources) for o in job.options]
        spec = build_spec(fn, args, kwargs, Constraint(), requests[0], job.name, **options)
        with planning.alternatives(requests[1:], frozenset()):
            ref = planning.record(spec)
        planning.annotate(ref, source=f"{self.source}.submit", concurrent=False)
        plan_warning(
            self.backend,
            f"{self.source}: each job is planned with its options' requests as alternatives; "
            "their node labels and the deadlines are checked by escher.esl.check_deadlines, "
            "not by the plan.",
        )

    def _ended(self, label: str) -> None:
        if not self._closed:
            self.forget(label)
            self._request_cycle()

    def pending(self) -> list[JobHandle]:
        """Jobs not started yet, earliest deadline first."""
        with self._lock:
            waiting = [h for h in self.jobs if h.ref is None]
        return sorted(waiting, key=lambda h: (h.job.deadline, h.seq))

    def running(self) -> list[JobHandle]:
        """Jobs started whose task has not ended."""
        with self._lock:
            return [h for h in self.jobs if h.ref is not None and not h.ref.done()]

    # --- the cycle --------------------------------------------------------------------------
    def _tick(self) -> None:
        with self._lock:
            self._ticking = False
        self._cycle()

    def _cycle(self) -> None:
        with self._lock:
            self._cycle_requested = False
            if self._closed:
                return
            waiting = self.pending()
            if waiting:
                self._decide(waiting, self.backend.get_cluster_state())
            if any(h.ref is None for h in self.jobs) and not self._ticking:
                self._ticking = True
                self.call_later(self.period, self._tick)

    def _decide(self, waiting: list[JobHandle], state: ClusterState) -> None:
        raise NotImplementedError

    def _candidates(self, job: DeadlineJob, state: ClusterState, index: int) -> list[str]:
        option = job.options[index]
        return [
            n
            for n in self.nodes
            if n in state.nodes
            and state.nodes[n].alive
            and option.allows(state.nodes[n].labels, state.nodes[n].total)
        ]

    def _start(self, handle: JobHandle, index: int, node: str) -> None:
        assert handle._launch is not None
        handle.option, handle.node = index, node
        handle.started = self.backend.clock.now()
        handle.plan = None
        handle.ref = handle._launch(index, node)


class PlanAhead(_DeadlineESL):
    """Plan-ahead deadline scheduling: wait for a busy preferred node when that still pays.

    Args:
        backend: The backend (default: the current one).
        period: Seconds between re-planning cycles.
        padding: Fraction added to runtime estimates when checking a deadline.
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "plan"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        period: float = 1.0,
        padding: float = 0.2,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(backend, period=period, nodes=nodes, name=name)
        self.padding = validate_quantity(padding, what="padding")

    def calendars(self, state: ClusterState) -> dict[str, _Calendar]:
        """Each node's calendar: free now, plus the expected ends of this policy's jobs."""
        now = self.backend.clock.now()
        calendars = {n: _Calendar(state.nodes[n].available) for n in self.nodes if n in state.nodes}
        for handle in self.running():
            end = handle.expected_end(now, self.period)
            if end is not None and handle.node in calendars and handle.option is not None:
                request = Resources.of(handle.job.options[handle.option].resources)
                calendars[handle.node].add(end, dict(request.items()))
        return calendars

    def _decide(self, waiting: list[JobHandle], state: ClusterState) -> None:
        now = self.backend.clock.now()
        calendars = self.calendars(state)
        late: list[JobHandle] = []
        for handle in waiting:  # earliest deadline first
            chosen = self._meets_deadline(handle, state, calendars, now)
            if chosen is None:
                late.append(handle)
                continue
            index, node, start = chosen
            option = handle.job.options[index]
            calendars[node].reserve(Resources.of(option.resources), start, option.runtime)
            handle.plan = chosen
            if start <= now + EPSILON:
                self._start(handle, index, node)
        # Jobs that can no longer meet their deadline run best effort: only where they fit
        # now, around the reservations of the jobs that still can.
        for handle in sorted(late, key=lambda h: h.seq):
            handle.plan = None
            for index, option in enumerate(handle.job.options):
                request = Resources.of(option.resources)
                fits_now = next(
                    (
                        n
                        for n in self._candidates(handle.job, state, index)
                        if calendars[n].earliest(request, now, option.runtime) == now
                    ),
                    None,
                )
                if fits_now is not None:
                    calendars[fits_now].reserve(request, now, option.runtime)
                    self._start(handle, index, fits_now)
                    break

    def _meets_deadline(
        self,
        handle: JobHandle,
        state: ClusterState,
        calendars: Mapping[str, _Calendar],
        now: float,
    ) -> tuple[int, str, float] | None:
        """The most preferred option (earliest start on it) that meets the deadline."""
        job = handle.job
        for index, option in enumerate(job.options):
            request = Resources.of(option.resources)
            padded = option.runtime * (1.0 + self.padding)
            best: tuple[int, str, float] | None = None
            for node in self._candidates(job, state, index):
                start = calendars[node].earliest(request, now, option.runtime)
                if start is None or start + padded > job.deadline + EPSILON:
                    continue
                if best is None or start < best[2]:
                    best = (index, node, start)
            if best is not None:
                return best
        return None

    def check(self, *, timeout: float = 10.0) -> DeadlineCheck:
        """Can the waiting jobs all meet their deadlines, given what runs now? (Z3.)

        Returns:
            A `DeadlineCheck` (see `escher.esl.deadline.check.check_deadlines`).
        """
        now = self.backend.clock.now()
        busy = []
        for handle in self.running():
            end = handle.expected_end(now, self.period)
            if end is not None and handle.node is not None and handle.option is not None:
                busy.append(Busy(handle.node, handle.job.options[handle.option].resources, end))
        state = self.backend.get_cluster_state()
        nodes = {n: state.nodes[n] for n in self.nodes if n in state.nodes}
        return check_deadlines(
            [h.job for h in self.pending()],
            ClusterState(nodes=nodes, time=state.time),
            now=now,
            busy=busy,
            timeout=timeout,
        )


class Greedy(_DeadlineESL):
    """Baseline: start each job now on the most preferred option that fits now; never wait.

    Args:
        backend: The backend (default: the current one).
        period: Seconds between cycles.
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "greedy"

    def _decide(self, waiting: list[JobHandle], state: ClusterState) -> None:
        free = {n: dict(state.nodes[n].available.items()) for n in self.nodes if n in state.nodes}
        for handle in waiting:
            for index, option in enumerate(handle.job.options):
                request = Resources.of(option.resources)
                node = next(
                    (
                        n
                        for n in self._candidates(handle.job, state, index)
                        if fits(request, free[n])
                    ),
                    None,
                )
                if node is not None:
                    for r, q in request.items():
                        free[node][r] = free[node].get(r, 0.0) - q
                    self._start(handle, index, node)
                    break
