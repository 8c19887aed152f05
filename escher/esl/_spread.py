"""Spreading and packing: anti-affinity, static and dynamic load balancing, bin-packing."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.context import current_backend, node_id
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.plan import Intent, PinnedTo, Separated, SpreadAtMost
from escher.core.resources import MAX_CAPACITY, Resources, validate_count
from escher.core.task import TaskRef, TaskSpec
from escher.esl._constraint import Constraint, build_spec
from escher.esl._esl import ESL, Bound, node_ids
from escher.esl._ledger import EVERY_NODE
from escher.esl._plan_parts import PlanParts
from escher.esl._planning import plan_warning, planning_backend
from escher.esl._policy import Policy


class _PerNode(ESL):
    """An ESL with labels set to the same capacity on each node of a node set.

    Without explicit `nodes` the set is every alive node, written with one bulk call (no
    cluster read); each write to all nodes also adopts the nodes that joined since.
    """

    def __init__(
        self,
        backend: Backend | None,
        name: str | None,
        nodes: Iterable[str] | NodeSpecLike | None,
        per_node: int | None,
    ) -> None:
        super().__init__(backend, name=name)
        self._explicit_nodes = nodes is not None
        self.nodes: tuple[str, ...] = ()
        if self._explicit_nodes:
            self.nodes = tuple(node_ids(self.backend, nodes))
            if not self.nodes:
                raise ValidationError(f"{self.source}: the node selection matched no node.")
        self.unit = self.label("unit")
        self.per_node = 0
        self._apply(self._first_per_node() if per_node is None else per_node)
        if not self.nodes:
            raise ValidationError(f"{self.source}: the cluster has no alive node.")

    def _first_per_node(self) -> int:
        """The capacity to start with when the constructor was given none."""
        return 1

    def _labels(self) -> list[str]:
        """Every label that gets `per_node` on each node."""
        return [self.unit]

    def _apply(self, per_node: int) -> None:
        self.per_node = per_node
        self._write(dict.fromkeys(self._labels(), per_node))

    def _write(self, capacities: dict[str, float]) -> None:
        """Set `capacities` on the node set, each node written once."""
        if self._explicit_nodes:
            self.set_resources(capacities, self.nodes)
        else:
            self.nodes = self.set_resources(capacities, EVERY_NODE)

    def constraint(self) -> Constraint:
        return Constraint(Resources({self.unit: 1}), source=self.source)

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        if self._explicit_nodes:
            return [n for n in self.nodes if n in state.nodes]
        return sorted(state.nodes)

    def _resources_parts(
        self, labels: Iterable[str] | None = None
    ) -> list[tuple[str, float, NodeSpecLike, str]]:
        wanted = None if labels is None else set(labels)
        return [
            (label, cap, node, self.source)
            for label, caps in self.ledger().items()
            if wanted is None or label in wanted
            for node, cap in caps.items()
        ]


class AntiAffinity(_PerNode):
    """At most `per_node` of its tasks on any node at the same time (one by default).

    Args:
        backend: The backend (default: the current one).
        per_node: Units per node.
        nodes: Node ids or a selector to spread over (default: every alive node).
        ghost: For long-running tasks (per_node 1 only): a short ghost task takes a node's
            unit (sets it to 0 there) and creates a per-task resource; the real task requests
            only that. The unit comes back when the task finishes.
        groups: Names of groups of tasks that repel each other but not the other groups'
            (see `group`); their labels are written with the ESL's own, each node once.
        name: Used in labels and explanations.

    Setup writes each node once, however many groups: one bulk call over the nodes.
    """

    kind = "aa"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        per_node: int = 1,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        ghost: bool = False,
        groups: Iterable[str] = (),
        name: str | None = None,
    ) -> None:
        per_node = validate_count(per_node, what="per_node")
        if ghost and per_node != 1:
            raise ValidationError("ghost anti-affinity takes per_node=1 only.")
        self.ghost = bool(ghost)
        self._taken: set[str] = set()
        self._ghost_ids = 0
        self._ghosts: dict[str, TaskRef] = {}  # task label -> its ghost, until launched
        self.groups: dict[str, Bound] = {}
        self._unwritten: list[str] = []  # group labels not on the nodes yet
        if isinstance(groups, str):
            raise ValidationError("groups takes a list of group names, not one string.")
        self._first_groups = list(groups)
        if self._first_groups and self.ghost:
            raise ValidationError("ghost anti-affinity has no groups; use one ESL per group.")
        super().__init__(backend, name, nodes, per_node)

    def _labels(self) -> list[str]:
        for group in self._first_groups:
            self._new_group(group)
        self._first_groups = []
        written, self._unwritten = self._unwritten, []
        return [self.unit, *written]

    def _new_group(self, name: str) -> Bound:
        if not isinstance(name, str) or not name:
            raise ValidationError(f"a group name must be a non-empty string, got {name!r}.")
        with self._lock:
            if name in self.groups:
                return self.groups[name]
            label = self.label(f"g-{name}")
            source = f"{self.source}.group({name!r})"
            group = _SpreadGroup(self, label, source, self._intent(source))
            self.groups[name] = group
            self._unwritten.append(label)
            return group

    def group(self, name: str) -> Bound:
        """The policy of group `name`: at most `per_node` of its tasks on a node at a time
        (tasks of other groups, and the ESL's own, do not count).

        A group's label goes on the nodes at the first launch through it, together with
        every other group not written yet (one bulk call); groups given to the constructor
        are written with the ESL's own label."""
        self._check_open()
        if self.ghost:
            raise ValidationError("ghost anti-affinity has no groups; use one ESL per group.")
        return self._new_group(name)

    def write_groups(self) -> None:
        """Put the labels of the groups made since the last write on the nodes (one bulk
        call); `launch` through a group does it when needed."""
        with self._lock:
            labels, self._unwritten = self._unwritten, []
            if labels:
                self._write(dict.fromkeys(labels, self.per_node))

    def _intent(self, source: str) -> Callable[[tuple[str, ...]], Intent]:
        per_node = self.per_node if self.per_node else 1
        if per_node == 1:
            return lambda names: Separated(names, source=source)
        return lambda names: SpreadAtMost(names, source=source, per_node=per_node)

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        return PlanParts(
            self._resources_parts([self.unit]),
            Resources({self.unit: 1}),
            intents=[self._intent(self.source)],
        )

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """With `ghost`: launch the ghost that takes a node's unit, and let the task request
        only the per-task resource the ghost leaves. A planning run plans the task with the
        unit itself (the ghost's hand-over happens inside tasks, which do not run)."""
        if not self.ghost or planning_backend(self.backend) is not None:
            return spec
        self._check_open()
        with self._lock:
            self._ghost_ids += 1
            task_label = self.own(
                self.label(f"t{self._ghost_ids}"), restorable=False, why_not="its task ran there"
            )
        unit = Resources({self.unit: 1})
        ghost = self.backend.launch(
            build_spec(
                _take_unit,
                (self.unit, task_label),
                {},
                Constraint(unit),
                None,
                f"ghost-{spec.name}",
                self.record,
            )
        )
        with self._lock:
            self._ghosts[task_label] = ghost
        return dataclasses.replace(spec, resources=spec.resources - unit + {task_label: 1})

    def after_launch(self, ref: TaskRef) -> None:
        if not self.ghost or planning_backend(self.backend) is not None:
            return
        with self._lock:
            task_label = next(label for label in ref.spec.resources if label in self._ghosts)
            ghost = self._ghosts.pop(task_label)
        ghost.add_done_callback(lambda g: self._ghost_done(g, ref, task_label))

    def _ghost_done(self, ghost: TaskRef, ref: TaskRef, task_label: str) -> None:
        node = ghost.node_id
        if node is None or ghost.exception(0) is not None:
            ref.cancel()
            return
        with self._lock:
            self._taken.add(node)
            self.record(self.unit, node, 0)
        ref.add_done_callback(lambda r: self._give_back(node, task_label))

    def _give_back(self, node: str, task_label: str) -> None:
        with self._lock:
            self._taken.discard(node)
            if self._closed:
                return
        self.forget(task_label)
        if node in self.backend.get_cluster_state().nodes:
            self.set_resource(self.unit, self.per_node, node)

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        return [n for n in super()._eligible_nodes(state) if n not in self._taken]


def _take_unit(unit: str, task_label: str) -> str:
    """Ghost task body: take this node's anti-affinity unit, leave a per-task resource."""
    backend = current_backend()
    backend.set_resource(unit, 0)
    backend.set_resource(task_label, 1)
    return node_id()


class LoadBalance(_PerNode):
    """At most `per_node` of its tasks per node; static or adjusted by a monitor.

    Args:
        backend: The backend (default: the current one).
        tasks: Expected number of tasks: per_node = ceil(tasks / nodes) (static balancing).
        per_node: Or give the per-node cap directly (default 1 when dynamic).
        nodes: Node ids or a selector (default: every alive node).
        dynamic: Run a monitor on the backend's clock every `interval` seconds while tasks
            of this ESL are unfinished: it raises the cap by one on every node when every
            node is full and tasks wait, and lowers it by one when every node has a free unit.
        interval: Seconds between monitor rounds.
        name: Used in labels and explanations.
    """

    kind = "lb"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        tasks: int | None = None,
        per_node: int | None = None,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        dynamic: bool = False,
        interval: float = 1.0,
        name: str | None = None,
    ) -> None:
        if tasks is not None and per_node is not None:
            raise ValidationError("give tasks= or per_node=, not both.")
        if tasks is None and per_node is None and not dynamic:
            raise ValidationError("give tasks= (expected task count) or per_node=.")
        self.dynamic = bool(dynamic)
        self.interval = float(interval)
        self.history: list[tuple[float, int]] = []
        self._refs: list[TaskRef] = []
        self._armed = False
        self._tasks = tasks
        if per_node is not None:
            validate_count(per_node, what="per_node")
        elif tasks is not None:
            validate_count(tasks, what="tasks")
        super().__init__(backend, name, nodes, per_node)
        self.history.append((self.backend.clock.now(), self.per_node))

    def _first_per_node(self) -> int:
        if self._tasks is None:
            return 1
        count = len(self.nodes)
        if not self._explicit_nodes:
            state = self.backend.get_cluster_state()
            count = sum(1 for n in state.nodes.values() if n.alive)
        return max(1, math.ceil(self._tasks / max(count, 1)))

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        source, per_node = self.source, self.per_node
        return PlanParts(
            self._resources_parts(),
            Resources({self.unit: 1}),
            intents=[lambda names: SpreadAtMost(names, source=source, per_node=per_node)],
        )

    def after_launch(self, ref: TaskRef) -> None:
        if not self.dynamic:
            return
        if planning_backend(self.backend) is not None:
            plan_warning(
                self.backend,
                f"{self.source}: planned with per_node={self.per_node}; its monitor adjusts "
                "the cap over time, which a planning run never lets pass.",
            )
            return
        with self._lock:
            self._refs.append(ref)
            arm = not self._armed
            self._armed = True
        if arm:
            self.call_later(self.interval, self._monitor)

    def _monitor(self) -> None:
        with self._lock:
            self._refs = [r for r in self._refs if not r.done()]
            waiting = any(not r.started() for r in self._refs)
            active = bool(self._refs)
            self._armed = active
        if not active:
            return
        state = self.backend.get_cluster_state()
        free = [
            state.nodes[n].available.get(self.unit, 0.0) for n in self.nodes if n in state.nodes
        ]
        if free and waiting and all(f < 1 for f in free):
            self._apply(self.per_node + 1)
        elif free and self.per_node > 1 and all(f >= 1 for f in free):
            self._apply(self.per_node - 1)
        else:
            self.call_later(self.interval, self._monitor)
            return
        self.history.append((self.backend.clock.now(), self.per_node))
        self.call_later(self.interval, self._monitor)


class BinPacking(ESL):
    """Pack tasks onto as few nodes as possible: a growing set of pack nodes.

    A task runs only on nodes of the set (they carry the pack resource). A node joins the set
    only when the task fits on none of the set's nodes right now; it is the first node by id
    that fits.

    Args:
        backend: The backend (default: the current one).
        name: Used in labels and explanations.
    """

    kind = "pack"

    def __init__(self, backend: Backend | None = None, *, name: str | None = None) -> None:
        super().__init__(backend, name=name)
        self.unit = self.label("set")
        self.own(self.unit)
        self.pack_nodes: list[str] = []
        self._pending: list[tuple[TaskRef, Resources]] = []
        self._pruned = 0  # length of _pending after the last pruning

    def constraint(self) -> Constraint:
        return Constraint(Resources({self.unit: 1}), source=self.source)

    def _grow_for(self, request: Resources) -> None:
        state = self.backend.get_cluster_state()
        members = [n for n in self.pack_nodes if n in state.nodes]
        joined = set(members)
        others = [n for n in sorted(state.nodes) if n not in joined]
        grow = next((n for n in others if request.fits_in(state.nodes[n].available)), None)
        if grow is None:
            # nothing can join now; if no member can ever fit it, add one that could
            if not any(request.fits_in(state.nodes[n].total) for n in members):
                grow = next((n for n in others if request.fits_in(state.nodes[n].total)), None)
        elif any((request + self._promised()).fits_in(state.nodes[n].available) for n in members):
            grow = None  # a member has room for it and for the tasks still waiting
        if grow is not None:
            self.pack_nodes.append(grow)
            self.set_resource(self.unit, MAX_CAPACITY, grow)

    def _promised(self) -> Resources:
        """What this ESL's launched tasks that have not started yet will take."""
        self._pending = [(r, q) for r, q in self._pending if not r.started() and not r.done()]
        self._pruned = len(self._pending)
        promised = Resources()
        for _, q in self._pending:
            promised = promised + q
        return promised

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        """Grow the pack set if the task fits none of its nodes now."""
        self._check_open()
        with self._lock:
            self._grow_for(spec.resources - Resources({self.unit: 1}))
        return spec

    def after_launch(self, ref: TaskRef) -> None:
        """Count a task that has not started as a promise on the pack nodes."""
        if ref.started():
            return
        with self._lock:
            self._pending.append((ref, ref.spec.resources - Resources({self.unit: 1})))
            if len(self._pending) > 2 * self._pruned + 64:  # keep the list amortised
                self._promised()

    def pack_plan(self, count: int, resources: Mapping[str, float] | None = None) -> list[str]:
        """The pack nodes `count` more tasks requesting `resources` would use, on the cluster
        as it is now: the current set, then the nodes the ESL would add (first by id that has
        room), filled in order. Tasks that fit nowhere add no node (the plan is then
        infeasible, as launching them would leave them waiting)."""
        request = Resources.of(resources)
        state = self.backend.get_cluster_state()
        members = [n for n in self.pack_nodes if n in state.nodes]
        others = [n for n in sorted(state.nodes) if n not in set(members)]
        used: list[str] = []
        left = count
        for nid in [*members, *others]:
            if left <= 0:
                break
            free, taken = state.nodes[nid].available, 0
            while taken < left and request.fits_in(free):
                free, taken = free - request, taken + 1
                if not request:
                    taken = left
            if taken or nid in members:
                used.append(nid)
            left -= taken
        return used

    def plan_parts(self, count: int, resources: Resources) -> PlanParts:
        """The pack resource on the current pack nodes and on those the tasks would add."""
        source = self.source
        nodes = tuple(self.pack_plan(count, resources))
        parts = PlanParts(
            [(self.unit, MAX_CAPACITY, n, source) for n in nodes],
            Resources({self.unit: 1}),
        )
        if nodes:
            parts.intents.append(lambda names: PinnedTo(names, source=source, nodes=nodes))
        return parts

    def promises(self, resources: Resources) -> list[tuple[Policy, PlanParts]]:
        """Its tasks run on the pack nodes: every node the set has grown to so far."""
        source, nodes = self.source, tuple(self.pack_nodes)
        build = lambda names: PinnedTo(names, source=source, nodes=nodes)  # noqa: E731
        return [(self, PlanParts(intents=[build] if nodes else []))]


class _SpreadGroup(Bound):
    """A group of an `AntiAffinity`: its label is written before its first task launches."""

    owner: AntiAffinity

    def __init__(
        self,
        owner: AntiAffinity,
        label: str,
        source: str,
        intent: Callable[[tuple[str, ...]], Intent],
    ) -> None:
        super().__init__(owner, {label: 1}, source, [intent])
        self.label = label

    def before_launch(self, spec: TaskSpec) -> TaskSpec:
        if self.label not in self.owner.ledger():
            self.owner.write_groups()
        return super().before_launch(spec)
