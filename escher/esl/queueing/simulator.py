"""Predicting how outstanding work finishes under an ordering: a small discrete-event replay.

The replay plans as the live policy does (`escher.esl.queueing.planner.fill` over the pooled
free capacity, in the ordering's order): a chosen task that fits a node now starts there (on
the node it fits most tightly); one that fits none keeps its share of the pool reserved for
that round (its quota waits for room on a node), so the others cannot use it meanwhile.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from escher.core.resources import fits
from escher.esl.queueing.orderings import Ordering
from escher.esl.queueing.planner import QueuedTask, fill
from escher.esl.queueing.vectors import Vector, add, pooled, take


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


class _Replay:
    """The state of one replay: free resources per node, running tasks, queues, the clock."""

    def __init__(
        self,
        ordering: Ordering,
        capacity: Mapping[str, Mapping[str, float]],
        runtime: Callable[[QueuedTask], float],
        now: float,
    ) -> None:
        self.ordering = ordering
        self.totals = pooled(capacity)
        self.free = {n: dict(c) for n, c in capacity.items()}
        self.nodes = sorted(capacity)
        self.runtime = runtime
        self.used: Vector = {}
        self.alloc: dict[str, Vector] = {}
        self.ends: list[tuple[float, int, str, str, QueuedTask]] = []
        self.job_end: dict[str, float] = {}
        self.queues: dict[str, deque[QueuedTask]] = {}
        self.counter = 0
        self.clock = now

    def start(self, user: str, node: str, task: QueuedTask, end: float) -> None:
        take(self.free[node], task.request)
        add(self.used, task.request)
        add(self.alloc[user], task.request)
        heapq.heappush(self.ends, (end, self.counter, user, node, task))
        self.counter += 1

    def load(self, tasks: Mapping[str, Sequence[QueuedTask]]) -> None:
        """Running tasks end after their estimate minus what they ran (at least a tenth of
        it); the others queue."""
        now = self.clock
        self.alloc = {u: {} for u in tasks}
        for user, user_tasks in tasks.items():
            self.queues[user] = deque()
            for task in user_tasks:
                if task.node is not None and task.node in self.free:
                    estimate = self.runtime(task)
                    ran = now - (task.started_at if task.started_at is not None else now)
                    self.start(user, task.node, task, now + max(estimate - ran, 0.1 * estimate))
                else:
                    self.queues[user].append(task)

    def arrive(self, task: QueuedTask) -> None:
        self.queues.setdefault(task.user, deque()).append(task)
        self.alloc.setdefault(task.user, {})

    def plan_round(self) -> None:
        """One planning round: start what the filling chooses and some node fits now."""
        free = {r: self.totals[r] - self.used.get(r, 0.0) for r in self.totals}
        planned = {u: dict(a) for u, a in self.alloc.items()}
        fill(self.ordering, self.totals, free, planned, self.queues, self._serve)

    def _serve(self, user: str, task: QueuedTask, index: int) -> bool:
        fitting = [n for n in self.nodes if fits(task.request, self.free[n])]
        if not fitting:
            return False
        node = min(fitting, key=lambda n: (sum(self.free[n].values()), n))
        del self.queues[user][index]
        self.start(user, node, task, self.clock + self.runtime(task))
        return True

    def finish_next(self) -> None:
        """Advance the clock to the next end and release every task ending then."""
        self.clock = self.ends[0][0]
        while self.ends and self.ends[0][0] <= self.clock:
            _, _, user, node, task = heapq.heappop(self.ends)
            add(self.free[node], task.request)
            take(self.used, task.request)
            take(self.alloc[user], task.request)
            self.job_end[task.job] = max(self.job_end.get(task.job, self.clock), self.clock)


def simulate(
    ordering: Ordering,
    capacity: Mapping[str, Mapping[str, float]],
    tasks: Mapping[str, Sequence[QueuedTask]],
    runtime: Callable[[QueuedTask], float],
    now: float,
    arrivals: Sequence[tuple[float, QueuedTask]] = (),
) -> Prediction:
    """Predict how `tasks` finish under `ordering` (a greedy, event-driven replay).

    Running tasks (those with a node) end after `runtime(task)` minus what they have run
    already (at least a tenth of it); queued ones start, whenever resources free up, in the
    ordering's order, on the node that fits them most tightly. Each of `arrivals` (time,
    task) joins its user's queue at that time; its job counts in the prediction like the
    others.

    Args:
        ordering: The candidate ordering.
        capacity: Node -> managed resource -> capacity.
        tasks: User -> outstanding tasks (running first), as `QueueingPolicy.outstanding`.
        runtime: Estimated runtime of a task.
        now: The current clock time.
        arrivals: (time, task) joining later.

    Returns:
        The `Prediction`.
    """
    replay = _Replay(ordering, capacity, runtime, now)
    replay.load(tasks)
    pending = deque(sorted(arrivals, key=lambda a: (a[0], a[1].seq)))

    def admit(until: float) -> None:
        while pending and pending[0][0] <= until:
            replay.arrive(pending.popleft()[1])

    admit(replay.clock)
    while True:
        replay.plan_round()
        if pending and (not replay.ends or pending[0][0] < replay.ends[0][0]):
            replay.clock = pending[0][0]
            admit(replay.clock)
            continue
        if not replay.ends:
            break
        replay.finish_next()
        admit(replay.clock)
    if any(replay.queues.values()):  # could never start (too large for every node)
        return Prediction(ordering.name, float("inf"), float("inf"))
    job_end = replay.job_end
    mean = sum(job_end.values()) / len(job_end) if job_end else now
    return Prediction(ordering.name, mean, replay.clock)
