"""Gang scheduling: all members start together or none does.

Two paths:

* ``mode="ephemeral"`` (the paper's): one ghost task per member requests the member's
  resources; once placed it creates a per-member label on its node and holds the resources.
  When every ghost holds its part, the driver commits: it raises each member's label (the
  "go" signal), and each ghost, seeing it, runs its member's body itself, with the resources
  it already holds. So the members all start at once, and a committed gang needs no further
  placement and no further task slot: ghosts never wait for threads, workers or pods that
  their own members would need (on the in-memory backend, more ghosts than task threads can
  hold at once without deadlock). If the ghosts do not all land within `timeout` (on the
  backend's clock), the attempt is rolled back: unstarted ghosts are cancelled, started ones
  see the attempt's `alive` label gone, release what they hold and end with
  `GangAbortedError`; the gang retries after an exponential backoff with random jitter, so
  competing gangs neither deadlock (each holding part of what the others need) nor starve
  (some attempt eventually runs alone). Before every attempt the gang checks that the live
  nodes could hold it at all (`escher.core.fit.gang_fit`); one that no set of live nodes could
  ever hold fails with `UnschedulableError` naming why, instead of retrying without end.
  Ghosts block while they hold, so this path needs a real-time backend.
* ``mode="native"``: the backend's atomic gang placement (`Backend.launch_gang`, e.g. Ray
  placement groups), when it has `Capability.ATOMIC_GANG`.
"""

from __future__ import annotations

import contextlib
import functools
import random
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import Backend, Capability
from escher.core.cluster import ClusterState
from escher.core.context import current_backend, node_id
from escher.core.errors import (
    EscherError,
    GangAbortedError,
    GetTimeoutError,
    UnschedulableError,
    UnsupportedError,
    ValidationError,
)
from escher.core.fit import gang_fit, node_defined
from escher.core.plan import Gang as GangIntent
from escher.core.resources import Resources, validate_quantity
from escher.core.task import TaskRef, TaskSpec
from escher.esl._esl import ESL
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import attributed, planning_backend


@dataclass(frozen=True)
class Member:
    """One member of a gang: what to run and what it needs.

    Attributes:
        fn: The task body.
        args: Its positional arguments.
        kwargs: Its keyword arguments.
        resources: Its request.
        name: Task name (default: the function's name).
    """

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    name: str = ""

    def spec(self, resources: Resources | None = None) -> TaskSpec:
        """The member's `TaskSpec`, optionally with another request."""
        return TaskSpec(
            fn=self.fn,
            args=tuple(self.args),
            kwargs=dict(self.kwargs),
            resources=Resources.of(self.resources) if resources is None else resources,
            name=self.name or getattr(self.fn, "__name__", "member"),
        )


#: Longest pause between a ghost's checks of its hold (see `ghost`).
HOLD_POLL = 0.1
#: A member's label while its ghost holds (HELD), and once the driver committed (GO).
HELD, GO = 1, 2


def ghost(
    label: str,
    alive: str,
    poll: float,
    max_hold: float,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
) -> Any:
    """Ghost task body: reserve this task's resources, then run the member in them.

    Creates `label` (capacity HELD) on this node and holds while it waits. When the driver
    raises `label` to GO (every ghost of the attempt holds), deletes it and returns
    ``fn(*args, **kwargs)``: the member runs here, in the resources the ghost held. When the
    attempt's `alive` label or `label` is gone (rollback), or after `max_hold` seconds, it
    deletes `label` and raises `GangAbortedError`. Checks every `poll` seconds at first,
    then less often (up to `HOLD_POLL` seconds): each check reads the cluster state.

    Raises:
        GangAbortedError: the attempt was rolled back before the member started.
    """
    backend = current_backend()
    node = node_id()
    backend.set_resource(label, HELD, node)
    go = False
    try:
        go = _hold(backend, node, label, alive, poll, max_hold)
    finally:
        with contextlib.suppress(EscherError):  # the node may have left
            backend.set_resource(label, 0, node)
    if not go:
        raise GangAbortedError(
            f"the gang's reservation on {node} was rolled back before this member started"
        )
    return fn(*args, **kwargs)


def _hold(backend: Backend, node: str, label: str, alive: str, poll: float, limit: float) -> bool:
    """Wait on `node` until the driver says GO (True) or rolls back (False)."""
    clock = backend.clock
    deadline = clock.now() + limit
    wait = poll
    while clock.now() < deadline:
        here = backend.get_cluster_state().nodes.get(node)
        if here is None:
            return False
        mine = here.total.get(label, 0.0)
        if mine >= GO:
            return True
        if not mine or alive not in here.total:
            return False
        clock.sleep(wait)
        wait = min(wait * 1.5, max(poll, HOLD_POLL))
    return False


class GangRun:
    """One gang's progress. `refs` holds the members' handles once the gang committed.

    Attributes:
        refs: The members' `TaskRef`s (empty until the gang commits). On the ephemeral
            path they are the committed attempt's ghosts, which run the members' bodies.
        attempts: Reservation attempts so far.
        state: "reserving", "running" (members committed), "failed" or "closed".
        error: Why it failed, if it did.
        reason: What it waits for now, in words (e.g. "attempt 3: 2 of 4 members hold
            their resources").
    """

    def __init__(self, gang: Gang, members: Sequence[Member]) -> None:
        self.gang = gang
        self.members = tuple(members)
        self.refs: list[TaskRef] = []
        self.attempts = 0
        self.state = "reserving"
        self.error: str | None = None
        self.reason = "not started"
        self._exception: EscherError | None = None
        self._cond = threading.Condition()

    def _set(
        self,
        state: str,
        refs: list[TaskRef] | None = None,
        error: str = "",
        exception: EscherError | None = None,
    ) -> None:
        with self._cond:
            self.state = state
            if refs is not None:
                self.refs = refs
            if error:
                self.error = self.reason = error
            if exception is not None:
                self._exception = exception
            self._cond.notify_all()

    def wait_started(self, timeout: float) -> bool:
        """Block until the members were committed (True) or the gang failed/timed out."""
        with self._cond:
            self._cond.wait_for(lambda: self.state != "reserving", timeout)
            return self.state == "running"

    def results(self, timeout: float) -> list[Any]:
        """The members' return values, in order.

        Raises:
            GetTimeoutError: the gang did not start or finish in time.
            UnschedulableError: no set of live nodes could ever hold the gang.
            EscherError: the gang failed otherwise (its `error` says why).
        """
        clock = self.gang.backend.clock
        deadline = clock.now() + timeout
        if not self.wait_started(timeout):
            if self.state == "reserving":
                raise GetTimeoutError(
                    f"gang not started after {timeout}s ({self.attempts} tries; {self.reason})."
                )
            if self._exception is not None:
                raise self._exception
            raise EscherError(f"gang {self.state}: {self.error}")
        return [ref.result(max(0.0, deadline - clock.now())) for ref in self.refs]


class Gang(ESL):
    """All-or-nothing placement of groups of tasks.

    Args:
        backend: The backend (default: the current one).
        mode: "ephemeral" (ghost reservations, see module doc), "native" (the backend's
            atomic gangs) or "auto" (native when the backend has it).
        timeout: Seconds an attempt may take to reserve every member before rollback.
        backoff: First retry delay in seconds; doubles per failed attempt, with jitter
            (x0.5 to x1.5), up to `max_backoff`.
        max_backoff: Cap of the retry delay.
        max_attempts: Give up after this many attempts (None: keep trying while the live
            nodes could hold the gang; one they never could fails at once either way).
        poll: Seconds between checks of the reservation (and of the ghosts' hold).
        max_hold: Longest a ghost holds resources (a safety bound on every wait).
        seed: Seed of the jitter (for reproducible tests).
        name: Used in labels and explanations.
    """

    kind = "gang"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        mode: str = "auto",
        timeout: float = 2.0,
        backoff: float = 0.05,
        max_backoff: float = 2.0,
        max_attempts: int | None = None,
        poll: float = 0.01,
        max_hold: float = 3600.0,
        seed: int | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(backend, name=name)
        if mode not in ("auto", "ephemeral", "native"):
            raise ValidationError(f"mode must be 'auto', 'ephemeral' or 'native', got {mode!r}.")
        native_ok = self.backend.supports(Capability.ATOMIC_GANG)
        if planning_backend(self.backend) is not None:
            mode = "native"  # a planning run records the gang; how it is reserved is moot
        if mode == "auto":
            mode = "native" if native_ok else "ephemeral"
        if mode == "native" and not native_ok:
            raise UnsupportedError(
                f"the {self.backend.name} backend has no atomic gangs; use mode='ephemeral'."
            )
        if mode == "ephemeral" and self.backend.clock.virtual:
            raise UnsupportedError(
                "ghost reservations hold resources by blocking, which a virtual clock cannot "
                "do; use mode='native' (or a real-time backend)."
            )
        self.mode = mode
        self.timeout = validate_quantity(timeout, what="timeout")
        self.backoff = validate_quantity(backoff, what="backoff")
        self.max_backoff = validate_quantity(max_backoff, what="max_backoff")
        if max_attempts is not None and (
            isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
        ):
            raise ValidationError(
                f"max_attempts must be None or an int >= 1, got {max_attempts!r}."
            )
        self.max_attempts = max_attempts
        self.poll = validate_quantity(poll, what="poll")
        self.max_hold = validate_quantity(max_hold, what="max_hold")
        self._random = random.Random(seed)
        self._serial = 0
        self.runs: list[GangRun] = []

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> TaskRef:
        """Not for gangs: use `run` with the list of members."""
        raise ValidationError("a gang launches its members together: use Gang.run([...]).")

    def run(self, members: Sequence[Member]) -> GangRun:
        """Start reserving for `members`; they all start together, or none does.

        Returns:
            A `GangRun`; ``run.results(timeout)`` waits for the members' values.
        """
        self._check_open()
        if not isinstance(members, Sequence) or isinstance(members, str):
            raise ValidationError("a gang needs a list of one or more escher.esl.Member entries.")
        members = list(members)
        if not members or not all(isinstance(m, Member) for m in members):
            raise ValidationError("a gang needs one or more escher.esl.Member entries.")
        run = GangRun(self, members)
        self.runs.append(run)
        if self.mode == "native":
            run.attempts = 1
            with attributed(self.backend, self.source):
                refs = self.backend.launch_gang([m.spec() for m in members])
            run._set("running", refs)
            return run
        self._attempt(run)
        return run

    # --- the ghost-reservation protocol --------------------------------------------------
    def _attempt(self, run: GangRun) -> None:
        if self._closed:
            run._set("closed", error="the Gang ESL was closed")
            return
        state = self.backend.get_cluster_state()
        infeasible = _never_fits(run.members, state)
        if infeasible is not None:
            run._set(
                "failed",
                error=infeasible,
                exception=UnschedulableError(f"gang {self.name!r}: {infeasible}."),
            )
            return
        run.attempts += 1
        with self._lock:
            self._serial += 1
            tag = f"{self._serial}"
        alive = self.label(f"{tag}-alive")
        labels = [
            self.own(
                self.label(f"{tag}-m{i}"),
                restorable=False,
                why_not="a gang reservation is not moved",
            )
            for i in range(len(run.members))
        ]
        alive_nodes = sorted(n for n, node in state.nodes.items() if node.alive)
        self.set_resources({alive: 1}, alive_nodes, restorable=False)
        ghosts = [
            self.backend.launch(
                TaskSpec(
                    fn=ghost,
                    args=(
                        label,
                        alive,
                        self.poll,
                        self.max_hold,
                        member.fn,
                        tuple(member.args),
                        dict(member.kwargs),
                    ),
                    resources=Resources.of(member.resources),
                    name=member.name or getattr(member.fn, "__name__", "member"),
                )
            )
            for member, label in zip(run.members, labels, strict=True)
        ]
        run.reason = f"attempt {run.attempts}: reserving {len(ghosts)} members"
        deadline = self.backend.clock.now() + self.timeout
        attempt = _Attempt(run, alive, labels, ghosts, deadline)
        waiter = self._waiter()
        self.call_later(0.0 if waiter else self.poll, lambda: self._check(attempt))

    def _waiter(self) -> Callable[[Sequence[str], float], bool] | None:
        """The backend's cheap wait for freshly created labels, if it has one (Ray)."""
        if not getattr(self.backend, "waits_for_labels", False):
            return None
        waiter = getattr(self.backend, "wait_for_labels", None)
        return waiter if callable(waiter) else None

    def _check(self, attempt: _Attempt) -> None:
        if self._closed:
            attempt.run._set("closed", error="the Gang ESL was closed")
            return
        waiter = self._waiter()
        if waiter is not None and waiter(  # returns as soon as the ghosts created their labels
            attempt.labels,
            min(self.poll, max(0.0, attempt.deadline - self.backend.clock.now())),
        ):
            self._commit(attempt)  # every ghost holds its part: no need to read the state
            return
        state = self.backend.get_cluster_state()
        held = [bool(state.holding(label)) for label in attempt.labels]
        if all(held):
            self._commit(attempt, state)
            return
        failed = [g for g in attempt.ghosts if g.done() and g.exception(0) is not None]
        run = attempt.run
        run.reason = (
            f"attempt {run.attempts}: {sum(held)} of {len(held)} members hold their "
            "resources; the others wait for room"
            + (f" ({attempt.waiting_reason()})" if attempt.waiting_reason() else "")
        )
        if self.backend.clock.now() >= attempt.deadline or failed:
            self._rollback(attempt)
        else:
            delay = 0.0 if waiter is not None else self.poll  # the waiter waited `poll`
            self.call_later(delay, lambda: self._check(attempt))

    def _commit(self, attempt: _Attempt, state: ClusterState | None = None) -> None:
        """Every ghost holds: tell each to run its member (its label goes to GO)."""
        attempt.run.reason = f"attempt {attempt.run.attempts}: committed; members run"
        attempt.run._set("running", list(attempt.ghosts))
        for label, ref in zip(attempt.labels, attempt.ghosts, strict=True):
            ref.add_done_callback(functools.partial(self._member_done, label, attempt))
        self._signal(attempt, list(zip(attempt.labels, attempt.ghosts, strict=True)), state)

    def _signal(
        self,
        attempt: _Attempt,
        pending: list[tuple[str, TaskRef]],
        state: ClusterState | None,
    ) -> None:
        """Raise each pending member's label to GO where its ghost holds it."""
        left = []
        for label, ref in pending:
            if ref.done():
                continue  # it ended (e.g. its node left): nothing to tell it
            nodes = [ref.node_id] if ref.node_id else []
            if not nodes:
                state = state or self.backend.get_cluster_state()
                nodes = sorted(state.holding(label))
            written: tuple[str, ...] = ()
            for node in nodes:
                with contextlib.suppress(EscherError):  # the node may have left
                    written += self.backend.set_resource(label, GO, node)
            if not written:
                left.append((label, ref))  # not visible yet: try again shortly
        if left:
            self.call_later(self.poll, lambda: self._signal(attempt, left, None))

    def _member_done(self, label: str, attempt: _Attempt, _ref: TaskRef) -> None:
        with self._lock:
            attempt.finished += 1
            last = attempt.finished == len(attempt.labels)
        self.forget(label)  # the ghost deleted it; this drops it from the ledger
        if last:
            self.forget(attempt.alive)

    def _rollback(self, attempt: _Attempt) -> None:
        for ref in attempt.ghosts:
            ref.cancel()  # True: it never runs; False: it runs and sees `alive` gone
        self.forget(attempt.alive)
        for label in attempt.labels:
            self.forget(label)
        run = attempt.run
        if self.max_attempts is not None and run.attempts >= self.max_attempts:
            run._set("failed", error=f"not all members placed in {run.attempts} attempts")
            return
        delay = min(self.max_backoff, self.backoff * 2 ** (run.attempts - 1))
        delay *= self._random.uniform(0.5, 1.5)
        run.reason += f"; rolled back, retrying in {delay:.2f}s"
        self.call_later(delay, lambda: self._attempt(run))

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        source = self.source
        return PlanParts(intents=[lambda names: GangIntent(names, source=source)])


@dataclass
class _Attempt:
    run: GangRun
    alive: str
    labels: list[str]
    ghosts: list[TaskRef]
    deadline: float
    finished: int = 0

    def waiting_reason(self) -> str:
        """The scheduler's word on the first ghost still waiting, if it has one."""
        for ref in self.ghosts:
            if not ref.started() and ref.status.reason:
                return ref.status.reason
        return ""


def _never_fits(members: Sequence[Member], state: ClusterState) -> str | None:
    """Why no set of live nodes of `state` could ever hold `members` at once, or None."""
    alive = {nid: node for nid, node in state.nodes.items() if node.alive}
    defined = {name for node in alive.values() for name in node.physical}
    requests = [node_defined(Resources.of(m.resources), defined) for m in members]
    fit = gang_fit(requests, {nid: node.physical for nid, node in alive.items()})
    return fit.reason if fit.possible is False else None
