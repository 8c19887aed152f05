"""Deadline jobs: a deadline and, in order of preference, the ways (`Option`s) to run it."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from escher.core.errors import ValidationError
from escher.core.resources import Resources, validate_quantity


@dataclass(frozen=True)
class Option:
    """One way to run a job.

    Attributes:
        resources: The request on this kind of resource, e.g. ``{"GPU": 1, "CPU": 1}``.
        runtime: Estimated seconds on it (the scheduler's belief, not the truth).
        labels: Only nodes carrying all these labels (None: any node that fits).
    """

    resources: Mapping[str, float]
    runtime: float
    labels: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", Resources.of(self.resources))
        runtime = validate_quantity(self.runtime, what="runtime")
        if runtime <= 0:
            raise ValidationError(f"an option's runtime must be > 0 seconds, got {runtime}.")
        object.__setattr__(self, "runtime", runtime)
        if self.labels is not None:
            object.__setattr__(self, "labels", {str(k): str(v) for k, v in self.labels.items()})

    def allows(self, labels: Mapping[str, str], total: Resources) -> bool:
        """True if a node with these labels and total resources could run this option."""
        wanted = self.labels or {}
        return all(labels.get(k) == v for k, v in wanted.items()) and Resources.of(
            self.resources
        ).fits_in(total)


@dataclass(frozen=True)
class DeadlineJob:
    """A job with a deadline (clock time) and options in order of preference.

    Raises:
        ValidationError: no option, or a bad name or deadline.
    """

    name: str
    deadline: float
    options: tuple[Option, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValidationError(f"job name must be a non-empty string, got {self.name!r}.")
        if (
            isinstance(self.deadline, bool)
            or not isinstance(self.deadline, int | float)
            or (not math.isfinite(self.deadline))
        ):
            raise ValidationError(f"deadline of {self.name!r} must be a finite number.")
        options = tuple(self.options)
        if not options or not all(isinstance(o, Option) for o in options):
            raise ValidationError(f"job {self.name!r} needs one or more Option values.")
        object.__setattr__(self, "options", options)
