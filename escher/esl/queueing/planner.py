"""The quota planner (pure): progressive filling of the users' outstanding tasks, then nodes.

`plan_quotas` is what `QueueingPolicy` runs on every submission and completion; `fill` is the
progressive filling it shares with the simulator (`escher.esl.queueing.simulator`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

from escher.core.resources import fits
from escher.core.task import TaskRef
from escher.esl.queueing.orderings import Ordering
from escher.esl.queueing.vectors import Vector, add, pooled, take


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


#: Called for each task the filling chooses, with its user and its index in the user's
#: queue; returns True if it removed the task from that queue.
Serve = Callable[[str, QueuedTask, int], bool]


def fill(
    ordering: Ordering,
    totals: Mapping[str, float],
    free: Vector,
    alloc: MutableMapping[str, Vector],
    queues: Mapping[str, Sequence[QueuedTask]],
    serve: Serve,
) -> None:
    """Progressive filling of `free` (pooled over nodes) in `ordering`'s order.

    At each step the user whose key (`Ordering.key` of what `alloc` says it holds and of
    its next task) is smallest is served, if its next task fits in `free`: the task's
    request moves from `free` to the user's `alloc` and `serve` is told. A task that does
    not fit stops the filling under a strict ordering (unless it runs already), else its
    user is skipped from then on.
    """
    position = dict.fromkeys(queues, 0)
    active = {u for u, q in queues.items() if q}
    while active:
        user = min(
            active, key=lambda u: (*ordering.key(alloc[u], totals, queues[u][position[u]].seq), u)
        )
        queue = queues[user]
        task = queue[position[user]]
        if not fits(task.request, free):
            if ordering.strict and task.node is None:
                break
            active.discard(user)
            continue
        take(free, task.request)
        add(alloc[user], task.request)
        if not serve(user, task, position[user]):
            position[user] += 1
        if position[user] >= len(queue):
            active.discard(user)


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
    totals = pooled(capacity)
    # 1. Progressive filling of the pooled capacity: how many of whose tasks, in which order.
    chosen: list[QueuedTask] = []

    def choose(user: str, task: QueuedTask, index: int) -> bool:
        chosen.append(task)
        return False

    fill(ordering, totals, dict(totals), {u: {} for u in tasks}, tasks, choose)
    # 2. Nodes: running tasks where they run, then queued ones where they fit (free now
    #    first, then the tightest fit); a queued task that fits no node gets no quota.
    plan_free = {n: dict(c) for n, c in capacity.items()}
    now_free = {n: dict(c) for n, c in capacity.items()}
    for user_tasks in tasks.values():
        for t in user_tasks:
            if t.node is not None and t.node in now_free:
                take(now_free[t.node], t.request)
    order = sorted(capacity)
    quotas: dict[str, dict[str, Vector]] = {u: {} for u in tasks}
    for task in sorted(chosen, key=lambda t: t.node is None):
        node = choose_node(task, plan_free, now_free, order)
        if node is None:
            continue
        take(plan_free[node], task.request)
        if task.node is None:
            take(now_free[node], task.request)
        add(quotas[task.user].setdefault(node, {}), task.request)
    return quotas


def choose_node(
    task: QueuedTask,
    plan_free: Mapping[str, Vector],
    now_free: Mapping[str, Vector],
    order: Sequence[str],
) -> str | None:
    """Where the filling puts `task`: its own node if running; else free-now first, best fit."""
    if task.node is not None:
        free = plan_free.get(task.node)
        return task.node if free is not None and fits(task.request, free) else None
    best: tuple[int, float, str] | None = None
    for node in order:
        if not fits(task.request, plan_free[node]):
            continue
        free_now = 0 if fits(task.request, now_free[node]) else 1
        left = sum(plan_free[node].values())
        candidate = (free_now, left, node)
        if best is None or candidate < best:
            best = candidate
    return None if best is None else best[2]
