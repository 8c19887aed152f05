"""Cluster queueing policies as ESLs: FIFO, DRF and naive fair sharing by threads or memory.

Every user of a `QueueingPolicy` gets one admission resource per managed physical resource
(``CPU`` and ``memory`` by default) on every node. A user's task requests, on top of its own
request, the same amounts of the user's admission resources, so it starts only where the
user's *quota* on that node has room. The policy sets the quotas: on every submission and
completion it runs progressive filling over the users' outstanding tasks (running ones first,
at the node where they run; then queued ones in submission order), in the order its
`Ordering` defines, and sets each quota to what the filling planned for that user on that
node. The backend's own matcher then starts the tasks; no task is held back by the
application, cancelled or resubmitted, so switching the ordering at run time (see
`escher.esl.adaptive`) never loses or duplicates a queued task.

Quotas are targets, not counts of running tasks: when a new user arrives, the quotas of the
users that hold the cluster drop below what they use, their running tasks finish, and only
the newcomer's tasks take the freed room. Nothing is preempted.

Orderings (the key the filling minimises at each step; ties go to the oldest task):

* ``fifo``: the oldest outstanding task first, strictly (a task that does not fit stops the
  filling: head-of-line blocking, as in a FIFO scheduler).
* ``drf``: Dominant Resource Fairness, the user with the smallest dominant share first.
* ``fair-threads``: naive fair sharing of cores, the user holding the fewest CPUs first.
* ``fair-memory``: naive fair sharing of memory, the user holding the least memory first.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.resources import Resources
from escher.core.task import TaskRef, TaskSpec
from escher.esl._base import ESL, Constraint, build_spec, node_ids, split_options
from escher.esl._explain import Contribution, LabelNote

__all__ = [
    "DRF",
    "FIFO",
    "ORDERINGS",
    "FairMemory",
    "FairThreads",
    "Ordering",
    "QueuedTask",
    "QueueingPolicy",
    "dominant_share",
    "drf_allocation",
    "plan_quotas",
]

_EPS = 1e-9
Vector = dict[str, float]
Key = tuple[Any, ...]


# --- orderings -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ordering:
    """Which user's next task the progressive filling serves first.

    Attributes:
        name: Registry name (``fifo``, ``drf``, ``fair-threads``, ``fair-memory``).
        strict: Stop the filling at the first task that fits nowhere (FIFO); otherwise that
            user is skipped and the others go on.
    """

    name: str
    strict: bool = False

    def key(self, alloc: Mapping[str, float], totals: Mapping[str, float], seq: int) -> Key:
        """Sort key of a user holding `alloc` whose next task has sequence number `seq`."""
        return (seq,)


@dataclass(frozen=True)
class _DRF(Ordering):
    def key(self, alloc: Mapping[str, float], totals: Mapping[str, float], seq: int) -> Key:
        return (round(dominant_share(alloc, totals), 9), seq)


@dataclass(frozen=True)
class _Single(Ordering):
    resource: str = "CPU"

    def key(self, alloc: Mapping[str, float], totals: Mapping[str, float], seq: int) -> Key:
        return (round(alloc.get(self.resource, 0.0), 9), seq)


FIFO = Ordering("fifo", strict=True)
DRF = _DRF("drf")
FairThreads = _Single("fair-threads", resource="CPU")
FairMemory = _Single("fair-memory", resource="memory")

#: Name -> ordering.
ORDERINGS: dict[str, Ordering] = {o.name: o for o in (FIFO, DRF, FairThreads, FairMemory)}


def _ordering(value: str | Ordering) -> Ordering:
    if isinstance(value, Ordering):
        return value
    if isinstance(value, str) and value in ORDERINGS:
        return ORDERINGS[value]
    raise ValidationError(f"unknown ordering {value!r}; use one of {sorted(ORDERINGS)}.")


def dominant_share(alloc: Mapping[str, float], totals: Mapping[str, float]) -> float:
    """The largest fraction of any resource's total that `alloc` holds (0 for nothing)."""
    return max((q / totals[r] for r, q in alloc.items() if totals.get(r, 0) > 0), default=0.0)


def drf_allocation(
    capacity: Mapping[str, float],
    demands: Mapping[str, Mapping[str, float]],
    *,
    max_tasks: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """Tasks per user under DRF progressive filling of a pooled `capacity`.

    The classic example (Ghodsi et al., NSDI'11): 9 CPUs and 18 GB; A's tasks need
    <1 CPU, 4 GB>, B's <3 CPU, 1 GB>: A gets 3 tasks, B gets 2, both dominant shares 2/3.

    Args:
        capacity: The pooled resources.
        demands: User -> per-task request (every user's tasks are alike).
        max_tasks: User -> how many tasks it has (default: unbounded).

    Returns:
        User -> number of tasks.

    Raises:
        ValidationError: a user's task requests nothing (it would take forever).
    """
    for user, demand in demands.items():
        if not any(q > 0 for q in demand.values()):
            raise ValidationError(f"user {user!r}'s tasks request nothing; DRF needs a demand.")
    free = dict(capacity)
    count = dict.fromkeys(demands, 0)
    alloc: dict[str, Vector] = {u: {} for u in demands}
    active = [u for u in demands if (max_tasks or {}).get(u, 1) > 0]
    while active:
        user = min(active, key=lambda u: (dominant_share(alloc[u], capacity), u))
        demand = demands[user]
        if all(free.get(r, 0.0) + _EPS >= q for r, q in demand.items()):
            for r, q in demand.items():
                free[r] = free.get(r, 0.0) - q
                alloc[user][r] = alloc[user].get(r, 0.0) + q
            count[user] += 1
            if max_tasks is not None and count[user] >= max_tasks.get(user, 0):
                active.remove(user)
        else:
            active.remove(user)
    return count


# --- the planner (pure) ------------------------------------------------------------------------
@dataclass
class QueuedTask:
    """One outstanding task, as the planner sees it.

    Attributes:
        user: Who submitted it.
        seq: Submission order (smaller is older).
        request: Its request for the managed resources.
        job: The job it belongs to (for statistics and the adaptive policy).
        node: The node it runs on, or None while it is queued.
        started_at: Clock time it started (None while queued).
        ref: Its handle (None in simulations).
    """

    user: str
    seq: int
    request: Vector
    job: str = ""
    node: str | None = None
    started_at: float | None = None
    ref: TaskRef | None = field(default=None, repr=False)

    @property
    def shape(self) -> tuple[tuple[str, float], ...]:
        """A hashable form of the request (the task's class)."""
        return tuple(sorted(self.request.items()))


def _fits(free: Mapping[str, float], request: Mapping[str, float]) -> bool:
    return all(free.get(r, 0.0) + _EPS >= q for r, q in request.items())


def _take(free: dict[str, float], request: Mapping[str, float]) -> None:
    for r, q in request.items():
        free[r] = free.get(r, 0.0) - q


def plan_quotas(
    ordering: Ordering,
    capacity: Mapping[str, Mapping[str, float]],
    tasks: Mapping[str, Sequence[QueuedTask]],
) -> dict[str, dict[str, Vector]]:
    """Per-user, per-node quotas by progressive filling in `ordering`'s order.

    First the filling decides, on the pooled capacity of all nodes, which tasks get room
    (running ones count first: each user's list starts with them). Then each chosen task
    gets a node: a running one where it runs, a queued one where it fits, preferring nodes
    with room now and then the tightest fit. Quotas are the sums per user and node.

    Args:
        ordering: Whose task goes next.
        capacity: Node -> managed resource -> capacity.
        tasks: User -> outstanding tasks, running ones first, then queued by age.

    Returns:
        User -> node -> resource -> quota (only nodes with a positive quota appear).
    """
    totals: Vector = {}
    for caps in capacity.values():
        for r, q in caps.items():
            totals[r] = totals.get(r, 0.0) + q
    # 1. Progressive filling of the pooled capacity: how many of whose tasks, in which order.
    pooled = dict(totals)
    alloc: dict[str, Vector] = {u: {} for u in tasks}
    position = dict.fromkeys(tasks, 0)
    active = {u for u, ts in tasks.items() if ts}
    chosen: list[QueuedTask] = []
    while active:
        user = min(
            active, key=lambda u: (*ordering.key(alloc[u], totals, tasks[u][position[u]].seq), u)
        )
        task = tasks[user][position[user]]
        if not _fits(pooled, task.request):
            if ordering.strict and task.node is None:
                break
            active.discard(user)
            continue
        _take(pooled, task.request)
        _take(alloc[user], {r: -q for r, q in task.request.items()})
        chosen.append(task)
        position[user] += 1
        if position[user] >= len(tasks[user]):
            active.discard(user)
    # 2. Nodes: running tasks where they run, then queued ones where they fit (free now
    #    first, then the tightest fit); a queued task that fits no node gets no quota.
    plan_free = {n: dict(c) for n, c in capacity.items()}
    now_free = {n: dict(c) for n, c in capacity.items()}
    for user_tasks in tasks.values():
        for t in user_tasks:
            if t.node is not None and t.node in now_free:
                _take(now_free[t.node], t.request)
    order = sorted(capacity)
    quotas: dict[str, dict[str, Vector]] = {u: {} for u in tasks}
    for task in sorted(chosen, key=lambda t: t.node is None):
        node = _choose(task, plan_free, now_free, order)
        if node is None:
            continue
        _take(plan_free[node], task.request)
        if task.node is None:
            _take(now_free[node], task.request)
        quota = quotas[task.user].setdefault(node, {})
        for r, q in task.request.items():
            quota[r] = quota.get(r, 0.0) + q
    return quotas


def _choose(
    task: QueuedTask,
    plan_free: Mapping[str, Vector],
    now_free: Mapping[str, Vector],
    order: Sequence[str],
) -> str | None:
    """Where the filling puts `task`: its own node if running; else free-now first, best fit."""
    if task.node is not None:
        free = plan_free.get(task.node)
        return task.node if free is not None and _fits(free, task.request) else None
    best: tuple[int, float, str] | None = None
    for node in order:
        if not _fits(plan_free[node], task.request):
            continue
        free_now = 0 if _fits(now_free[node], task.request) else 1
        left = sum(plan_free[node].values())
        candidate = (free_now, left, node)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else best[2]


# --- the ESL ---------------------------------------------------------------------------------
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
        chosen = _ordering(ordering)
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
        self._pending_cycle = False
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
        chosen = _ordering(ordering)
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
            self._submitted(user, key, managed)
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
            task.ref = ref
            for r, q in managed.items():
                self._smallest[r] = min(q, self._smallest.get(r, q))
            if not ref.done() and not ref.started():
                self._queued[user][ref.id] = task
            self.submitted += 1
        ref.add_done_callback(lambda r: self._on_done(task, r))
        self._request_cycle()
        self._submitted(user, key, managed)
        return ref

    def _submitted(self, user: str, job: str, managed: Mapping[str, float]) -> None:
        """Hook run after each `submit`: `job` is the job key, `managed` the quota request."""

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
    def _request_cycle(self) -> None:
        with self._lock:
            if self._pending_cycle or self._closed:
                return
            self._pending_cycle = True
        self.call_later(0.0, self._cycle)

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
            self._pending_cycle = False
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
