"""Runtime policy adaptation: pick the queueing ordering that the workload in hand favours.

`AdaptivePolicy` is a `QueueingPolicy` that watches its workload through what it already
records (the runtime of finished tasks per user and task shape: the granularity; how many
tasks each user has queued and running: queue lengths and per-user demand) and, at every
decision point, predicts with a small discrete-event simulation how the outstanding work would
finish under each candidate ordering (FIFO, DRF, naive fair by threads, naive fair by memory).
It switches to the one with the best predicted objective when that beats the active one by
more than `margin`.

Switching only changes how the quotas are computed: queued tasks stay in the backend's queue
with the same request, so a switch never loses or duplicates a task.

Decision points: when a job not seen before arrives, and every `interval` seconds of the
backend's clock while tasks are queued. Runtimes of tasks of a shape never seen finishing are
guessed from other users' tasks of the same shape, else from the mean of all finished tasks,
else `default_runtime`; that is the policy's only knowledge: it has no oracle.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import validate_quantity
from escher.core.task import TaskRef
from escher.esl.queueing import (
    ORDERINGS,
    Ordering,
    QueuedTask,
    QueueingPolicy,
    Vector,
    _fits,
    _ordering,
    _take,
)

__all__ = ["AdaptivePolicy", "Decision", "Observation", "Prediction", "simulate"]

_OBJECTIVES = ("jct", "makespan")


@dataclass(frozen=True)
class Prediction:
    """Predicted outcome of the outstanding work under one ordering.

    Attributes:
        ordering: The ordering's name.
        mean_completion: Mean predicted completion time (clock time) of the jobs with work
            left; minus their arrival, the mean job completion time.
        makespan: When the last outstanding task is predicted to end.
    """

    ordering: str
    mean_completion: float
    makespan: float


@dataclass(frozen=True)
class Observation:
    """What the adaptive policy sees at a decision point.

    Attributes:
        time: Clock time.
        queued: User -> queued tasks.
        running: User -> running tasks.
        demand: User -> resource -> total request of its outstanding tasks.
        granularity: Mean runtime of the finished tasks (None before any finished).
    """

    time: float
    queued: dict[str, int]
    running: dict[str, int]
    demand: dict[str, Vector]
    granularity: float | None


@dataclass(frozen=True)
class Decision:
    """One decision: what was seen, what was predicted, what is active afterwards."""

    observation: Observation
    predictions: tuple[Prediction, ...]
    active: str
    switched: bool


def simulate(
    ordering: Ordering,
    capacity: Mapping[str, Mapping[str, float]],
    tasks: Mapping[str, Sequence[QueuedTask]],
    runtime: Callable[[QueuedTask], float],
    now: float,
) -> Prediction:
    """Predict how `tasks` finish under `ordering` (a greedy, event-driven replay).

    Running tasks (those with a node) end after `runtime(task)` minus what they have run
    already (at least a tenth of it); queued ones start, whenever resources free up, in the
    ordering's order, on the node that fits them most tightly.

    Args:
        ordering: The candidate ordering.
        capacity: Node -> managed resource -> capacity.
        tasks: User -> outstanding tasks (running first), as `QueueingPolicy.outstanding`.
        runtime: Estimated runtime of a task.
        now: The current clock time.

    Returns:
        The `Prediction`.
    """
    totals: Vector = {}
    for caps in capacity.values():
        for r, q in caps.items():
            totals[r] = totals.get(r, 0.0) + q
    free = {n: dict(c) for n, c in capacity.items()}
    alloc: dict[str, Vector] = {u: {} for u in tasks}
    ends: list[tuple[float, int, str, str, QueuedTask]] = []
    job_end: dict[str, float] = {}
    queues: dict[str, deque[QueuedTask]] = {}
    counter = 0
    for user, user_tasks in tasks.items():
        queues[user] = deque()
        for task in user_tasks:
            if task.node is not None and task.node in free:
                estimate = runtime(task)
                ran = now - (task.started_at if task.started_at is not None else now)
                end = now + max(estimate - ran, 0.1 * estimate)
                _take(free[task.node], task.request)
                _take(alloc[user], {r: -q for r, q in task.request.items()})
                heapq.heappush(ends, (end, counter, user, task.node, task))
                counter += 1
            else:
                queues[user].append(task)
    nodes = sorted(capacity)
    clock = now
    while True:
        blocked: set[str] = set()
        while True:
            active = [u for u, q in queues.items() if q and u not in blocked]
            if not active:
                break
            user = min(active, key=lambda u: (*ordering.key(alloc[u], totals, queues[u][0].seq), u))
            task = queues[user][0]
            fitting = [n for n in nodes if _fits(free[n], task.request)]
            if not fitting:
                if ordering.strict:
                    break
                blocked.add(user)
                continue
            node = min(fitting, key=lambda n: (sum(free[n].values()), n))
            queues[user].popleft()
            _take(free[node], task.request)
            _take(alloc[user], {r: -q for r, q in task.request.items()})
            heapq.heappush(ends, (clock + runtime(task), counter, user, node, task))
            counter += 1
        if not ends:
            break
        clock, _, user, node, task = heapq.heappop(ends)
        _take(free[node], {r: -q for r, q in task.request.items()})
        _take(alloc[user], task.request)
        job_end[task.job] = max(job_end.get(task.job, clock), clock)
        while ends and ends[0][0] <= clock:
            _, _, user, node, task = heapq.heappop(ends)
            _take(free[node], {r: -q for r, q in task.request.items()})
            _take(alloc[user], task.request)
            job_end[task.job] = max(job_end.get(task.job, clock), clock)
    left = sum(len(q) for q in queues.values())
    if left:  # could never start (too large for every node): count them as never ending
        return Prediction(ordering.name, float("inf"), float("inf"))
    mean = sum(job_end.values()) / len(job_end) if job_end else now
    return Prediction(ordering.name, mean, clock)


class AdaptivePolicy(QueueingPolicy):
    """A `QueueingPolicy` that switches its ordering at run time to suit the workload.

    Args:
        candidates: Orderings to choose from (default: all four).
        initial: The ordering to start with (default: the first candidate).
        objective: ``"jct"`` (mean job completion time) or ``"makespan"``.
        interval: Seconds of the backend's clock between periodic decisions.
        margin: Switch only if the best prediction beats the active ordering's by more than
            this fraction (hysteresis against flapping on noise).
        default_runtime: Runtime guessed before any task finished.
        horizon: At most this many queued tasks per user enter a prediction.
        backend: The backend (default: the current one).
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "adapt"

    def __init__(
        self,
        candidates: Iterable[str | Ordering] | None = None,
        *,
        initial: str | Ordering | None = None,
        objective: str = "jct",
        interval: float = 30.0,
        margin: float = 0.02,
        default_runtime: float = 1.0,
        horizon: int = 2000,
        backend: Backend | None = None,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        chosen = [_ordering(c) for c in (candidates or list(ORDERINGS))]
        if not chosen:
            raise ValidationError("candidates must name at least one ordering.")
        if objective not in _OBJECTIVES:
            raise ValidationError(f"objective must be one of {_OBJECTIVES}, got {objective!r}.")
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValidationError(f"horizon must be an int >= 1, got {horizon!r}.")
        start = _ordering(initial) if initial is not None else chosen[0]
        super().__init__(start, backend, nodes=nodes, name=name)
        self.candidates = tuple(chosen)
        self.objective = objective
        self.interval = validate_quantity(interval, what="interval")
        if self.interval <= 0:
            raise ValidationError("interval must be > 0 seconds.")
        self.margin = validate_quantity(margin, what="margin")
        self.default_runtime = validate_quantity(default_runtime, what="default_runtime")
        self.horizon = horizon
        self.decisions: list[Decision] = []
        self._jobs: set[str] = set()
        self._decide_soon = False
        self._ticking = False

    # --- watching --------------------------------------------------------------------------
    def submit(
        self,
        fn: Callable[..., Any],
        *args: Any,
        user: str,
        resources: Mapping[str, float] | None = None,
        job: str | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Like `QueueingPolicy.submit`; a new job triggers a decision."""
        ref = super().submit(
            fn, *args, user=user, resources=resources, job=job, name=name, **kwargs
        )
        key = job or name or ""
        with self._lock:
            new = key not in self._jobs
            self._jobs.add(key)
            schedule = new and not self._decide_soon
            if schedule:
                self._decide_soon = True
            tick = not self._ticking
            self._ticking = True
        if schedule:
            self.call_later(0.0, self._decide_now)
        if tick:
            self.call_later(self.interval, self._tick)
        return ref

    def _tick(self) -> None:
        if self.queued_count() == 0 and self.running_count() == 0:
            with self._lock:
                self._ticking = False
            return
        if self.queued_count():
            self.decide()
        self.call_later(self.interval, self._tick)

    def _decide_now(self) -> None:
        with self._lock:
            self._decide_soon = False
        self.decide()

    def runtime_estimate(self, task: QueuedTask) -> float:
        """The runtime the predictions assume for `task` (from finished tasks only)."""
        with self._lock:
            count, total = self.runtimes.get((task.user, task.shape), (0, 0.0))
            if count:
                return total / count
            same = [v for (_, shape), v in self.runtimes.items() if shape == task.shape]
            if same:
                return sum(t for _, t in same) / sum(c for c, _ in same)
            if self.runtimes:
                return sum(t for _, t in self.runtimes.values()) / sum(
                    c for c, _ in self.runtimes.values()
                )
        return self.default_runtime

    def observe(self) -> Observation:
        """What the policy sees now: queue lengths, per-user demand, task granularity."""
        tasks = self.outstanding()
        with self._lock:
            count = sum(c for c, _ in self.runtimes.values())
            grain = sum(t for _, t in self.runtimes.values()) / count if count else None
        demand: dict[str, Vector] = {}
        for user, user_tasks in tasks.items():
            vector: Vector = {}
            for task in user_tasks:
                for r, q in task.request.items():
                    vector[r] = vector.get(r, 0.0) + q
            demand[user] = vector
        return Observation(
            self.backend.clock.now(),
            {u: sum(1 for t in ts if t.node is None) for u, ts in tasks.items()},
            {u: sum(1 for t in ts if t.node is not None) for u, ts in tasks.items()},
            demand,
            grain,
        )

    # --- deciding --------------------------------------------------------------------------
    def predict(self) -> list[Prediction]:
        """Predictions for every candidate ordering, from the outstanding work now."""
        tasks = self.outstanding(self.horizon)
        now = self.backend.clock.now()
        cache: dict[tuple[str, tuple[tuple[str, float], ...]], float] = {}

        def runtime(task: QueuedTask) -> float:
            key = (task.user, task.shape)
            if key not in cache:
                cache[key] = self.runtime_estimate(task)
            return cache[key]

        return [simulate(c, self.capacity, tasks, runtime, now) for c in self.candidates]

    def _score(self, prediction: Prediction) -> tuple[float, float]:
        if self.objective == "jct":
            return (prediction.mean_completion, prediction.makespan)
        return (prediction.makespan, prediction.mean_completion)

    def decide(self) -> Decision:
        """Predict every candidate and switch to the best one if it is clearly better."""
        self._check_open()
        observation = self.observe()
        predictions = self.predict()
        now = observation.time
        current = next((p for p in predictions if p.ordering == self.ordering.name), None)
        best = min(predictions, key=self._score)
        switched = False
        if current is None:
            switched = True
        elif best.ordering != current.ordering:
            ahead = self._score(current)[0] - now
            gain = self._score(current)[0] - self._score(best)[0]
            switched = gain > self.margin * max(ahead, 1e-9)
        if switched:
            self.set_ordering(best.ordering)
        decision = Decision(observation, tuple(predictions), self.ordering.name, switched)
        with self._lock:
            self.decisions.append(decision)
        return decision
