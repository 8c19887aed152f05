"""Orderings: which user's next task the progressive filling serves first; and DRF itself.

* ``fifo``: the oldest outstanding task first, strictly (a task that does not fit stops the
  filling: head-of-line blocking, as in a FIFO scheduler).
* ``drf``: Dominant Resource Fairness, the user with the smallest dominant share first.
* ``fair-threads``: naive fair sharing of cores, the user holding the fewest CPUs first.
* ``fair-memory``: naive fair sharing of memory, the user holding the least memory first.

Ties go to the oldest task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from escher.core.errors import ValidationError
from escher.core.resources import fits
from escher.esl.queueing.vectors import Vector, add, take

Key = tuple[Any, ...]


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


def ordering_of(value: str | Ordering) -> Ordering:
    """The `Ordering` named `value` (or `value` itself).

    Raises:
        ValidationError: an unknown name.
    """
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
        if fits(demand, free):
            take(free, demand)
            add(alloc[user], demand)
            count[user] += 1
            if max_tasks is not None and count[user] >= max_tasks.get(user, 0):
                active.remove(user)
        else:
            active.remove(user)
    return count
