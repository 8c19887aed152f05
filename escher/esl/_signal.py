"""The paper's primitives: task signalling (events, barriers) and queues.

* An event is a label that does not exist until a setter task finishes (or the application
  calls `set()`); waiter tasks request it, so they wait until then. The setter creates it on
  every node with unbounded capacity, so any number of waiters run anywhere.
* A barrier has one label per party; a task "after" the barrier requests all of them.
* A queue is a label whose per-node capacity is the drain rate: 0 holds every task, k lets at
  most k of them run per node at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from escher.backends.base import Backend
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.plan import SpreadAtMost
from escher.core.resources import MAX_CAPACITY, Resources, validate_count
from escher.core.task import TaskRef
from escher.esl._constraint import Action, Constraint, Recorder
from escher.esl._contribution import Contribution, LabelNote
from escher.esl._esl import ESL, Bound, node_ids
from escher.esl._ledger import EVERY_NODE
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import plan_warning
from escher.esl._policy import Policy


class _Setter(Policy):
    def __init__(self, owner: ESL, labels: Iterable[str], source: str) -> None:
        self.owner = owner
        self.backend = owner.backend
        self.labels = tuple(labels)
        self._source = source

    @property
    def source(self) -> str:
        return self._source

    def constraint(self) -> Constraint:
        return Constraint(
            on_done=tuple(Action(label, MAX_CAPACITY, EVERY_NODE) for label in self.labels),
            source=self._source,
        )

    def recorder(self) -> Recorder | None:
        return self.owner.recorder()


class Event:
    """One event of a `Signals` ESL.

    Attributes:
        label: The event's label.
        setter: Policy: a task launched through it sets the event when it returns.
        waiter: Policy: a task launched through it starts only once the event is set.
    """

    def __init__(self, owner: Signals, name: str) -> None:
        self.owner = owner
        self.name = name
        self.label = owner.own(
            owner.label(f"ev-{name}"),
            restorable=False,
            why_not="an event is set again by its setter",
        )
        self.setter = _Setter(owner, [self.label], f"{owner.source}.event({name!r}).setter")
        self.waiter = Bound(owner, {self.label: 1}, f"{owner.source}.event({name!r}).waiter")
        self.waiter.waits_for = (self.label,)

    def set(self) -> None:
        """Set the event from the application (releases every waiter)."""
        self.owner.set_resource(self.label, MAX_CAPACITY, EVERY_NODE, restorable=False)

    def clear(self) -> None:
        """Unset it: later waiters wait again (running ones are not affected)."""
        self.owner.forget(self.label)
        self.owner.own(self.label, restorable=False)

    def is_set(self) -> bool:
        """True if some node holds the event's label."""
        return bool(self.owner.backend.get_cluster_state().holding(self.label))


class Signals(ESL):
    """Task signalling: named events that tasks set and wait for.

    Example:
        >>> sig = Signals()                                              # doctest: +SKIP
        >>> loaded = sig.event("loaded")
        >>> loaded.setter.launch(load_data); loaded.waiter.launch(train)
    """

    kind = "sig"

    def __init__(self, backend: Backend | None = None, *, name: str | None = None) -> None:
        super().__init__(backend, name=name)
        self.events: dict[str, Event] = {}

    def contribution(self, ref: TaskRef) -> Contribution | None:
        """The events `ref` waits for, by name (see `ESL.contribution`)."""
        request = ref.spec.resources
        notes = {
            event.label: LabelNote(
                f"{self.source}.event({name!r})",
                f"event {name!r}, set when a setter task returns or set() is called",
                later=True,
                kind="signal",
            )
            for name, event in list(self.events.items())
            if event.label in request
        }
        return Contribution(self.source, notes) if notes else None

    def event(self, name: str) -> Event:
        """The event called `name` (created on first use)."""
        self._check_open()
        if name not in self.events:
            self.events[name] = Event(self, name)
        return self.events[name]


class Barrier(ESL):
    """`parties` tasks must finish before any task launched through `after` starts.

    Attributes:
        after: Policy for the tasks behind the barrier.
    """

    kind = "bar"

    def __init__(
        self, parties: int, backend: Backend | None = None, *, name: str | None = None
    ) -> None:
        validate_count(parties, what="parties")
        super().__init__(backend, name=name)
        self.parties = parties
        self.labels = [
            self.own(self.label(f"p{i}"), restorable=False, why_not="set again by its party")
            for i in range(parties)
        ]
        self._next = 0
        self._count_lock = threading.Lock()
        self.after = Bound(self, {label: 1 for label in self.labels}, f"{self.source}.after")
        self.after.waits_for = tuple(self.labels)

    def constraint(self) -> Constraint:
        """A party's constraint: the next party's label is set when the task returns."""
        with self._count_lock:
            if self._next >= self.parties:
                raise ValidationError(f"{self.source} already has {self.parties} parties.")
            index, self._next = self._next, self._next + 1
        return Constraint(
            on_done=(Action(self.labels[index], MAX_CAPACITY, EVERY_NODE),),
            source=f"{self.source}.party[{index}]",
        )

    def passed(self) -> bool:
        """True once every party finished."""
        state = self.backend.get_cluster_state()
        return all(state.holding(label) for label in self.labels)


class TaskQueue(ESL):
    """A queue: at most `rate` of its tasks run per node at once; 0 holds them all.

    Args:
        backend: The backend (default: the current one).
        rate: Initial drain rate per node (default 0: paused).
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "queue"
    queues = True

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        rate: int = 0,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(backend, name=name)
        self._all_nodes = nodes is None
        self.nodes = () if nodes is None else tuple(node_ids(self.backend, nodes))
        self.unit = self.own(self.label("q"))
        self.rate = 0
        self.set_rate(rate)

    def set_rate(self, rate: int) -> None:
        """Let at most `rate` queued tasks run per node at once (0 pauses the queue)."""
        validate_count(rate, what="rate", low=0)
        self._check_open()
        if self._all_nodes:  # every alive node: one bulk call, no cluster read
            self.nodes = self.set_resources({self.unit: rate}, EVERY_NODE)
        else:
            self.set_resources({self.unit: rate}, self.nodes)
        self.rate = rate

    def pause(self) -> None:
        """Hold every task that has not started."""
        self.set_rate(0)

    def constraint(self) -> Constraint:
        return Constraint(Resources({self.unit: 1}), source=self.source)

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        """Nothing a plan can state: the queue bounds how many run *at once*, and its tasks
        wait their turn (planned as not concurrent), so a per-node count over all of them
        would claim more than the queue does."""
        plan_warning(
            self.backend,
            f"{self.source}: its rate bounds how many of its tasks run at once per node; the "
            "plan checks that each fits when its turn comes, not the order they drain in.",
        )
        return []

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        source, rate = self.source, max(self.rate, 1)
        return PlanParts(
            [(self.unit, self.rate, n, source) for n in self.nodes if self.rate > 0],
            Resources({self.unit: 1}),
            intents=[lambda names: SpreadAtMost(names, source=source, per_node=rate)],
        )
