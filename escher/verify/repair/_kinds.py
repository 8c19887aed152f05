"""Kinds of change, one class each, in a registry (`KINDS`).

A kind names the *keys* a conflict implicates (a task's replicas, an intent, a node type),
how far each key can go (levels 1..`top`), what a level costs, and the `Change` a level is.
The search (`_search`) only ever talks to kinds through this interface, so a new kind of
change (a node returned to service, say) is one more class here.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, ClassVar

from escher.core.cluster import ClusterState, Node
from escher.core.plan import (
    Colocated,
    Intent,
    PinnedTo,
    Plan,
    Separated,
    SpreadAtMost,
    SpreadEvenly,
)
from escher.core.resources import Resources
from escher.verify.repair._draft import Draft
from escher.verify.repair._model import Change

Key = Hashable

#: Cost of dropping an intent (relaxing it one step costs 1).
DROP_COST = 2.0

#: At most this many nodes of one type are added (also the bound a "none found" is within).
MAX_NEW_NODES = 100

#: At most this many distinct nodes are tried for growing one node.
MAX_GROWN_NODES = 8


@dataclass(frozen=True)
class Conflict:
    """A conflict of a (changed) plan: its statement ids, and for each intent of that plan
    the index of the original plan's intent it stands for."""

    ids: frozenset[str]
    origins: tuple[int, ...]

    @property
    def tasks(self) -> list[str]:
        """The tasks named, sorted."""
        return sorted(s[5:] for s in self.ids if s.startswith("task:"))

    @property
    def intents(self) -> list[int]:
        """The original intents named, sorted."""
        at = [s[7:] for s in self.ids if s.startswith("intent:")]
        n = len(self.origins)
        return sorted({self.origins[int(i)] for i in at if i.isdigit() and int(i) < n})


@dataclass(frozen=True)
class NodeType:
    """Nodes alike in labels and capacity (an added node is an empty one of these)."""

    like: str
    labels: tuple[tuple[str, str], ...]
    total: Resources
    count: int

    @property
    def name(self) -> str:
        """``type=gpu8 (CPU 48, GPU 8, memory 384Gi)``: labels (or the id of one such node), then
        capacity."""
        labels = ", ".join(f"{k}={v}" for k, v in self.labels) or repr(self.like)
        capacity = ", ".join(f"{k} {_amount(k, v)}" for k, v in sorted(self.total.items()))
        return f"{labels} ({capacity})"


class Base:
    """The plan and cluster being repaired, with what the kinds look up in them."""

    def __init__(self, plan: Plan, state: ClusterState, adjustable: frozenset[str] | None):
        self.plan = plan
        self.state = state
        self.adjustable = adjustable  # None: every task's request may shrink
        self.tasks = {t.name: t for t in plan.tasks}

    @cached_property
    def made_labels(self) -> frozenset[str]:
        """Labels the plan creates (planned resources, task creations)."""
        made = {r.label for r in self.plan.resources}
        made.update(c.label for t in self.plan.tasks for c in t.creates)
        return frozenset(made)

    @cached_property
    def node_types(self) -> list[NodeType]:
        """Alive nodes grouped by labels (but a label naming the node itself) and physical
        capacity, largest group first."""
        groups: dict[tuple[tuple[tuple[str, str], ...], Resources], list[Node]] = {}
        for node in self.state.nodes.values():
            if node.alive:
                groups.setdefault((_own_labels(node), node.physical), []).append(node)
        types = [
            NodeType(ns[0].id, labels, total, len(ns)) for (labels, total), ns in groups.items()
        ]
        return sorted(types, key=lambda t: -t.count)

    def resources(self, conflict: Conflict) -> list[str]:
        """The resources a conflict is about: its capacities, else its tasks' requests."""
        named: set[str] = set()
        for sid in conflict.ids:
            if sid.startswith("cap:"):
                named.add(sid[4:].split("@", 1)[0])
            elif sid.startswith("res:"):
                index = int(sid[4:])
                if index < len(self.plan.resources):
                    named.add(self.plan.resources[index].label)
        if not named:
            for name in conflict.tasks:
                if name in self.tasks:
                    named.update(self.tasks[name].resources)
        return sorted(named)

    def demand(self, resource: str) -> float:
        """The plan's total request of `resource`."""
        return float(sum(t.resources.get(resource, 0.0) * t.count for t in self.plan.tasks))

    def largest(self, resource: str) -> float:
        """The plan's largest single request of `resource` (0 if none)."""
        return max((t.resources.get(resource, 0.0) for t in self.plan.tasks), default=0.0)


def _amount(resource: str, value: float) -> str:
    """`value` of `resource` as users write it: memory in Gi or Mi when whole, else plain."""
    if resource == "memory":
        for unit, size in (("Gi", 2**30), ("Mi", 2**20)):
            if value >= size and float(value / size).is_integer():
                return f"{value / size:g}{unit}"
    return f"{value:g}"


def _pair(key: Key) -> tuple[Any, Any]:
    """A key of two parts (a task and a resource, a node and a resource, ...)."""
    assert isinstance(key, tuple) and len(key) == 2
    return key[0], key[1]


def _index(key: Key) -> int:
    assert isinstance(key, int)
    return key


def _own_labels(node: Node) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in node.labels.items() if v != node.id))


class ChangeKind:
    """One kind of change. Subclasses say which keys a conflict implicates and what a level
    of a key means."""

    name: ClassVar[str]

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        """The keys `conflict` implicates, most promising first."""
        raise NotImplementedError

    def top(self, base: Base, key: Key) -> int:
        """The highest level of `key`."""
        raise NotImplementedError

    def cost(self, base: Base, key: Key, level: int) -> float:
        """The cost of `key` at `level` (0 at level 0, growing with the level)."""
        raise NotImplementedError

    def change(self, base: Base, key: Key, level: int) -> Change:
        """`key` at `level` as a `Change` (level >= 1)."""
        raise NotImplementedError

    def compatible(self, keys: Iterable[Key], key: Key) -> bool:
        """May `key` join a repair that already changes `keys`?"""
        return True


class Replicas(ChangeKind):
    """Fewer replicas of a task: level n removes n replicas (at least one stays); cost 1 per
    replica removed."""

    name = "replicas"

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        return [n for n in conflict.tasks if n in base.tasks and base.tasks[n].count > 1]

    def top(self, base: Base, key: Key) -> int:
        return base.tasks[str(key)].count - 1

    def cost(self, base: Base, key: Key, level: int) -> float:
        return float(level)

    def change(self, base: Base, key: Key, level: int) -> Change:
        name = str(key)
        count = base.tasks[name].count - level

        def edit(draft: Draft) -> None:
            draft.tasks[name] = replace(draft.tasks[name], count=count)

        return Change("replicas", name, base.tasks[name].count, count, float(level), edit)


def _step(value: float) -> float:
    """The amount one level of `value` is: 1 for whole amounts up to 64, else 1/64 of it."""
    return 1.0 if float(value).is_integer() and value <= 64 else value / 64


class Request(ChangeKind):
    """A smaller request of one resource of a task marked adjustable: level n takes n steps
    (one step: 1 for whole amounts up to 64, else 1/64 of the request) off each replica's
    request, never down to 0; cost: the replicas' worth given up (count x the share of the
    request removed)."""

    name = "request"

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        wanted = base.resources(conflict)
        out: list[Key] = []
        for name in conflict.tasks:
            task = base.tasks.get(name)
            if task is None or (base.adjustable is not None and name not in base.adjustable):
                continue
            out.extend((name, r) for r in wanted if task.resources.get(r, 0.0) > 0)
        return out

    def _from(self, base: Base, key: Key) -> tuple[str, str, float]:
        name, resource = _pair(key)
        return name, resource, base.tasks[name].resources[resource]

    def top(self, base: Base, key: Key) -> int:
        _, _, amount = self._from(base, key)
        return max(0, math.ceil(amount / _step(amount) - 1e-9) - 1)

    def cost(self, base: Base, key: Key, level: int) -> float:
        name, _, amount = self._from(base, key)
        return base.tasks[name].count * level * _step(amount) / amount

    def change(self, base: Base, key: Key, level: int) -> Change:
        name, resource, amount = self._from(base, key)
        after = round(amount - level * _step(amount), 9)

        def edit(draft: Draft) -> None:
            task = draft.tasks[name]
            draft.tasks[name] = replace(
                task, resources=Resources({**task.resources, resource: after})
            )

        return Change(
            "request",
            name,
            {resource: amount},
            {resource: after},
            self.cost(base, key, level),
            edit,
        )


def _replicas(base: Base, intent: Intent) -> int:
    return sum(base.tasks[t].count for t in intent.tasks if t in base.tasks)


def relaxed(intent: Intent, level: int) -> tuple[Intent, ...]:
    """`intent` relaxed by `level` steps: a separation allows 1 + level per node or domain,
    a limit or a skew grows by `level`, a co-location group splits in two halves."""
    if isinstance(intent, Separated):
        return (
            SpreadAtMost(
                intent.tasks,
                intent.source,
                intent.weight,
                per_node=1 + level,
                topology_key=intent.topology_key,
            ),
        )
    if isinstance(intent, SpreadAtMost):
        return (replace(intent, per_node=intent.per_node + level),)
    if isinstance(intent, SpreadEvenly):
        return (replace(intent, max_skew=intent.max_skew + level),)
    if isinstance(intent, Colocated):
        half = len(intent.tasks) // 2
        first, second = intent.tasks[:half], intent.tasks[half:]
        return (replace(intent, tasks=first), replace(intent, tasks=second))
    return (intent,)


class IntentChange(ChangeKind):
    """Relax or drop one intent: key ``("relax", i)`` level n relaxes the plan's intent i by
    n steps (`relaxed`; cost n), key ``("drop", i)`` drops it (cost `DROP_COST`)."""

    name = "intent"

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        out: list[Key] = []
        for i in conflict.intents:
            if base.plan.intents[i].preferred:
                continue
            if self.top(base, ("relax", i)):
                out.append(("relax", i))
            out.append(("drop", i))
        return out

    def top(self, base: Base, key: Key) -> int:
        how, i = _pair(key)
        intent = base.plan.intents[i]
        if how == "drop":
            return 1
        if isinstance(intent, Separated):
            return max(0, _replicas(base, intent) - 1)
        if isinstance(intent, SpreadAtMost):
            return max(0, _replicas(base, intent) - intent.per_node)
        if isinstance(intent, SpreadEvenly):
            return max(0, _replicas(base, intent) - intent.max_skew)
        if isinstance(intent, Colocated):
            return 1 if len(intent.tasks) > 1 else 0
        return 0

    def cost(self, base: Base, key: Key, level: int) -> float:
        return DROP_COST * level if _pair(key)[0] == "drop" else float(level)

    def compatible(self, keys: Iterable[Key], key: Key) -> bool:
        return all(_pair(k)[1] != _pair(key)[1] for k in keys)

    def change(self, base: Base, key: Key, level: int) -> Change:
        how, i = _pair(key)
        intent = base.plan.intents[i]
        now: tuple[Intent, ...] = () if how == "drop" else relaxed(intent, level)

        def edit(draft: Draft) -> None:
            draft.intents[i] = now

        after: str | list[str] | None = None
        if len(now) == 1:
            after = now[0].describe()
        elif now:
            after = [x.describe() for x in now]
        target = intent.source or intent.describe()
        return Change("intent", target, intent.describe(), after, self.cost(base, key, level), edit)


def _hosts(base: Base, node_type: NodeType, names: Iterable[str]) -> bool:
    """Could an empty node of `node_type` hold one replica of one of the tasks `names`?"""
    for name in names:
        task = base.tasks.get(name)
        if task is None:
            continue
        need = {k: v for k, v in task.resources.items() if k not in base.made_labels}
        if Resources(need).fits_in(node_type.total):
            return True
    return False


class Nodes(ChangeKind):
    """More nodes like an existing type (same labels, same capacity, empty): key = the type,
    level n adds n nodes (at most `MAX_NEW_NODES`); cost 1 per node."""

    name = "nodes"

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        wanted = set(base.resources(conflict))
        types = [i for i, t in enumerate(base.node_types) if _hosts(base, t, conflict.tasks)]
        types.sort(key=lambda i: not wanted & set(base.node_types[i].total))
        return list(types)

    def top(self, base: Base, key: Key) -> int:
        return MAX_NEW_NODES

    def cost(self, base: Base, key: Key, level: int) -> float:
        return float(level)

    def change(self, base: Base, key: Key, level: int) -> Change:
        node_type = base.node_types[_index(key)]
        like = base.state.nodes[node_type.like]

        def edit(draft: Draft) -> None:
            made = 0
            k = 0
            while made < level:
                k += 1
                new_id = f"{like.id}-new-{k}"
                if new_id in draft.nodes:
                    continue
                labels = {key: (new_id if v == like.id else v) for key, v in like.labels.items()}
                total = like.physical
                draft.nodes[new_id] = Node(new_id, total, total, labels)
                _list_alike(draft, like.id, new_id)
                made += 1

        return Change(
            "nodes", node_type.name, node_type.count, node_type.count + level, float(level), edit
        )


def _list_alike(draft: Draft, like: str, new_id: str) -> None:
    """Node pins that would list a node alike to `like` list `new_id` too."""
    for index, intents in draft.intents.items():
        draft.intents[index] = tuple(
            replace(x, nodes=(*x.nodes, new_id))
            if isinstance(x, PinnedTo) and like in x.nodes and x.admits_like(like)
            else x
            for x in intents
        )


class GrownNode(ChangeKind):
    """One node grown: key ``(node id, resource)``, level n adds n units of the resource to
    the node (a unit: 1 when the plan's requests of it are whole and at most 1024, else 1/64
    of its largest request); cost: the amount added over the node's total of it (or over the
    largest request, for a resource the node lacks). Keys of one repair share a node."""

    name = "node"

    def _unit(self, base: Base, resource: str) -> float:
        largest = base.largest(resource)
        whole = all(float(t.resources.get(resource, 0.0)).is_integer() for t in base.plan.tasks)
        return 1.0 if whole and largest <= 1024 else max(largest / 64, 1e-9)

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        resources = base.resources(conflict)
        nodes = sorted(
            (n for n in base.state.nodes.values() if n.alive),
            key=lambda n: tuple(-n.available.get(r, 0.0) for r in resources),
        )
        seen: set[object] = set()
        picked: list[Node] = []
        for node in nodes:
            kind = (_own_labels(node), node.total, node.available)
            if kind not in seen and len(picked) < MAX_GROWN_NODES:
                seen.add(kind)
                picked.append(node)
        ephemeral = base.made_labels.union(*(n.ephemeral for n in base.state.nodes.values()))
        return [(n.id, r) for n in picked for r in resources if r not in ephemeral]

    def top(self, base: Base, key: Key) -> int:
        _, resource = _pair(key)
        need = base.demand(resource)
        return max(1, min(10**6, math.ceil(need / self._unit(base, resource))))

    def cost(self, base: Base, key: Key, level: int) -> float:
        node_id, resource = _pair(key)
        node = base.state.nodes[node_id]
        scale = node.total.get(resource, 0.0) or base.largest(resource) or 1.0
        return level * self._unit(base, resource) / scale

    def compatible(self, keys: Iterable[Key], key: Key) -> bool:
        return all(_pair(k)[0] == _pair(key)[0] for k in keys)

    def change(self, base: Base, key: Key, level: int) -> Change:
        node_id, resource = _pair(key)
        node = base.state.nodes[node_id]
        amount = level * self._unit(base, resource)
        before = node.available.get(resource, 0.0)

        def edit(draft: Draft) -> None:
            now = draft.nodes[node_id]
            more = Resources({resource: amount})
            draft.nodes[node_id] = replace(
                now, total=now.total + more, available=now.available + more
            )

        return Change(
            "node",
            node_id,
            {resource: before},
            {resource: round(before + amount, 9)},
            self.cost(base, key, level),
            edit,
        )


#: Every kind of change by name, in the order repairs of equal cost are listed.
KINDS: Mapping[str, ChangeKind] = {
    k.name: k for k in (Replicas(), IntentChange(), Nodes(), GrownNode(), Request())
}


class Mixed(ChangeKind):
    """Changes of several kinds in one repair (tried when no kind alone repairs the plan):
    a key is ``(kind name, key of that kind)``; each change keeps its own kind's cost."""

    name = "mixed"

    def __init__(self, kinds: Iterable[ChangeKind]) -> None:
        self.kinds = {kind.name: kind for kind in kinds}

    def keys(self, base: Base, conflict: Conflict) -> list[Key]:
        return [
            (name, key) for name, kind in self.kinds.items() for key in kind.keys(base, conflict)
        ]

    def top(self, base: Base, key: Key) -> int:
        name, inner = _pair(key)
        return self.kinds[name].top(base, inner)

    def cost(self, base: Base, key: Key, level: int) -> float:
        name, inner = _pair(key)
        return self.kinds[name].cost(base, inner, level)

    def change(self, base: Base, key: Key, level: int) -> Change:
        name, inner = _pair(key)
        return self.kinds[name].change(base, inner, level)

    def compatible(self, keys: Iterable[Key], key: Key) -> bool:
        name, inner = _pair(key)
        same = [_pair(k)[1] for k in keys if _pair(k)[0] == name]
        return self.kinds[name].compatible(same, inner)
