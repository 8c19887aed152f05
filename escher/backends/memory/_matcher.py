"""The resource matcher: which node can take a request right now. Pure data, no threads.

Every resource name keeps an index of the nodes where some of it is available. A placement
looks only at the nodes in the smallest index among the requested names (usually an
ephemeral label held by a handful of nodes), so its cost follows how rare the request is,
not how large the cluster is.

The matcher also records where availability may have grown since the scheduler last looked
(`take_changes`), so the pending queue re-examines only the requests such a change could
unblock instead of every blocked request on every event.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from escher.core.resources import EPSILON, PREDEFINED_RESOURCES, Resources, give_back


class NodeRecord:
    """Mutable bookkeeping of one node."""

    __slots__ = (
        "ephemeral",
        "id",
        "labels",
        "physical",
        "reserved_by",
        "reserved_for",
        "total",
        "used",
    )

    def __init__(self, node_id: str, physical: Resources, labels: Mapping[str, str]) -> None:
        self.id = node_id
        self.physical = physical
        self.labels = dict(labels)
        self.total: dict[str, float] = dict(physical)
        self.used: dict[str, float] = {}
        self.ephemeral: set[str] = set()
        self.reserved_for: Resources | None = None
        self.reserved_by: object = None

    def available(self, name: str) -> float:
        """Free quantity of `name` (never negative)."""
        free = self.total.get(name, 0.0) - self.used.get(name, 0.0)
        return free if free > EPSILON else 0.0

    def available_vector(self) -> dict[str, float]:
        """Free quantity of every resource with some left."""
        return {n: a for n in self.total if (a := self.available(n)) > 0.0}

    def fits(self, request: Resources) -> bool:
        """True if `request` fits in what is free now."""
        total, used = self.total, self.used
        for name, quantity in request.items():
            if total.get(name, 0.0) - used.get(name, 0.0) + EPSILON < quantity:
                return False
        return True

    def could_ever_fit(self, request: Resources) -> bool:
        """True if `request` fits the node's current totals when nothing runs."""
        total = self.total
        return all(total.get(n, 0.0) + EPSILON >= q for n, q in request.items())


class Matcher:
    """Nodes, their free resources, and the per-resource availability index."""

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRecord] = {}
        # name -> ordered set (dict) of node ids with some of `name` free
        self._free: dict[str, dict[str, None]] = {}
        self._physical_names: dict[str, int] = {}  # name -> number of nodes defining it
        # name -> ordered set of node ids whose total of `name` is > 0
        self._held: dict[str, dict[str, None]] = {}
        # where availability may have grown since `take_changes()` (see PendingQueue)
        self._changed_nodes: set[str] = set()
        self._changed_names: set[str] = set()
        self._membership_changed = False
        # request -> candidates(request); valid until a total changes (set_capacity, nodes)
        self._candidates: dict[Resources, list[str]] = {}

    # --- membership ----------------------------------------------------------------------
    def add_node(self, node_id: str, physical: Resources, labels: Mapping[str, str]) -> None:
        """Add an idle node with node-defined resources `physical`."""
        record = NodeRecord(node_id, physical, labels)
        self.nodes[node_id] = record
        for name in physical:
            self._physical_names[name] = self._physical_names.get(name, 0) + 1
            self._free.setdefault(name, {})[node_id] = None
            self._held.setdefault(name, {})[node_id] = None
        self._membership_changed = True
        self._candidates.clear()

    def remove_node(self, node_id: str) -> NodeRecord:
        """Drop a node and everything on it."""
        record = self.nodes.pop(node_id)
        for name in record.total:
            self._unindex(name, node_id)
            self._unhold(name, node_id)
        for name in record.physical:
            left = self._physical_names[name] - 1
            if left:
                self._physical_names[name] = left
            else:
                del self._physical_names[name]
        self._changed_nodes.add(node_id)  # tasks waiting on it look elsewhere
        self._candidates.clear()
        return record

    def physical_names(self) -> set[str]:
        """Every resource name some node defines itself."""
        return set(self._physical_names)

    def is_physical(self, name: str) -> bool:
        """True if some node defines `name` itself."""
        return name in self._physical_names

    # --- capacities ----------------------------------------------------------------------
    def set_capacity(self, node_id: str, label: str, capacity: float) -> None:
        """Set (or with 0, delete) ephemeral `label` on a node."""
        record = self.nodes[node_id]
        if capacity > 0.0:
            record.total[label] = capacity
            record.ephemeral.add(label)
            self._held.setdefault(label, {})[node_id] = None
            self._changed_names.add(label)
        else:
            record.total.pop(label, None)
            record.ephemeral.discard(label)
            self._unhold(label, node_id)
        self._changed_nodes.add(node_id)
        self._candidates.clear()
        self._reindex(record, label)

    def allocate(self, node_id: str, request: Resources) -> None:
        """Take `request` from a node's free resources."""
        record = self.nodes[node_id]
        used = record.used
        for name, quantity in request.items():
            used[name] = used.get(name, 0.0) + quantity
            if record.available(name) <= 0.0:
                self._unindex(name, node_id)

    def release(self, node_id: str, request: Resources) -> None:
        """Give `request` back to a node (no-op for a node that has left)."""
        record = self.nodes.get(node_id)
        if record is None:
            return
        give_back(record.used, request)
        for name in request:
            self._reindex(record, name)
        self._changed_nodes.add(node_id)

    # --- matching ------------------------------------------------------------------------
    def find(self, request: Resources, owner: object = None) -> str | None:
        """A node that can take `request` now, or None.

        Looks only at nodes in the smallest availability index among the requested names.
        Nodes reserved for another owner are skipped when the placement would touch a
        resource that owner is waiting for.
        """
        if not request:
            return next(iter(self.nodes), None)
        candidates: dict[str, None] | None = None
        for name in request:
            index = self._free.get(name)
            if not index:
                return None
            if candidates is None or len(index) < len(candidates):
                candidates = index
        assert candidates is not None
        nodes = self.nodes
        for node_id in candidates:
            record = nodes[node_id]
            reserved = record.reserved_for
            if record.fits(request) and (
                reserved is None
                or record.reserved_by is owner
                or not any(name in reserved for name in request)
            ):
                return node_id
        return None

    def could_ever_fit(self, request: Resources) -> bool:
        """True if some node could take `request` when idle (ephemeral labels included)."""
        return any(r.could_ever_fit(request) for r in self.nodes.values())

    def physically_feasible(self, request: Resources) -> bool:
        """True if some node defines enough of every node-defined resource in `request`.

        Predefined names (CPU, GPU, memory, ...) count even when no node has them; other
        names no node defines are ephemeral (now or later) and do not count here.
        """
        physical = {
            n: q
            for n, q in request.items()
            if n in self._physical_names or n in PREDEFINED_RESOURCES
        }
        if not physical:
            return bool(self.nodes)
        return any(
            all(r.physical.get(n, 0.0) + EPSILON >= q for n, q in physical.items())
            for r in self.nodes.values()
        )

    def reserve(self, node_id: str, request: Resources, owner: object) -> None:
        """Keep other owners off the resources of `request` on this node until unreserved."""
        record = self.nodes[node_id]
        record.reserved_for, record.reserved_by = request, owner

    def unreserve(self, node_id: str) -> None:
        """Drop the node's reservation, if it still exists."""
        record = self.nodes.get(node_id)
        if record is not None:
            if record.reserved_for is not None:
                self._changed_nodes.add(node_id)
            record.reserved_for = record.reserved_by = None

    def best_node_for(self, request: Resources) -> str | None:
        """The unreserved node whose totals can hold `request` and that is closest to fitting."""
        best: tuple[float, str] | None = None
        for record in self.nodes.values():
            if record.reserved_for is not None or not record.could_ever_fit(request):
                continue
            missing = sum(max(0.0, q - record.available(n)) for n, q in request.items())
            if best is None or missing < best[0]:
                best = (missing, record.id)
        return None if best is None else best[1]

    def candidates(self, request: Resources) -> list[str]:
        """Ids of the nodes whose totals could hold `request` (when nothing runs there)."""
        known = self._candidates.get(request)
        if known is None:
            known = self._candidates[request] = self._find_candidates(request)
        return known

    def _find_candidates(self, request: Resources) -> list[str]:
        pool: Iterable[str] = self.nodes
        size = len(self.nodes)
        for name in request:
            held = self._held.get(name)
            if not held:
                return []
            if len(held) < size:
                pool, size = held, len(held)
        nodes = self.nodes
        return [nid for nid in pool if nodes[nid].could_ever_fit(request)]

    def take_changes(self) -> tuple[set[str], set[str], bool]:
        """Where availability may have grown since the last call, and reset.

        Returns:
            (nodes whose free resources grew, lost a reservation or left; ephemeral labels
            created or resized on some node; True if a node joined).
        """
        changes = (self._changed_nodes, self._changed_names, self._membership_changed)
        self._changed_nodes, self._changed_names = set(), set()
        self._membership_changed = False
        return changes

    def __iter__(self) -> Iterator[NodeRecord]:
        return iter(self.nodes.values())

    # --- index upkeep --------------------------------------------------------------------
    def _reindex(self, record: NodeRecord, name: str) -> None:
        if record.available(name) > 0.0:
            self._free.setdefault(name, {})[record.id] = None
        else:
            self._unindex(name, record.id)

    def _unhold(self, name: str, node_id: str) -> None:
        _discard(self._held, name, node_id)

    def _unindex(self, name: str, node_id: str) -> None:
        _discard(self._free, name, node_id)


def _discard(index: dict[str, dict[str, None]], name: str, node_id: str) -> None:
    """Drop `node_id` from `index[name]`, and `name` once no node is left under it."""
    nodes = index.get(name)
    if nodes is not None:
        nodes.pop(node_id, None)
        if not nodes:
            del index[name]
