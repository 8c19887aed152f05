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

import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import validate_count, validate_quantity
from escher.esl.queueing.orderings import ORDERINGS, Ordering, ordering_of
from escher.esl.queueing.planner import QueuedTask
from escher.esl.queueing.policy import QueueingPolicy
from escher.esl.queueing.simulator import Prediction, simulate
from escher.esl.queueing.vectors import Vector

__all__ = ["AdaptivePolicy", "Decision", "Observation", "censored_mean"]

_OBJECTIVES = ("jct", "makespan")
Shape = tuple[tuple[str, float], ...]
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0
_NORMAL = NormalDist()


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


def censored_mean(total: float, count: int, elapsed: Sequence[float], prior: float) -> float:
    """Mean runtime of a class of tasks, `count` of which finished (in `total` seconds) while
    the others are still running and have run `elapsed` seconds each so far.

    A running task takes at least what it has run: the mean solves
    ``m = (total + sum(max(e, m) for e in elapsed)) / (count + len(elapsed))`` (each running
    task is assumed to take the mean, or what it has run already if that is longer). This
    removes the bias of averaging finished tasks only, which early in a class's life are its
    shortest ones. Without finished tasks the iteration starts from `prior`; without any data
    the result is `prior`.
    """
    k = len(elapsed)
    mean = total / count if count else prior
    if k == 0:
        return mean
    for _ in range(60):
        new = (total + sum(max(e, mean) for e in elapsed)) / (count + k)
        if abs(new - mean) <= 1e-6 * max(mean, 1e-9):
            return new
        mean = new
    return mean


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
        lookback: Predictions assume the jobs that arrived in the last `lookback` seconds
            arrive again, `lookback` seconds later (the recent past repeats), so an
            ordering that serves the work in hand well but makes newcomers wait (FIFO's
            head-of-line blocking) is charged for it. Default: `interval`, the time the
            chosen ordering stays active before the next periodic decision; 0 predicts the
            work in hand only.
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
        lookback: float | None = None,
        backend: Backend | None = None,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        chosen = [ordering_of(c) for c in (candidates or list(ORDERINGS))]
        if not chosen:
            raise ValidationError("candidates must name at least one ordering.")
        if objective not in _OBJECTIVES:
            raise ValidationError(f"objective must be one of {_OBJECTIVES}, got {objective!r}.")
        validate_count(horizon, what="horizon")
        start = ordering_of(initial) if initial is not None else chosen[0]
        super().__init__(start, backend, nodes=nodes, name=name)
        self.candidates = tuple(chosen)
        self.objective = objective
        self.interval = validate_quantity(interval, what="interval")
        if self.interval <= 0:
            raise ValidationError("interval must be > 0 seconds.")
        self.margin = validate_quantity(margin, what="margin")
        self.default_runtime = validate_quantity(default_runtime, what="default_runtime")
        self.horizon = horizon
        self.lookback = validate_quantity(
            self.interval if lookback is None else lookback, what="lookback"
        )
        #: Job -> (arrival time, user, request shape -> number of tasks).
        self._job_log: dict[str, tuple[float, str, dict[Shape, int]]] = {}
        self.decisions: list[Decision] = []
        self._guesses: dict[str, float] = {}  # job -> runtime guessed before any finished
        self._errors: dict[str, float] = {}  # job -> log(observed mean / that guess)
        self._jobs: set[str] = set()
        self._decide_soon = False
        self._ticking = False

    # --- watching --------------------------------------------------------------------------
    def after_submit(self, user: str, job: str, managed: Mapping[str, float]) -> None:
        """A new job triggers a decision; the job's request shapes are logged."""
        shape: Shape = tuple(sorted((r, float(q)) for r, q in managed.items()))
        with self._lock:
            new = job not in self._jobs
            self._jobs.add(job)
            if shape:
                log = self._job_log.setdefault(job, (self.backend.clock.now(), user, {}))
                log[2][shape] = log[2].get(shape, 0) + 1
            schedule = new and not self._decide_soon
            if schedule:
                self._decide_soon = True
            tick = not self._ticking
            self._ticking = True
        if schedule:
            self.call_later(0.0, self._decide_now)
        if tick:
            self.call_later(self.interval, self._tick)

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
        """The runtime the predictions assume for `task` (from what was observed only)."""
        return self._estimator(self.outstanding(self.horizon))(task)

    def _estimator(
        self, tasks: Mapping[str, Sequence[QueuedTask]], alias: Mapping[str, str] | None = None
    ) -> Callable[[QueuedTask], float]:
        """Runtime estimates from finished tasks and, as lower bounds, running ones.

        Tasks of one job differ, and a job ends with its slowest task: each queued task's
        estimate is its class mean times ``1 + cv * z``, with ``cv`` the pooled within-job
        coefficient of variation of the finished tasks and ``z`` a standard normal quantile
        picked by the task's sequence number (quasi-random, the same for every candidate
        ordering).

        Levels, most specific first: the task's job, its user and shape, its shape. Each
        level's estimate is `censored_mean` of its finished runtimes and its running tasks'
        elapsed times; a level with no data inherits the next one's. A shape never seen
        gets the mean over the shapes seen (each shape one class, however many tasks it
        had), else `default_runtime`. `alias` maps a replayed job to the job it copies.
        """
        now = self.backend.clock.now()
        running_job: dict[str, list[float]] = {}
        running_us: dict[tuple[str, Shape], list[float]] = {}
        running_shape: dict[Shape, list[float]] = {}
        for user_tasks in tasks.values():
            for task in user_tasks:
                if task.node is None:
                    continue
                started = task.started_at
                ran = max(0.0, now - started) if started is not None else 0.0
                running_job.setdefault(task.job, []).append(ran)
                running_us.setdefault((task.user, task.shape), []).append(ran)
                running_shape.setdefault(task.shape, []).append(ran)
        with self._lock:
            by_us = dict(self.runtimes)
            by_job = dict(self.job_runtimes)
        by_shape: dict[Shape, tuple[int, float]] = {}
        for (_, shape), (count, total) in by_us.items():
            c, t = by_shape.get(shape, (0, 0.0))
            by_shape[shape] = (c + count, t + total)
        seen = [
            censored_mean(t, c, running_shape.get(shape, ()), self.default_runtime)
            for shape, (c, t) in by_shape.items()
        ]
        fallback = sum(seen) / len(seen) if seen else self.default_runtime
        # Pooled within-job coefficient of variation of the finished tasks' runtimes.
        spread = weight = 0.0
        for c, t, squares in by_job.values():
            if c >= 2 and t > 0:
                variance = max(0.0, (squares - t * t / c) / (c - 1))
                spread += variance / (t / c) ** 2 * (c - 1)
                weight += c - 1
        cv = math.sqrt(spread / weight) if weight else 0.0
        cache: dict[tuple[str, str, Shape], float] = {}

        def estimate(task: QueuedTask) -> float:
            job = alias.get(task.job, task.job) if alias else task.job
            key = (job, task.user, task.shape)
            value = cache.get(key)
            if value is None:
                c, t = by_shape.get(task.shape, (0, 0.0))
                value = censored_mean(t, c, running_shape.get(task.shape, ()), fallback)
                c, t = by_us.get((task.user, task.shape), (0, 0.0))
                value = censored_mean(t, c, running_us.get((task.user, task.shape), ()), value)
                c, t, _ = by_job.get(job, (0, 0.0, 0.0))
                value = censored_mean(t, c, running_job.get(job, ()), value)
                cache[key] = value
            if not cv or task.node is not None:  # a running one: what it ran already tells more
                return value
            # A quasi-random normal quantile fixed by the task (golden-ratio sequence): the
            # same draw for every candidate ordering, so their comparison has no noise.
            quantile = min(max(((task.seq + 1) * _GOLDEN) % 1.0, 0.005), 0.995)
            return value * max(0.1, 1.0 + cv * _NORMAL.inv_cdf(quantile))

        return estimate

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
        arrivals = self._replayed_arrivals(now, tasks)
        alias = {t.job: t.job[1:] for _, t in arrivals}
        runtime = self._estimator(tasks, alias)
        with self._lock:
            known = {j for j, (c, _, _) in self.job_runtimes.items() if c}
            finished = {j: t / c for j, (c, t, _) in self.job_runtimes.items() if c}
        # How wrong were the guesses for jobs none of whose tasks had finished yet?
        for user_tasks in tasks.values():
            for task in user_tasks:
                if task.job not in known and task.job not in self._guesses:
                    # The class mean (a task with a node gets no spread), as guessed now.
                    self._guesses[task.job] = runtime(replace(task, node="", started_at=now))
        for job, guess in self._guesses.items():
            if job in finished and guess > 0 and finished[job] > 0:
                self._errors[job] = math.log(finished[job] / guess)
        errors = list(self._errors.values())
        if len(errors) < 3 or statistics.pstdev(errors) < 0.05:
            return [
                simulate(c, self.capacity, tasks, runtime, now, arrivals) for c in self.candidates
            ]
        # Guessed runtimes are uncertain: predict with them scaled by exp(mu - sd) and by
        # exp(mu + sd) (mu, sd: mean and deviation of the past guesses' log errors) and
        # score each ordering by the average, so an ordering whose outcome hinges on the
        # guesses (FIFO behind a job never seen finishing) is not chosen on a lucky guess.
        mu, sd = statistics.fmean(errors), statistics.pstdev(errors)
        predictions = []
        for c in self.candidates:
            runs = []
            for factor in (math.exp(mu - sd), math.exp(mu + sd)):

                def scaled(task: QueuedTask, factor: float = factor) -> float:
                    job = alias.get(task.job, task.job)
                    return runtime(task) * (1.0 if job in known else factor)

                runs.append(simulate(c, self.capacity, tasks, scaled, now, arrivals))
            predictions.append(
                Prediction(
                    c.name,
                    statistics.fmean(p.mean_completion for p in runs),
                    statistics.fmean(p.makespan for p in runs),
                )
            )
        return predictions

    def _replayed_arrivals(
        self, now: float, tasks: Mapping[str, Sequence[QueuedTask]]
    ) -> list[tuple[float, QueuedTask]]:
        """The jobs of the last `lookback` seconds, arriving again `lookback` seconds later.

        Their tasks are copies (job ``"~" + job``, same user and request), behind every real
        task in submission order; runtimes are estimated like the original job's.
        """
        if self.lookback <= 0:
            return []
        seq = 1 + max((t.seq for ts in tasks.values() for t in ts), default=0)
        arrivals: list[tuple[float, QueuedTask]] = []
        with self._lock:
            recent = [
                (t, job, user, shapes)
                for job, (t, user, shapes) in self._job_log.items()
                if now - self.lookback < t <= now
            ]
        for t, job, user, shapes in sorted(recent, key=lambda r: r[0]):
            for shape, count in shapes.items():
                for _ in range(min(count, self.horizon)):
                    copy = QueuedTask(user, seq, dict(shape), "~" + job)
                    arrivals.append((t + self.lookback, copy))
                    seq += 1
        return arrivals

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
