"""Composition: AND (`AllOf`, merged requests) and OR (`FirstOf`, ordered fallbacks).

`FirstOf` is also the soft-constraint ESL: launch with the first alternative; if the task has
not started within `timeout` (on the backend's clock), cancel it and resubmit it with the next
alternative (at once if no node could ever fit it). A task is resubmitted only when
`TaskRef.cancel()` returned True, i.e. when the backend promises the earlier attempt will
never run, so a task never runs twice.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from typing import Any

from escher.backends.base import Backend
from escher.core.errors import GetTimeoutError, UnschedulableError, ValidationError
from escher.core.resources import Resources, validate_quantity
from escher.core.task import Status, TaskRef, TaskSpec, TaskState
from escher.esl._base import Constraint, PlanParts, Policy, build_spec, split_options


class Requests(Policy):
    """A plain resource request as a policy (an alternative of a soft constraint)."""

    def __init__(self, resources: Mapping[str, float], backend: Backend | None = None) -> None:
        self.resources = Resources.of(resources)
        if backend is None:
            import escher

            backend = escher.current_backend()
        self.backend = backend

    @property
    def source(self) -> str:
        return f"Requests({self.resources.to_dict()})"

    def constraint(self) -> Constraint:
        return Constraint(self.resources, source=self.source)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return PlanParts(request=self.resources)


def _backend_of(items: tuple[Any, ...], backend: Backend | None) -> Backend:
    for item in items:
        if isinstance(item, Policy):
            found = item.backend
            if backend is not None and found is not backend:
                raise ValidationError(
                    "composed policies must use the same backend; create them on one backend."
                )
            backend = found
    if backend is None:
        import escher

        backend = escher.current_backend()
    return backend


class AllOf(Policy):
    """AND: every policy holds. A task's request is the sum of the policies' requests.

    Example: ``lb & colo.group("pair-1", size=2)`` places a pair on one node while the
    load balancer caps tasks per node. ``a & b`` builds the same thing.
    """

    policies: tuple[Policy, ...]

    def __init__(self, *policies: Policy) -> None:
        if not policies or not all(isinstance(p, Policy) for p in policies):
            raise ValidationError("AllOf takes one or more policies (ESLs, groups, ...).")
        flat: list[Policy] = []
        for policy in policies:
            flat.extend(policy.policies if isinstance(policy, AllOf) else [policy])
        self.policies = tuple(flat)
        self.backend = _backend_of(self.policies, None)

    @property
    def source(self) -> str:
        return " & ".join(p.source for p in self.policies)

    def constraint(self) -> Constraint:
        return functools.reduce(Constraint.__and__, (p.constraint() for p in self.policies))

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return functools.reduce(
            PlanParts.__and__, (p.plan_parts(count, resources) for p in self.policies)
        )

    def _recorder(self) -> Callable[[str, str, float], None] | None:
        recorders = [r for p in self.policies if (r := p._recorder()) is not None]
        if not recorders:
            return None

        def record(label: str, node: str, capacity: float) -> None:
            for recorder in recorders:
                recorder(label, node, capacity)

        return record

    def _launched(self, ref: TaskRef) -> None:
        for policy in self.policies:
            policy._launched(ref)


class FirstOf(Policy):
    """OR as ordered fallbacks (the paper's soft constraints).

    Args:
        *alternatives: Policies, or plain resource requests (mappings), in order of
            preference.
        timeout: Seconds (of the backend's clock) an attempt may wait before the task is
            cancelled and resubmitted with the next alternative. The last one waits forever.
        backend: Needed only when every alternative is a plain request (default: the
            current backend).

    Example: ``FirstOf(fair & spread, fair, timeout=2)`` tries fair share with anti-affinity
    and falls back to fair share alone. ``a | b`` builds the same with the default timeout.
    """

    default_timeout = 1.0
    alternatives: tuple[Policy, ...]
    timeout: float

    def __init__(
        self,
        *alternatives: Policy | Mapping[str, float],
        timeout: float | None = None,
        backend: Backend | None = None,
    ) -> None:
        if not alternatives:
            raise ValidationError("FirstOf needs at least one alternative.")
        for alt in alternatives:
            if not isinstance(alt, Policy | Mapping):
                raise ValidationError(
                    f"an alternative must be a policy or a resource mapping, got {alt!r}."
                )
        self.backend = _backend_of(alternatives, backend)
        flat: list[Policy] = []
        for alt in alternatives:
            policy = alt if isinstance(alt, Policy) else Requests(alt, self.backend)
            if isinstance(policy, FirstOf) and policy.timeout == (timeout or policy.timeout):
                flat.extend(policy.alternatives)
            else:
                flat.append(policy)
        self.alternatives = tuple(flat)
        self.timeout = validate_quantity(
            self.default_timeout if timeout is None else timeout, what="timeout"
        )
        #: Which alternative `declare` puts in a plan (the preferred one by default).
        self.declared = 0

    @property
    def source(self) -> str:
        return " | ".join(f"({p.source})" for p in self.alternatives)

    def constraint(self) -> Constraint:
        return self.alternatives[0].constraint()

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return self.alternatives[self.declared].plan_parts(count, resources)

    def launch(
        self,
        fn: Callable[..., Any],
        *args: Any,
        resources: Mapping[str, float] | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> TaskRef:
        """Launch with the first alternative, falling back after `timeout` (see class doc).

        Returns:
            A `SoftTaskRef`: a `TaskRef` that follows whichever attempt runs.
        """
        options = split_options(kwargs)

        def make(index: int) -> TaskSpec:
            alt = self.alternatives[index]
            return build_spec(
                fn, args, kwargs, alt.constraint(), resources, name, alt._recorder(), **options
            )

        return SoftTaskRef(self, make)


class SoftTaskRef(TaskRef):
    """The handle of a task launched with fallbacks: it follows the attempt that runs.

    Attributes:
        alternative: Index of the alternative of the current attempt.
        history: Every attempt's `TaskRef`, in order (all but the last were cancelled
            before they started).
    """

    def __init__(self, policy: FirstOf, make: Callable[[int], TaskSpec]) -> None:
        self._policy = policy
        self._make = make
        self._soft_lock = threading.RLock()
        self._replacing: TaskRef | None = None
        self._user_cancelled = False
        self._user_callbacks: list[Callable[[TaskRef], None]] = []
        self._clock = policy.backend.clock
        self.alternative = 0
        spec = make(0)
        super().__init__(spec)
        self.history: list[TaskRef] = []
        self._current: TaskRef = self  # replaced by _submit
        self._submit(spec)

    def _submit(self, spec: TaskSpec) -> None:
        self.spec = spec
        alt = self.alternatives_left
        ref = self._policy.backend.launch(spec)
        self.history.append(ref)
        self._current = ref
        self._policy.alternatives[self.alternative]._launched(ref)
        ref.add_done_callback(self._attempt_done)
        if alt > 0 and not ref.done():
            self._clock.call_later(self._policy.timeout, functools.partial(self._check, ref))

    @property
    def alternatives_left(self) -> int:
        """How many fallbacks remain after the current attempt."""
        return len(self._policy.alternatives) - 1 - self.alternative

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


#: The paper's soft constraints are ordered fallbacks.
SoftConstraints = FirstOf
