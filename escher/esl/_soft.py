"""`SoftTaskRef`: the handle of a task launched with ordered fallbacks (see `FirstOf`).

It launches the task with the first alternative; if the attempt has not started within the
timeout (on the backend's clock), it cancels it and launches the next alternative (at once if
no node could ever fit it). A task is resubmitted only when `TaskRef.cancel()` returned True,
i.e. when the backend promises the earlier attempt will never run, so a task never runs twice.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

from escher.core.clock import Clock
from escher.core.errors import GetTimeoutError, UnschedulableError
from escher.core.task import Status, TaskRef, TaskSpec, TaskState
from escher.esl._follow import fallback_of


class SoftTaskRef(TaskRef):
    """The handle of a task launched with fallbacks: it follows the attempt that runs.

    Attributes:
        alternative: Index of the alternative of the current attempt.
        history: Every attempt's `TaskRef`, in order (all but the last were cancelled
            before they started).
    """

    def __init__(
        self,
        make: Callable[[int], TaskSpec],
        submit: Callable[[int, TaskSpec], TaskRef],
        *,
        alternatives: int,
        timeout: float,
        clock: Clock,
    ) -> None:
        """Build attempt 0 with `make(0)` and launch it with `submit(0, spec)`.

        Args:
            make: The spec of the attempt with alternative i.
            submit: Launches the spec of alternative i and returns the attempt's handle.
            alternatives: How many alternatives there are.
            timeout: Seconds (of `clock`) an attempt may wait before the next one.
            clock: The backend's clock.
        """
        self._make = make
        self._launch_attempt = submit
        self._alternatives = alternatives
        self._timeout = timeout
        self._soft_lock = threading.RLock()
        self._replacing: TaskRef | None = None
        self._user_cancelled = False
        self._user_callbacks: list[Callable[[TaskRef], None]] = []
        self._clock = clock
        self.alternative = 0
        spec = make(0)
        super().__init__(spec)
        self.history: list[TaskRef] = []
        self._current: TaskRef = self  # replaced by _submit
        self._submit(spec)

    def _submit(self, spec: TaskSpec) -> None:
        alt = self.alternatives_left
        if self.history:  # a fallback: a guide names it as the task's first attempt
            with fallback_of(self.history[0]):
                ref = self._launch_attempt(self.alternative, spec)
        else:
            ref = self._launch_attempt(self.alternative, spec)
        self.spec = ref.spec
        self.history.append(ref)
        self._current = ref
        ref.add_done_callback(self._attempt_done)
        if alt > 0 and not ref.done():
            self._clock.call_later(self._timeout, functools.partial(self._check, ref))

    @property
    def alternatives_left(self) -> int:
        """How many fallbacks remain after the current attempt."""
        return self._alternatives - 1 - self.alternative

    def _check(self, ref: TaskRef) -> None:
        with self._soft_lock:
            if ref is not self._current or self._user_cancelled or ref.started() or ref.done():
                return
            self._replacing = ref
            try:
                cancelled = ref.cancel()
            finally:
                self._replacing = None
            if not cancelled:  # it started meanwhile: keep it, never run twice
                return
            self.alternative += 1
            self._submit(self._make(self.alternative))

    def _attempt_done(self, ref: TaskRef) -> None:
        if ref is self._replacing:
            return
        with self._soft_lock:
            if ref is not self._current:
                return
            infeasible = (
                not ref.started()
                and ref.state is TaskState.FAILED
                and isinstance(ref.exception(0), UnschedulableError)
            )
            if infeasible and self.alternatives_left > 0 and not self._user_cancelled:
                self.alternative += 1  # no node could ever fit it: try the next one now
                self._submit(self._make(self.alternative))
                return
            callbacks, self._user_callbacks = self._user_callbacks, []
        for callback in callbacks:
            callback(self)

    # --- TaskRef surface, delegated to the current attempt --------------------------------
    @property
    def current(self) -> TaskRef:
        """The attempt that is (or will be) the task."""
        return self._current

    @property
    def state(self) -> TaskState:
        return self._current.state

    @property
    def status(self) -> Status:
        return self._current.status

    @property
    def node_id(self) -> str | None:
        return self._current.node_id

    @property
    def attempts(self) -> int:
        return sum(r.attempts for r in self.history)

    def done(self) -> bool:
        with self._soft_lock:
            return self._current.done() and self._replacing is None

    def started(self) -> bool:
        return self._current.started()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else self._clock.now() + timeout
        while True:
            ref = self._current
            left = None if deadline is None else max(0.0, deadline - self._clock.now())
            ref.wait(left)
            with self._soft_lock:
                if ref is self._current and self._replacing is None:
                    return ref.done()
            if deadline is not None and self._clock.now() >= deadline:
                return self.done()

    def result(self, timeout: float | None = None) -> Any:
        if not self.wait(timeout):
            raise GetTimeoutError(
                f"task {self.name!r} ({self.id}) not done after {timeout}s; it is "
                f"{self.state.value} ({self.status})."
            )
        return self._current.result(0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.wait(timeout):
            raise GetTimeoutError(f"task {self.name!r} ({self.id}) not done after {timeout}s.")
        return self._current.exception(0)

    def cancel(self) -> bool:
        with self._soft_lock:
            self._user_cancelled = True
            return self._current.cancel()

    def add_done_callback(self, fn: Callable[[TaskRef], None]) -> None:
        with self._soft_lock:
            if not self.done():
                self._user_callbacks.append(fn)
                return
        fn(self)

    def __repr__(self) -> str:
        return f"<SoftTaskRef {self.id} {self.name!r} alt {self.alternative} -> {self._current!r}>"
