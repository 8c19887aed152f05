"""Sharing: priorities, weighted fair queuing and hierarchical fair sharing.

All three set per-node capacities of their labels; none preempts: lowering a capacity below
what running tasks hold lets them finish, and only new tasks wait.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from escher.backends.base import Backend
from escher.core.cluster import ClusterState
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpecLike
from escher.core.plan import PinnedTo, SpreadAtMost
from escher.core.resources import validate_count
from escher.esl._constraint import Constraint
from escher.esl._esl import ESL, Bound, node_ids
from escher.esl._ledger import EVERY_NODE


def split(total: int, weights: Mapping[str, float]) -> dict[str, int]:
    """Split `total` whole slots by `weights` (largest remainder; ties by name)."""
    positive = {k: float(w) for k, w in weights.items() if w > 0}
    if total <= 0 or not positive:
        return {k: 0 for k in weights}
    whole = sum(positive.values())
    exact = {k: total * w / whole for k, w in positive.items()}
    shares = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(shares.values())
    for k in sorted(exact, key=lambda k: (shares[k] - exact[k], k))[:left]:
        shares[k] += 1
    return {k: shares.get(k, 0) for k in weights}


def allocate(
    slots: Mapping[str, int], weights: Mapping[str, float], turn: int = 0
) -> dict[str, dict[str, int]]:
    """Share the whole cluster's slots by weight, then place each share on the nodes.

    The cluster's total is split by weight (largest remainder), so every share is within one
    slot of ``total * w / sum(w)`` however the nodes are sized. Each node first gives every
    user the whole part of its own proportional cut; the slots left over on each node go to
    the users still furthest below their cluster share, and among equals in turn, starting
    one user further on each node (and shifted by `turn`), so no user collects every node's
    leftover. No node gives more than its slots.

    Args:
        slots: Node -> whole slots it shares.
        weights: User -> weight (>= 0; weight 0 gets nothing).
        turn: Rotates who wins ties (e.g. a counter of re-splits).

    Returns:
        User -> node -> slots (every user and node present, zeros included).
    """
    users = list(weights)
    result = {u: dict.fromkeys(slots, 0) for u in users}
    positive = [u for u in users if weights[u] > 0]
    total = sum(slots.values())
    if not positive or total <= 0:
        return result
    count = len(positive)
    rank = {u: (i - turn) % count for i, u in enumerate(positive)}
    exact = {u: Fraction(weights[u]) for u in positive}
    whole = sum(exact.values())
    share = {u: total * exact[u] / whole for u in positive}
    quota = {u: math.floor(share[u]) for u in positive}
    left = total - sum(quota.values())
    for u in sorted(positive, key=lambda u: (quota[u] - share[u], rank[u]))[:left]:
        quota[u] += 1
    need = dict(quota)  # what each user still lacks after the whole parts
    spare: dict[str, int] = {}
    for node, size in slots.items():
        given = 0
        for u in positive:
            cut = min(math.floor(size * exact[u] / whole), need[u])
            result[u][node] = cut
            need[u] -= cut
            given += cut
        spare[node] = size - given
    for index, (node, size) in enumerate(spare.items()):
        for _ in range(size):
            u = min(
                (u for u in positive if need[u] > 0),
                key=lambda u: (-need[u], result[u][node] > 0, (rank[u] + index) % count),
            )
            result[u][node] += 1
            need[u] -= 1
    return result


def _weight(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValidationError(f"{what} must be a number >= 0, got {value!r}.")
    if not math.isfinite(value):
        raise ValidationError(f"{what} must be finite, got {value!r}.")
    return float(value)


class Priority(ESL):
    """High-priority tasks before low-priority ones on the same nodes (the paper's trick).

    Every node gets `levels` units. High tasks request 1 unit; low tasks request all of
    them, so a low task starts only on a node where no high task runs, and a high task waits
    while a low task runs there. There is no preemption: a running low task is never
    interrupted.

    Args:
        backend: The backend (default: the current one).
        levels: Units per node: also the most high tasks one node runs at once.
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "prio"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        levels: int = 1000,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
    ) -> None:
        validate_count(levels, what="levels", low=2)
        super().__init__(backend, name=name)
        self.levels = levels
        self.unit = self.label("unit")
        if nodes is None:  # every alive node: one bulk call, no cluster read
            self.nodes = self.set_resources({self.unit: levels}, EVERY_NODE)
        else:
            self.nodes = tuple(node_ids(self.backend, nodes))
            self.set_resources({self.unit: levels}, self.nodes)
        source = self.source
        self.high = Bound(self, {self.unit: 1}, f"{source}.high")
        self.low = Bound(
            self,
            {self.unit: levels},
            f"{source}.low",
            [lambda names: SpreadAtMost(names, source=f"{source}.low", per_node=1)],
        )

    def constraint(self) -> Constraint:
        return self.high.constraint()


class WeightedFairQueue(ESL):
    """Per-queue resources whose per-node capacities follow the queues' weights.

    The cluster's slots (each node's `slots`, summed) are split among the queues by weight
    (whole units, largest remainder), and each queue's share is placed on the nodes (see
    `allocate`); a queue's tasks request one unit of its label, so at most its per-node
    capacity of them run on a node at once.

    Args:
        weights: Queue name -> weight.
        slots_per_node: Units per node to share (default: each node's CPU count).
        nodes: Node ids or a selector (default: every alive node).
        backend: The backend (default: the current one).
        name: Used in labels and explanations.
    """

    kind = "wfq"

    def __init__(
        self,
        weights: Mapping[str, float],
        *,
        slots_per_node: int | None = None,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        backend: Backend | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(weights, Mapping) or not weights:
            raise ValidationError("weights must be a non-empty mapping of queue -> weight.")
        checked = {str(q): _weight(w, f"weight of {q!r}") for q, w in weights.items()}
        super().__init__(backend, name=name)
        self.nodes = tuple(node_ids(self.backend, nodes))
        self.slots = _slots(self.backend.get_cluster_state(), self.nodes, slots_per_node)
        self.weights: dict[str, float] = {}
        self.labels: dict[str, str] = {}
        self._turn = 0  # re-splits so far: rotates who wins ties
        for queue, weight in checked.items():
            self.labels[queue] = self.label(f"q-{queue}")
            self.weights[queue] = weight
        self._apply()

    def _apply(self) -> None:
        self._turn += 1
        for queue, caps in allocate(self.slots, self.weights, self._turn).items():
            for node, cap in caps.items():
                self.set_resource(self.labels[queue], cap, node)

    def shares(self) -> dict[str, dict[str, float]]:
        """Queue -> node -> capacity now."""
        ledger = self.ledger()
        return {q: dict(ledger.get(label, {})) for q, label in self.labels.items()}

    def set_weight(self, queue: str, weight: float) -> None:
        """Change (or, for a new name, add) a queue's weight; capacities follow."""
        self._check_open()
        weight = _weight(weight, f"weight of {queue!r}")
        if queue not in self.labels:
            self.labels[queue] = self.label(f"q-{queue}")
        self.weights[queue] = weight
        self._apply()

    def queue(self, queue: str) -> Bound:
        """The policy for tasks of `queue`."""
        if queue not in self.labels:
            raise ValidationError(f"no queue {queue!r}; known: {sorted(self.labels)}.")
        source = f"{self.source}.queue({queue!r})"
        cap = int(max(self.shares()[queue].values(), default=0))
        intents = [lambda names: SpreadAtMost(names, source=source, per_node=cap)] if cap else []
        return Bound(self, {self.labels[queue]: 1}, source, intents)


class FairShare(ESL):
    """Hierarchical fair sharing: users' cluster-wide shares follow their weights.

    The cluster's slots (each node's `slots`, summed) are split among the current users by
    weight, within one slot of exact, and each share is placed on the nodes (see
    `allocate`); a user's tasks request one unit of the user's label. `create_user` and
    `remove_user` re-split at once. A child ESL (`child(user)`) is restricted to the nodes
    and units its parent grants that user, and its users' tasks also request the parent
    user's unit, so the parent's share bounds them.

    Args:
        backend: The backend (default: the current one).
        slots_per_node: Units per node to share: an int, a node -> int mapping, or None
            for each node's CPU count.
        nodes: Node ids or a selector (default: every alive node).
        name: Used in labels and explanations.
    """

    kind = "fair"

    def __init__(
        self,
        backend: Backend | None = None,
        *,
        slots_per_node: int | Mapping[str, int] | None = None,
        nodes: Iterable[str] | NodeSpecLike | None = None,
        name: str | None = None,
        _parent: tuple[FairShare, str] | None = None,
    ) -> None:
        super().__init__(backend, name=name)
        self.nodes = tuple(node_ids(self.backend, nodes))
        self.slots = _slots(self.backend.get_cluster_state(), self.nodes, slots_per_node)
        self.weights: dict[str, float] = {}
        self.labels: dict[str, str] = {}
        self.parent = _parent
        self.children: dict[str, FairShare] = {}
        self._turn = 0  # re-splits so far: rotates who wins ties

    def create_user(self, user: str, weight: float = 1.0) -> Bound:
        """Add a user (or change its weight); every user's share is re-split.

        Returns:
            The policy for the user's tasks (same as `user(user)`).
        """
        self._check_open()
        if not isinstance(user, str) or not user:
            raise ValidationError(f"user must be a non-empty string, got {user!r}.")
        weight = _weight(weight, f"weight of {user!r}")
        self.labels.setdefault(user, self.label(f"u-{user}"))
        self.weights[user] = weight
        self._apply()
        return self.user(user)

    def remove_user(self, user: str) -> None:
        """Remove a user: its label goes, the others' shares grow. Its running tasks finish."""
        self._check_open()
        if user not in self.labels:
            raise ValidationError(f"no user {user!r}; known: {sorted(self.labels)}.")
        child = self.children.pop(user, None)
        if child is not None:
            child.close()
        del self.weights[user]
        self.forget(self.labels.pop(user))
        self._apply()

    def user(self, user: str) -> Bound:
        """The policy for `user`'s tasks."""
        if user not in self.labels:
            raise ValidationError(f"no user {user!r}; create it with create_user().")
        also = None
        if self.parent is not None:
            parent, parent_user = self.parent
            also = parent.user(parent_user)
        nodes = tuple(n for n, cap in self.shares()[user].items() if cap > 0)
        source = f"{self.source}.user({user!r})"
        return Bound(
            self,
            {self.labels[user]: 1},
            source,
            [lambda names: PinnedTo(names, source=source, nodes=nodes)] if nodes else [],
            also=also,
        )

    def shares(self) -> dict[str, dict[str, float]]:
        """User -> node -> capacity now."""
        ledger = self.ledger()
        return {u: dict(ledger.get(label, {})) for u, label in self.labels.items()}

    def child(self, user: str, *, name: str | None = None) -> FairShare:
        """A FairShare ESL over what this one grants `user`: the units granted on each of
        this ESL's nodes (re-splits here re-split the child too)."""
        self._check_open()
        if user not in self.labels:
            raise ValidationError(f"no user {user!r}; create it with create_user().")
        if user in self.children:
            return self.children[user]
        granted = {n: int(c) for n, c in self.shares()[user].items() if c > 0}
        if not granted:
            raise ValidationError(f"user {user!r} has no share on any node; raise its weight.")
        child = FairShare(
            self.backend,
            slots_per_node=granted,
            # every node of the parent: a re-split may move the user's units between nodes
            nodes=list(self.nodes),
            name=name or f"{self.name}.{user}",
            _parent=(self, user),
        )
        self.children[user] = child
        return child

    def _apply(self) -> None:
        self._turn += 1
        for user, caps in allocate(self.slots, self.weights, self._turn).items():
            for node, cap in caps.items():
                self.set_resource(self.labels[user], cap, node)
        for user, child in self.children.items():
            child._rebase({n: int(c) for n, c in self.shares()[user].items()})

    def _rebase(self, granted: Mapping[str, int]) -> None:
        self.slots = {n: int(granted.get(n, 0)) for n in self.nodes}
        self._apply()

    def _eligible_nodes(self, state: ClusterState) -> list[str]:
        return [n for n in self.nodes if n in state.nodes]

    def _on_close(self) -> None:
        for child in list(self.children.values()):
            child.close()


def _slots(
    state: ClusterState, nodes: Iterable[str], slots: int | Mapping[str, int] | None
) -> dict[str, int]:
    result: dict[str, int] = {}
    for node in nodes:
        if slots is None:
            value: Any = int(state.node(node).total.get("CPU", 0))
        elif isinstance(slots, Mapping):
            value = slots.get(node, 0)
        else:
            value = slots
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError(f"slots_per_node must be whole numbers >= 0, got {value!r}.")
        result[node] = value
    return result
