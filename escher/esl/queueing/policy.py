"""`QueueingPolicy`: FIFO, DRF and naive fair sharing (threads, memory) as an ESL.

Every user of a `QueueingPolicy` gets one admission resource per managed physical resource
(``CPU`` and ``memory`` by default) on every node. A user's task requests, on top of its own
request, the same amounts of the user's admission resources, so it starts only where the
user's *quota* on that node has room. The policy sets the quotas: on every submission and
completion it runs progressive filling over the users' outstanding tasks (running ones first,
at the node where they run; then queued ones in submission order), in the order its
`Ordering` defines, and sets each quota to what the filling planned for that user on that
node. The backend's own matcher then starts the tasks; no task is held back by the
application, cancelled or resubmitted, so switching the ordering at run time (see
`escher.esl.queueing.adaptive`) never loses or duplicates a queued task.

Quotas are targets, not counts of running tasks: when a new user arrives, the quotas of the
users that hold the cluster drop below what they use, their running tasks finish, and only
the newcomer's tasks take the freed room. Nothing is preempted.

The orderings are in `escher.esl.queueing.orderings`.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl._constraint import Constraint, build_spec, split_options
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._esl import ESL, node_ids
from escher.esl._planning import mark_queued
from escher.esl.queueing.orderings import Ordering, ordering_of
from escher.esl.queueing.planner import QueuedTask, plan_quotas
from escher.esl.queueing.vectors import Vector


class _Started:
    """Task body wrapper: tells the policy when the task starts (picklable state)."""

    def __init__(self, fn: Callable[..., Any], hook: Callable[[], None] | None) -> None:
        self.fn = fn
        self.hook = hook
        self.__name__ = getattr(fn, "__name__", "task")

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "hook": None}

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.hook is not None:
            self.hook()
        return self.fn(*args, **kwargs)


class QueueingPolicy(ESL):
    """Gate which queued tasks may start, per user, with admission resources.

    Args:
        ordering: ``"fifo"``, ``"drf"``, ``"fair-threads"``, ``"fair-memory"`` or an
            `Ordering`.
        backend: The backend (default: the current one).
        nodes: Node ids or a selector (default: every alive node).
        managed: The physical resources the quotas cover (default CPU and memory; a
            resource no node has is ignored).
        name: Used in labels and explanations.

    Example::

        with QueueingPolicy("drf") as drf:
            ref = drf.submit(work, user="ann", resources={"CPU": 1, "memory": 2})
    """

    kind = "queue"

    def __init__(
        self,
        ordering: str | Ordering = "fifo",
        backend: Backend | None = None,
        *,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        managed: Sequence[str] = ("CPU", "memory"),
        name: str | None = None,
    ) -> None:
        chosen = ordering_of(ordering)
        super().__init__(backend, name=name)
        self._ordering = chosen
        self.nodes = tuple(node_ids(self.backend, nodes))
        state = self.backend.get_cluster_state()
        self.capacity: dict[str, Vector] = {
            n: {r: state.node(n).total.get(r, 0.0) for r in managed} for n in self.nodes
        }
        self.managed = tuple(r for r in managed if any(c[r] > 0 for c in self.capacity.values()))
        self._seq = itertools.count()
        self._users: dict[str, dict[str, str]] = {}  # user -> resource -> label
        self._queued: dict[str, dict[str, QueuedTask]] = {}  # user -> ref id -> task
        self._running: dict[str, dict[str, QueuedTask]] = {}
        self._quotas: dict[str, dict[str, Vector]] = {}
        #: Per (user, shape): (count, total seconds) of finished tasks.
        self.runtimes: dict[tuple[str, tuple[tuple[str, float], ...]], tuple[int, float]] = {}
        #: Per job: (count, total seconds, total of squared seconds) of finished tasks.
        self.job_runtimes: dict[str, tuple[int, float, float]] = {}
        self.switches: list[tuple[float, str]] = [(self.backend.clock.now(), chosen.name)]
        self._smallest: dict[str, float] = {}
        self.submitted = 0
        self.finished = 0

    # --- ordering ----------------------------------------------------------------------------
    @property
    def ordering(self) -> Ordering:
        """The active ordering."""
        return self._ordering

    def set_ordering(self, ordering: str | Ordering) -> None:
        """Switch the ordering now; quotas are recomputed at once.

        Queued tasks stay in the backend's queue with the same request: nothing is
        cancelled or resubmitted, so no task is lost or runs twice.
        """
        self._check_open()
        chosen = ordering_of(ordering)
        with self._lock:
            if chosen == self._ordering:
                return
            self._ordering = chosen
            self.switches.append((self.backend.clock.now(), chosen.name))
        self._cycle()

    # --- users and tasks ------------------------------------------------------------------------
    def user_labels(self, user: str) -> dict[str, str]:
        """Resource -> admission label of `user` (created on first use)."""
        if not isinstance(user, str) or not user:
            raise ValidationError(f"user must be a non-empty string, got {user!r}.")
        with self._lock:
            labels = self._users.get(user)
            if labels is None:
                labels = {r: self.own(self.label(f"u-{user}-{r}")) for r in self.managed}
                self._users[user] = labels
                self._queued[user] = {}
                self._running[user] = {}
            return labels

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
        """Queue `fn(*args, **kwargs)` for `user`; it starts when the user's quota allows.

        Args:
            fn: The task body.
            *args: Its positional arguments.
            user: Who submits it (quotas are per user).
            resources: Its own request, e.g. ``{"CPU": 1, "memory": 2}``.
            job: The job it belongs to (default: its name).
            name: Task name.
            **kwargs: Keyword arguments of `fn`, plus ``duration``, ``max_retries`` and
                ``retry_exceptions``.

        Returns:
            The task's `TaskRef`.

        Raises:
            ValidationError: a bad user or request, or the policy is closed.
        """
        self._check_open()
        labels = self.user_labels(user)
        request = Resources.of(resources)
        managed = {r: request.get(r) for r in self.managed if request.get(r) > 0}
        admission = Resources.of({labels[r]: q for r, q in managed.items()})
        options = split_options(kwargs)
        key = job or name or ""
        if not managed:  # needs no quota: runs wherever it fits
            ref = self.backend.launch(
                build_spec(fn, args, kwargs, Constraint(), request, name, **options)
            )
            self.after_submit(user, key, managed)
            return ref
        task = QueuedTask(user, next(self._seq), managed, key)
        body = _Started(fn, lambda: self._on_start(task))
        spec: TaskSpec = build_spec(
            body,
            args,
            kwargs,
            Constraint(admission, source=f"{self.source}.user({user!r})"),
            request,
            name or getattr(fn, "__name__", "task"),
            **options,
        )
        with self._lock:
            ref = self.backend.launch(spec)
            mark_queued(self.backend, ref, f"{self.source}.user({user!r})", request)
            task.ref = ref
            for r, q in managed.items():
                self._smallest[r] = min(q, self._smallest.get(r, q))
            if not ref.done() and not ref.started():
                self._queued[user][ref.id] = task
            self.submitted += 1
        ref.add_done_callback(lambda r: self._on_done(task, r))
        self._request_cycle()
        self.after_submit(user, key, managed)
        return ref

    def after_submit(self, user: str, job: str, managed: Mapping[str, float]) -> None:
        """Hook run after each `submit`: `job` is the job key, `managed` the quota request
        (no-op here; `AdaptivePolicy` watches arrivals with it)."""

    def _on_start(self, task: QueuedTask) -> None:
        ref = task.ref
        with self._lock:
            if ref is None:
                return
            self._queued[task.user].pop(ref.id, None)
            task.node = ref.node_id
            task.started_at = self.backend.clock.now()
            self._running[task.user][ref.id] = task

    def _on_done(self, task: QueuedTask, ref: TaskRef) -> None:
        with self._lock:
            self._queued[task.user].pop(ref.id, None)
            ran = self._running[task.user].pop(ref.id, None) is not None
            if ran and task.started_at is not None:
                key = (task.user, task.shape)
                count, total = self.runtimes.get(key, (0, 0.0))
                elapsed = self.backend.clock.now() - task.started_at
                self.runtimes[key] = (count + 1, total + elapsed)
                count, total, squares = self.job_runtimes.get(task.job, (0, 0.0, 0.0))
                self.job_runtimes[task.job] = (count + 1, total + elapsed, squares + elapsed**2)
            self.finished += 1
        if not self._closed:
            self._request_cycle()

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """The user quota `ref` waits for, in the user's terms (see `ESL.contribution`).

        Quotas are re-planned on every submission and completion, so a task held by one
        waits for the policy: its labels are marked `later`, and `waiting` says where the
        task stands in its user's queue and what the user's quota is now.
        """
        request = ref.spec.resources
        with self._lock:
            found = next(
                (
                    (user, {r: label for r, label in labels.items() if label in request})
                    for user, labels in self._users.items()
                    if any(label in request for label in labels.values())
                ),
                None,
            )
            if found is None:
                return None
            user, owned = found
            queued = list(self._queued[user])
            quota: Vector = {}
            for per_node in self._quotas.get(user, {}).values():
                for r, q in per_node.items():
                    quota[r] = quota.get(r, 0.0) + q
        source = f"{self.source}.user({user!r})"
        notes = {
            label: LabelNote(source, f"user {user!r}'s quota of {r}", later=True, kind="quota")
            for r, label in owned.items()
        }
        place = f"{queued.index(ref.id) + 1} of {len(queued)}" if ref.id in queued else "not"
        shown = ", ".join(f"{r}={q:g}" for r, q in sorted(quota.items())) or "none"
        waiting = (
            f"user {user!r}: {place} queued under {self._ordering.name}; its quota now: {shown}"
        )
        return Contribution(self.source, notes, waiting, "quota")

    # --- the cycle ---------------------------------------------------------------------
    def outstanding(self, limit: int | None = None) -> dict[str, list[QueuedTask]]:
        """User -> outstanding tasks: running first, then at most `limit` queued by age.

        The entries are the policy's own records; treat them as read-only.
        """
        with self._lock:
            result = {}
            for user in self._users:
                running = list(self._running[user].values())
                queued = []
                for task in itertools.islice(self._queued[user].values(), limit):
                    ref = task.ref
                    if ref is not None and ref.started():  # placed, body not run yet
                        running.append(
                            QueuedTask(task.user, task.seq, task.request, task.job, ref.node_id)
                        )
                    else:
                        queued.append(task)
                running.sort(key=lambda t: t.seq)
                result[user] = [*running, *queued]
            return result

    def _limit(self) -> int:
        """At most this many tasks of one user can be planned at once."""
        bound = 1.0
        for r, smallest in self._smallest.items():
            total = sum(c.get(r, 0.0) for c in self.capacity.values())
            bound += total / smallest
        return int(bound) + 1

    def queued_count(self, user: str | None = None) -> int:
        """Tasks waiting (of `user`, or of everyone)."""
        with self._lock:
            users = [user] if user is not None else list(self._queued)
            return sum(len(self._queued.get(u, {})) for u in users)

    def running_count(self, user: str | None = None) -> int:
        """Tasks running (of `user`, or of everyone)."""
        with self._lock:
            users = [user] if user is not None else list(self._running)
            return sum(len(self._running.get(u, {})) for u in users)

    def quotas(self) -> dict[str, dict[str, Vector]]:
        """User -> node -> resource -> quota now (a copy)."""
        with self._lock:
            return {u: {n: dict(v) for n, v in q.items()} for u, q in self._quotas.items()}

    def _cycle(self) -> None:
        with self._lock:
            self._cycle_requested = False
            if self._closed:
                return
            plan = plan_quotas(self._ordering, self.capacity, self.outstanding(self._limit()))
            changes: list[tuple[bool, str, float, str]] = []
            for user, labels in self._users.items():
                new, old = plan.get(user, {}), self._quotas.get(user, {})
                for node in self.nodes:
                    for r, label in labels.items():
                        want = round(new.get(node, {}).get(r, 0.0), 9)
                        have = round(old.get(node, {}).get(r, 0.0), 9)
                        if want != have:
                            changes.append((want > have, label, want, node))
            self._quotas = plan
            # Lower quotas before raising others, so no user briefly gets both.
            changes.sort(key=lambda c: c[0])
            for _, label, capacity, node in changes:
                self.set_resource(label, capacity, node)
