"""The workload file of `escher what-if`: a plan, plus when each task arrives and how long it runs.

```json
{
  "workload": 1,
  "plan": {"tasks": [{"name": "etl", "resources": {"CPU": 1}, "count": 3}]},
  "tasks": {"etl": {"arrival": 0, "interval": 0.5, "duration": 10, "user": "ann"}}
}
```

`plan` is a plan in the plan file format (its tasks, the ephemeral resources to create first,
its intents). `tasks` gives, for each plan task: `duration` (seconds each replica runs: a number,
or a list with one per replica), `arrival` (when the first replica arrives: a number, with
`interval` seconds between replicas; or a list with one time per replica; default 0), `user`
(whose queue it joins under a queueing policy; default the task's name) and `job` (the job it
counts in for job completion times; default the task's name).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from escher.core.errors import PlanFormatError
from escher.core.plan import Plan, PlannedTask
from escher.core.resources import validate_quantity

FORMAT_VERSION = 1
_KEYS = frozenset({"duration", "arrival", "interval", "user", "job"})


@dataclass(frozen=True)
class TaskTiming:
    """When the replicas of one plan task arrive, how long each runs, whose they are."""

    task: PlannedTask
    arrivals: tuple[float, ...]
    durations: tuple[float, ...]
    user: str
    job: str

    def to_dict(self) -> dict[str, Any]:
        """The `tasks` entry of this task in the workload file."""
        return {
            "arrival": list(self.arrivals),
            "duration": list(self.durations),
            "user": self.user,
            "job": self.job,
        }


@dataclass(frozen=True)
class Workload:
    """A plan with arrival times and durations: what `what_if` replays."""

    plan: Plan
    timings: tuple[TaskTiming, ...]

    @property
    def size(self) -> int:
        """Number of task replicas."""
        return sum(len(t.arrivals) for t in self.timings)

    def to_dict(self) -> dict[str, Any]:
        """The workload file format."""
        return {
            "workload": FORMAT_VERSION,
            "plan": self.plan.to_dict(),
            "tasks": {t.task.name: t.to_dict() for t in self.timings},
        }

    def save(self, path: str | Path) -> None:
        """Write the workload file (JSON)."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<workload>") -> Workload:
        """Parse the workload file format.

        Raises:
            PlanFormatError: naming `source`, the place and the problem.
        """
        if not isinstance(data, Mapping):
            raise PlanFormatError(f"{source}: expected a JSON object with 'plan' and 'tasks'.")
        unknown = set(data) - {"workload", "plan", "tasks"}
        if unknown:
            raise PlanFormatError(f"{source}: unknown field(s) {sorted(unknown)}.")
        if data.get("workload", FORMAT_VERSION) != FORMAT_VERSION:
            raise PlanFormatError(
                f"{source}: workload format {data.get('workload')!r}; this escher reads "
                f"{FORMAT_VERSION}."
            )
        plan = Plan.from_dict(data.get("plan"), source=f"{source}: plan")
        raw = data.get("tasks")
        if not isinstance(raw, Mapping):
            raise PlanFormatError(f"{source}: 'tasks' must map plan task names to timings.")
        names = {t.name for t in plan.tasks}
        stray = sorted(set(raw) - names)
        if stray:
            raise PlanFormatError(
                f"{source}: tasks {stray} are not in the plan (its tasks: {sorted(names)})."
            )
        timings = []
        for task in plan.tasks:
            if task.name not in raw:
                raise PlanFormatError(
                    f"{source}: tasks.{task.name}: missing; give at least its 'duration'."
                )
            timings.append(_timing(task, raw[task.name], f"{source}: tasks.{task.name}"))
        return cls(plan, tuple(timings))

    @classmethod
    def load(cls, path: str | Path) -> Workload:
        """Read a workload file.

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
        """
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PlanFormatError(f"{path}: cannot read workload file: {exc.strerror}.") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanFormatError(
                f"{path}: line {exc.lineno} column {exc.colno}: {exc.msg}."
            ) from None
        return cls.from_dict(data, source=str(path))


def _numbers(value: Any, count: int, where: str) -> tuple[float, ...] | None:
    """A list of `count` non-negative numbers, or None for a single number."""
    if isinstance(value, Sequence) and not isinstance(value, str):
        if len(value) != count:
            raise PlanFormatError(f"{where}: expected {count} values (one per replica).")
        try:
            return tuple(validate_quantity(v, what=where) for v in value)
        except Exception as exc:
            raise PlanFormatError(f"{where}: {exc}") from None
    return None


def _one(value: Any, where: str) -> float:
    try:
        return validate_quantity(value, what=where)
    except Exception as exc:
        raise PlanFormatError(f"{where}: {exc}") from None


def _timing(task: PlannedTask, raw: Any, where: str) -> TaskTiming:
    if not isinstance(raw, Mapping):
        raise PlanFormatError(f"{where}: expected an object with 'duration'.")
    unknown = set(raw) - _KEYS
    if unknown:
        raise PlanFormatError(f"{where}: unknown field(s) {sorted(unknown)}; use {sorted(_KEYS)}.")
    if "duration" not in raw:
        raise PlanFormatError(f"{where}: 'duration' (seconds) is required.")
    count = task.count
    durations = _numbers(raw["duration"], count, f"{where}.duration")
    if durations is None:
        durations = (_one(raw["duration"], f"{where}.duration"),) * count
    arrivals = _numbers(raw.get("arrival", 0.0), count, f"{where}.arrival")
    if arrivals is None:
        start = _one(raw.get("arrival", 0.0), f"{where}.arrival")
        step = _one(raw.get("interval", 0.0), f"{where}.interval")
        arrivals = tuple(start + i * step for i in range(count))
    elif "interval" in raw:
        raise PlanFormatError(f"{where}: 'interval' goes with a single 'arrival' time.")
    user, job = raw.get("user", task.name), raw.get("job", task.name)
    for key, value in (("user", user), ("job", job)):
        if not isinstance(value, str) or not value:
            raise PlanFormatError(f"{where}.{key}: expected a non-empty string.")
    return TaskTiming(task, arrivals, durations, user, job)
