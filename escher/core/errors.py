"""The exception tree of escher. Every error the library raises derives from `EscherError`.

```
EscherError
├── ValidationError (ValueError)       bad input; nothing was changed
│   ├── InvalidResourceNameError       a label or resource name escher cannot use
│   ├── InvalidCapacityError           negative, NaN, infinite, non-numeric, not integral
│   ├── ReservedResourceError          set_resource on CPU/GPU/memory or a node-defined name
│   ├── UnknownNodeError (LookupError) a node id that is not in the cluster
│   ├── InvalidNodeSpecError           node_spec is not an id, a vector, labels or None
│   ├── InvalidOptionError (TypeError) an option or keyword the call does not take
│   └── PlanFormatError                a plan/cluster file that does not parse (names the place)
├── ConfigError                        malformed configuration, unknown option
│   ├── UnknownBackendError            no backend of that name (also LookupError)
│   └── InvalidBackendError (TypeError) a backend class that breaks the backend contract
├── BackendError                       the backend failed
│   ├── BackendUnavailableError        extra not installed, or cluster unreachable
│   ├── UnsupportedError               the backend lacks a capability (Backend.capabilities)
│   └── ConflictError                  concurrent updates kept colliding; safe to retry
├── NotInitializedError                escher.init() has not been called
├── NotInTaskError                     node_spec=None / node_id() outside a task
├── TaskError                          escher.get() on a task that produced no value
│   ├── TaskFailedError                it raised; the exception type could not be rebuilt
│   ├── TaskCancelledError             it was cancelled
│   ├── NodeDiedError                  its node left and no retry remained
│   ├── UnschedulableError             no node can ever fit it (status INFEASIBLE)
│   └── GangAbortedError               its gang's reservation was rolled back before it ran
├── GetTimeoutError (TimeoutError)     escher.get() timed out; the task keeps going
├── PlanningReadError                  a planning run read a task's result (nothing runs)
└── VerificationError                  refused to launch a plan not proven feasible
```

Exceptions raised *inside* a task reach the caller of `escher.get()` as themselves.
"Cannot be placed right now" is not an error: it is a `Status` value on the task handle.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class EscherError(Exception):
    """Root of every error escher raises."""


class ValidationError(EscherError, ValueError):
    """Bad input. The call changed nothing."""


class InvalidResourceNameError(ValidationError):
    """A resource name or ephemeral label escher cannot use."""


class InvalidCapacityError(ValidationError):
    """A capacity or quantity that is negative, NaN, infinite, non-numeric or not integral."""


class ReservedResourceError(ValidationError):
    """An attempt to set a resource that the node itself defines (CPU, GPU, memory, ...)."""


class UnknownNodeError(ValidationError, LookupError):
    """A node id that the cluster does not have (or no longer has)."""


class InvalidNodeSpecError(ValidationError):
    """A node_spec that is not a node id, a resource vector, a label selector or None."""


class InvalidOptionError(ValidationError, TypeError):
    """An option or keyword argument the call does not take (names it, suggests the closest)."""


class PlanFormatError(ValidationError):
    """A plan or cluster description that does not parse. The message names file and place."""


class ConfigError(EscherError):
    """Configuration that escher cannot use."""


class UnknownBackendError(ConfigError, LookupError):
    """No backend is registered under that name."""


class InvalidBackendError(ConfigError, TypeError):
    """A backend class that breaks the contract (e.g. claims a capability it lacks)."""


class BackendError(EscherError):
    """The backend failed to do what was asked."""


class BackendUnavailableError(BackendError):
    """A backend cannot be used here: its extra is missing or its cluster is unreachable."""


class UnsupportedError(BackendError):
    """The backend does not offer this capability."""


class ConflictError(BackendError):
    """Concurrent updates collided more often than the retry budget allows. Safe to retry."""


class NotInitializedError(EscherError):
    """escher.init() has not been called in this process."""


class NotInTaskError(EscherError):
    """A call that needs the caller's own node was made outside a task."""


class TaskError(EscherError):
    """A task did not produce a value."""

    def __init__(self, message: str, *, task_name: str | None = None) -> None:
        super().__init__(message)
        self.task_name = task_name


class TaskFailedError(TaskError):
    """The task raised an exception that could not be rebuilt in this process."""


class TaskCancelledError(TaskError):
    """The task was cancelled before it finished."""


class NodeDiedError(TaskError):
    """The node running the task left the cluster and the task had no retries left."""


class UnschedulableError(TaskError):
    """No node of the cluster can ever fit the task's request."""


class GangAbortedError(TaskError):
    """A gang member whose reservation was rolled back before it ran (it did not run)."""


class GetTimeoutError(EscherError, TimeoutError):
    """escher.get() returned before the task finished. The task keeps running."""


class PlanningReadError(EscherError):
    """A planning run read a task's result or waited on a task: nothing runs in a planning
    run, so the plan ends at that line (plan an app that branches on results in phases)."""

    def __init__(self, message: str, task: str = "") -> None:
        super().__init__(message)
        self.task = task


class VerificationError(EscherError):
    """A plan was not proven feasible and the caller asked escher to refuse it."""

    def __init__(self, message: str, result: object = None) -> None:
        super().__init__(message)
        self.result = result


def _edit_distance(a: str, b: str, limit: int) -> int:
    """Optimal string alignment distance (insertions, deletions, substitutions, swaps),
    or ``limit + 1`` as soon as it must exceed `limit`."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i]
        for j, cb in enumerate(b, 1):
            cost = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, prev2[j - 2] + 1)
            row.append(cost)
        if min(row) > limit:
            return limit + 1
        prev2, prev = prev, row
    return prev[-1]


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice closest to `word`, or None when none is close enough to suggest.

    Short names (node ids such as ``n1``) are compared by edit distance: a choice one edit away
    (two for names of five characters or more) is close, however short the names are, which
    difflib's similarity ratio misses (``n3`` vs ``n1`` scores 0.5). Longer names also accept
    difflib's close matches. Ties go to the choice that sorts first.
    """
    options = sorted(set(choices))
    if not options or word in options:
        return None
    limit = 1 if len(word) < 5 else 2
    lowered = word.lower()
    scored = [(_edit_distance(lowered, c.lower(), limit), c) for c in options]
    if scored:
        best_distance, best = min(scored)
        if best_distance <= limit and best_distance < max(len(word), 1):
            return best
    close = difflib.get_close_matches(word, options, n=1)
    return close[0] if close else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix naming the closest choice, or '' when none is close.

    Example:
        >>> did_you_mean("n3", ["n1", "n2"])
        " Did you mean 'n1'?"
    """
    match = closest(word, choices)
    return f" Did you mean {match!r}?" if match is not None else ""


def short_repr(value: object, limit: int = 60) -> str:
    """`repr(value)` cut to `limit` characters, for error messages (never raises)."""
    try:
        text = repr(value)
    except Exception:  # a huge int, or an object whose repr fails
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
