"""What to run (`TaskSpec`), where it stands (`TaskState`, `Status`) and its handle (`TaskRef`)."""

from __future__ import annotations

import contextvars
import enum
import functools
import itertools
import math
import numbers
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from escher.core.errors import (
    GetTimeoutError,
    TaskCancelledError,
    TaskError,
    ValidationError,
    short_repr,
)
from escher.core.resources import Resources, validate_quantity

_task_ids = itertools.count(1)

#: The locks handles share, one picked per handle in turn: a lock per handle would be one
#: more object per waiting task for Python's cyclic collector. A handle holds its lock only
#: briefly and never calls out while holding it (callbacks run after), so handles sharing a
#: lock never wait on each other for long and never deadlock.
_HANDLE_LOCKS = tuple(threading.Lock() for _ in range(64))


def _fresh_handle_locks() -> None:
    """In a forked child: new shared locks (one held by another thread at the fork would
    stay held there forever, for every handle made after it)."""
    global _HANDLE_LOCKS
    _HANDLE_LOCKS = tuple(threading.Lock() for _ in range(64))


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_fresh_handle_locks)


class TaskState(enum.Enum):
    """Lifecycle of a task. FINISHED, FAILED and CANCELLED are final."""

    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    # Members are singletons compared by identity: hash them by identity too (in C), not by
    # Enum's Python-level hash of the name (a handle asks `state in _FINAL_STATES` several
    # times per task: 0.5 -> 0.13 us a look-up).
    __hash__ = object.__hash__

    @property
    def final(self) -> bool:
        """True once the task will not change state again."""
        return self in _FINAL_STATES


#: The final states (a set lookup: a handle asks several times per task, and an enum
#: member's property costs about five times as much).
_FINAL_STATES = frozenset({TaskState.FINISHED, TaskState.FAILED, TaskState.CANCELLED})


class StatusCode(enum.Enum):
    """Scheduling outcome of a task, in the style of the Kubernetes scheduler framework.

    * SCHEDULED: placed on a node (see `TaskRef.node_id`).
    * UNSCHEDULABLE: no node has the request available now; it waits and is retried
      whenever resources are released or created. Includes requests for ephemeral labels
      that no node holds yet (they may be created later).
    * INFEASIBLE: no node of the cluster could fit the request even when idle; the task
      fails at once with `UnschedulableError` instead of hanging.
    * PENDING: not yet considered by the scheduler.
    """

    PENDING = "pending"
    SCHEDULED = "scheduled"
    UNSCHEDULABLE = "unschedulable"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True)
class Status:
    """A scheduling outcome as a value: a code and a human reason."""

    code: StatusCode
    reason: str = ""

    def __str__(self) -> str:
        return f"{self.code.value}: {self.reason}" if self.reason else self.code.value


#: The status every handle starts with.
_PENDING = Status(StatusCode.PENDING)


@functools.lru_cache(maxsize=1024)
def _scheduled_on(node_id: str) -> Status:
    """The status of a task placed on `node_id` (one value per node)."""
    return Status(StatusCode.SCHEDULED, f"on {node_id}")


@dataclass(frozen=True)
class TaskSpec:
    """Everything a backend needs to run one task.

    Attributes:
        fn: The Python callable to run (None for container tasks).
        args: Positional arguments for `fn`.
        kwargs: Keyword arguments for `fn`.
        resources: The request: physical (CPU, GPU, memory) and ephemeral labels.
        name: A name for logs and errors (defaults to the callable's name).
        max_retries: How often to rerun the task when its node dies.
        retry_exceptions: Also rerun (within `max_retries`) when the task raises.
        duration: Simulated seconds the task takes (virtual-clock backends only).
        image: Container image (container backends; Python callables use the runner image).
        command: Container command (container backends).
    """

    fn: Callable[..., Any] | None
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    name: str = ""
    max_retries: int = 0
    retry_exceptions: bool = False
    duration: float | None = None
    image: str | None = None
    command: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if self.fn is not None and not callable(self.fn):
            raise ValidationError(f"fn must be callable, got {short_repr(self.fn)}.")
        if type(self.args) is not tuple:
            if not isinstance(self.args, list | tuple):
                raise ValidationError(
                    f"args must be a tuple of the task's positional arguments, got "
                    f"{short_repr(self.args)}."
                )
            object.__setattr__(self, "args", tuple(self.args))
        if (type(self.kwargs) is not dict and not isinstance(self.kwargs, Mapping)) or not all(
            type(k) is str for k in self.kwargs
        ):
            raise ValidationError(
                f"kwargs must be a mapping of keyword name -> value, got {short_repr(self.kwargs)}."
            )
        object.__setattr__(self, "resources", request_of(self.resources))
        self._check_container()
        self._check_options()

    def _check_container(self) -> None:
        if self.name is not None and not isinstance(self.name, str):
            raise ValidationError(f"name must be a string, got {short_repr(self.name)}.")
        if self.image is not None and (not isinstance(self.image, str) or not self.image):
            raise ValidationError(
                f"image must be a non-empty string, got {short_repr(self.image)}."
            )
        if self.command is not None and (
            isinstance(self.command, str | bytes)
            or not isinstance(self.command, Sequence)
            or not all(isinstance(part, str) for part in self.command)
        ):
            raise ValidationError(
                f"command must be a list of strings (e.g. ['python', '-c', '...']), got "
                f"{short_repr(self.command)}."
            )
        if not self.name:
            name = getattr(self.fn, "__name__", None) or (self.command or ["task"])[0]
            object.__setattr__(self, "name", str(name))
        if self.fn is None and not self.command:
            raise ValidationError("a task needs a callable or a container command.")

    def _check_options(self) -> None:
        if (
            isinstance(self.max_retries, bool)
            or not isinstance(self.max_retries, int)
            or (self.max_retries < 0)
        ):
            raise ValidationError(
                f"max_retries must be an int >= 0, got {short_repr(self.max_retries)}."
            )
        if not isinstance(self.retry_exceptions, bool):
            raise ValidationError(
                f"retry_exceptions must be True or False, got {short_repr(self.retry_exceptions)}."
            )
        if self.duration is not None:
            object.__setattr__(self, "duration", validate_quantity(self.duration, what="duration"))


def request_of(resources: object, what: str = "resources") -> Resources:
    """`resources` as `Resources`, with errors naming the argument `what`.

    Raises:
        ValidationError: not a mapping of resource name -> quantity, or a bad name or
            quantity in it.
    """
    if resources is None or type(resources) is Resources:
        return resources or Resources()
    if type(resources) is dict:
        # A plain dict of str -> int/float, as nearly every launch writes it: equal requests
        # share one checked `Resources` (immutable), so a task's request is neither checked
        # nor built again, and is no new object for Python's cyclic collector to track.
        key = tuple(resources.items())
        if all(type(n) is str and type(q) in _PLAIN_NUMBERS for n, q in key):
            known = _requests.get(key)
            if known is None:
                known = _checked(resources, what)
                if len(_requests) >= _MAX_REQUESTS:
                    _requests.clear()
                _requests[key] = known
            return known
    if not isinstance(resources, Mapping):
        raise ValidationError(
            f"{what} must be a mapping of resource name -> quantity (e.g. {{'CPU': 1}}), got "
            f"{type(resources).__name__} {short_repr(resources)}."
        )
    return _checked(resources, what)


def _checked(resources: Mapping[Any, Any], what: str) -> Resources:
    try:
        return Resources(resources)
    except ValidationError as exc:
        raise type(exc)(f"{what}: {exc}") from None


#: Checked requests by their dict's items (only str names and int or float quantities are
#: looked up: a bool equals 1 but is refused as a quantity); at most
#: `_MAX_REQUESTS`, emptied when full.
_requests: dict[tuple[tuple[str, float], ...], Resources] = {}
_MAX_REQUESTS = 1024
_PLAIN_NUMBERS = (int, float)


def check_timeout(timeout: object) -> float | None:
    """A `timeout` argument: None (wait without limit) or finite seconds >= 0.

    Raises:
        ValidationError: anything else (NaN, infinity, negative, not a number).
    """
    if timeout is None:
        return None
    if type(timeout) is float or type(timeout) is int:
        if 0 <= timeout < _MAX_TIMEOUT:
            return timeout
    elif not isinstance(timeout, bool) and isinstance(timeout, numbers.Real):
        try:
            value = float(timeout)
        except OverflowError:
            value = math.inf
        if 0 <= value < _MAX_TIMEOUT:
            return value
    raise ValidationError(
        f"timeout must be None (wait without limit) or a number of seconds from 0 to "
        f"{_MAX_TIMEOUT:g}, got {short_repr(timeout)}."
    )


#: Longest timeout taken (threading refuses longer waits); None waits without limit.
_MAX_TIMEOUT = float(threading.TIMEOUT_MAX)


#: Keyword options of a task besides its body, arguments, request and name: what
#: `escher.launch` and every ESL's ``launch`` take and pass on to `TaskSpec`.
TASK_OPTIONS: tuple[str, ...] = ("max_retries", "retry_exceptions", "duration")


class TaskRef:
    """A handle to a launched task. Backends drive it; users wait on it and cancel it.

    Attributes:
        id: Unique id within this process.
        spec: The `TaskSpec` it runs.
    """

    #: Set when a backend took the handle (`Backend.launch`); waiting on a plain handle
    #: that no backend took is refused instead of blocking forever.
    _launched = False
    #: Backends: called with the handle once it is final, before its done callbacks (how a
    #: backend forgets a settled task without a callback entry per handle).
    _on_final: Callable[[TaskRef], None] | None = None

    def __init__(
        self,
        spec: TaskSpec,
        *,
        canceller: Callable[[TaskRef], bool] | None = None,
        waiter: Callable[[TaskRef, float | None], None] | None = None,
    ) -> None:
        number = next(_task_ids)
        self.id = f"t{number}"
        self.spec = spec
        self._canceller = canceller
        self._waiter = waiter
        # A handle is cheap: a shared lock; an event only once someone waits on it
        # unfinished, a callback list only once one is added.
        self._lock = _HANDLE_LOCKS[number & 63]
        self._finished: threading.Event | None = None
        self._state = TaskState.PENDING
        self._status = _PENDING
        self._node_id: str | None = None
        self._value: Any = None
        self._error: BaseException | None = None
        self._attempts = 0
        self._retries = 0
        # each done callback with the contextvars context it was added in
        self._callbacks: list[tuple[Callable[[TaskRef], None], contextvars.Context]] | None = None

    # --- what users read -------------------------------------------------------------
    @property
    def name(self) -> str:
        """The task's name."""
        return self.spec.name

    @property
    def state(self) -> TaskState:
        """Current lifecycle state."""
        return self._state

    @property
    def status(self) -> Status:
        """The latest scheduling outcome (code + reason)."""
        return self._status

    @property
    def node_id(self) -> str | None:
        """The node it runs or ran on (None until placed)."""
        return self._node_id

    @property
    def attempts(self) -> int:
        """How many times it was started."""
        return self._attempts

    def done(self) -> bool:
        """True once the task reached a final state."""
        return self._state in _FINAL_STATES

    def started(self) -> bool:
        """True once the task was placed and started (it may have finished since)."""
        return self._attempts > 0

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the task is done or `timeout` seconds pass; True if done.

        Raises:
            ValidationError: `timeout` is not None or finite seconds >= 0, or this handle
                was built by hand and never launched (nothing would ever finish it).
        """
        timeout = check_timeout(timeout)
        if not self._launched and type(self) is TaskRef and self._state not in _FINAL_STATES:
            raise ValidationError(
                f"task handle {self.id} ({self.name!r}) was never launched, so it never "
                "finishes; wait on the handle escher.launch() returned."
            )
        if self._waiter is not None and not self.done():
            self._waiter(self, timeout)
        with self._lock:
            if self._state in _FINAL_STATES:
                return True
            if self._finished is None:
                self._finished = threading.Event()
            finished = self._finished
        finished.wait(timeout)
        return self._state in _FINAL_STATES

    def result(self, timeout: float | None = None) -> Any:
        """The task's return value, waiting up to `timeout` seconds.

        Raises:
            GetTimeoutError: not done within `timeout`.
            TaskCancelledError: the task was cancelled.
            TaskError: a subclass saying why there is no value.
            Exception: whatever the task itself raised.
        """
        if not self.wait(timeout):
            raise GetTimeoutError(
                f"task {self.name!r} ({self.id}) not done after {timeout}s; it is "
                f"{self._state.value} ({self._status})."
            )
        if self._error is not None:
            raise self._error
        return self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception the task ended with, or None if it produced a value."""
        if not self.wait(timeout):
            raise GetTimeoutError(f"task {self.name!r} ({self.id}) not done after {timeout}s.")
        return self._error

    def cancel(self) -> bool:
        """Cancel the task if it has not started. True if it will never run (again).

        A task that already started is not interrupted: this returns False. A task waiting
        to be retried after its node was lost can be cancelled: no further attempt runs,
        and `attempts` tells that an earlier one did (execution is at-least-once).
        """
        if self.done():
            return self._state is TaskState.CANCELLED
        if self._canceller is None:
            return False
        return self._canceller(self)

    def add_done_callback(self, fn: Callable[[TaskRef], None]) -> None:
        """Call `fn(self)` once the task is done (at once if it already is).

        `fn` runs in the `contextvars` context of this call (as asyncio's futures do), so
        what it launches is steered as the code that added it (see `Backend.steered`),
        whichever thread settles the task.
        """
        with self._lock:
            if self._state not in _FINAL_STATES:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append((fn, contextvars.copy_context()))
                return
        fn(self)

    def __repr__(self) -> str:
        where = f" on {self._node_id}" if self._node_id else ""
        return f"<TaskRef {self.id} {self.name!r} {self._state.value}{where}>"

    # --- what backends call ------------------------------------------------------------
    # A backend drives a handle through these, as an executor drives a `Future`; users only
    # read and wait. Each settling call returns False (and changes nothing) if the task is
    # already final, so a backend never needs to know who won a race (a cancel, a node loss).

    @property
    def retries(self) -> int:
        """How many times the task was put back in line after a failed attempt."""
        return self._retries

    def set_status(self, status: Status) -> None:
        """Backends: record the latest scheduling outcome (while the task is not final)."""
        with self._lock:
            if self._state not in _FINAL_STATES:
                self._status = status

    def set_running(self, node_id: str) -> bool:
        """Backends: the task was placed on `node_id` and starts (one more attempt).

        Returns:
            False if the task is already final (e.g. cancelled): do not run it.
        """
        with self._lock:
            if self._state in _FINAL_STATES:
                return False
            self._node_id = node_id
            self._attempts += 1
            self._state = TaskState.RUNNING
            self._status = _scheduled_on(node_id)
            return True

    def may_retry(self, cause: RetryCause) -> bool:
        """Backends: whether the retry rule lets a failed attempt run again (`retry_allowed`)."""
        return retry_allowed(self.spec, self._retries, cause)

    def retry(self, cause: RetryCause, reason: str) -> bool:
        """Backends: put the task back in line after a failed attempt, if the rule allows it.

        The one retry rule of escher (`retry_allowed`) decides; on True the task is PENDING
        again with `reason` and the backend queues it anew; on False nothing changed and
        the backend settles it with `set_exception`.
        """
        with self._lock:
            if self._state in _FINAL_STATES or not retry_allowed(self.spec, self._retries, cause):
                return False
            self._retries += 1
            self._state = TaskState.PENDING
            self._node_id = None
            self._status = Status(StatusCode.PENDING, reason)
            return True

    def set_result(self, value: Any) -> bool:
        """Backends: the task finished with `value`. False if it was already final."""
        return self._settle(TaskState.FINISHED, value, None)

    def set_exception(self, error: BaseException) -> bool:
        """Backends: the task ended without a value. False if it was already final."""
        return self._settle(TaskState.FAILED, None, error)

    def set_cancelled(self) -> bool:
        """Backends: the task was cancelled before it ran. False if it was already final."""
        return self._settle(
            TaskState.CANCELLED,
            None,
            TaskCancelledError(f"task {self.name!r} was cancelled.", task_name=self.name),
        )

    def _settle(self, state: TaskState, value: Any, error: BaseException | None) -> bool:
        with self._lock:
            if self._state in _FINAL_STATES:
                return False
            self._state, self._value, self._error = state, value, error
            callbacks, self._callbacks = self._callbacks, None
            on_final, self._on_final = self._on_final, None
            finished = self._finished
        if finished is not None:
            finished.set()
        if on_final is not None:
            on_final(self)
        for callback, context in callbacks or ():
            context.run(callback, self)
        return True


class RetryCause(enum.Enum):
    """Why an attempt of a task failed, for the retry rule."""

    #: The task's own code raised.
    RAISED = "raised"
    #: Its node (or the worker, pod or container running it) was lost.
    NODE_LOST = "node_lost"


def retry_allowed(spec: TaskSpec, retries_so_far: int, cause: RetryCause) -> bool:
    """The retry rule every backend follows.

    A failed attempt runs again while fewer than `spec.max_retries` retries happened, for a
    lost node always, for an exception only with `spec.retry_exceptions`. Execution is
    at-least-once: an attempt retried after its node was lost may have run, partly or
    fully, before the loss was noticed.
    """
    if cause is RetryCause.RAISED and not spec.retry_exceptions:
        return False
    return retries_so_far < spec.max_retries


E = TypeVar("E", bound=TaskError)


def task_error(message: str, ref: TaskRef, kind: type[E]) -> E:
    """Build a `TaskError` subclass instance naming the task."""
    return kind(f"task {ref.name!r} ({ref.id}): {message}", task_name=ref.name)
