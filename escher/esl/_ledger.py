"""The ledger of an ESL: every ephemeral resource it created, and how to delete or restore it."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from escher.backends.base import Backend
from escher.core.errors import EscherError
from escher.core.nodespec import NodeSpec
from escher.core.resources import Resources

#: Every alive node (an empty vector of available resources, which every node has).
EVERY_NODE = NodeSpec.with_available({})


@dataclass
class LedgerEntry:
    """One owned label: capacity per node, and how to re-place it after a node failure.

    Attributes:
        capacities: Node -> capacity, for the nodes where it is known to exist.
        need: After a node failure the label may move to a node whose available resources
            cover this (None: any node).
        restorable: False if a lost copy cannot move (e.g. data that lived there).
        why_not: The reason reported when it is not restorable.
        selector: Node labels that define where it lives (a topology domain): recovery
            puts it on every alive node carrying them, instead of moving a lost copy.
    """

    capacities: dict[str, float] = field(default_factory=dict)
    need: Resources | None = None
    restorable: bool = True
    why_not: str = ""
    selector: Mapping[str, str] | None = None
    #: The capacity a domain's label has on each of its nodes (kept when they all leave).
    domain_capacity: float = 0.0


@dataclass(frozen=True)
class RecoveryReport:
    """What `ESL.recover()` did.

    Attributes:
        restored: (label, lost node, new node) for each replayed resource.
        lost: (label, lost node, reason) for each resource that could not be restored.
    """

    restored: tuple[tuple[str, str, str], ...] = ()
    lost: tuple[tuple[str, str, str], ...] = ()

    @property
    def complete(self) -> bool:
        """True if everything was restored."""
        return not self.lost


class Ledger:
    """Label -> `LedgerEntry`, safe to use from several threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, LedgerEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, label: object) -> bool:
        return label in self._entries

    def own(
        self,
        label: str,
        *,
        need: Resources | None = None,
        restorable: bool | None = None,
        why_not: str = "",
        selector: Mapping[str, str] | None = None,
    ) -> LedgerEntry:
        """The entry of `label` (a new one if needed), with the given fields updated."""
        with self._lock:
            entry = self._entries.setdefault(label, LedgerEntry())
            if need is not None:
                entry.need = need
            if restorable is not None:
                entry.restorable = restorable
            if selector is not None:
                entry.selector = dict(selector)
            entry.why_not = why_not or entry.why_not
            return entry

    def put(self, label: str, nodes: Iterable[str], capacity: float, *, create: bool) -> None:
        """`label` now has `capacity` on `nodes` (0: it is gone there).

        Without `create`, a label the ledger does not own is ignored (a composed policy's).
        """
        with self._lock:
            entry = self._entries.get(label)
            if entry is None:
                if not create:
                    return
                entry = self._entries[label] = LedgerEntry()
            if entry.selector is not None and capacity > 0:
                entry.domain_capacity = capacity
            for node in nodes:
                if capacity > 0:
                    entry.capacities[node] = capacity
                else:
                    entry.capacities.pop(node, None)

    def snapshot(self) -> dict[str, dict[str, float]]:
        """label -> node -> capacity (a copy)."""
        with self._lock:
            return {label: dict(e.capacities) for label, e in self._entries.items()}

    def entries(self, labels: Iterable[str]) -> dict[str, LedgerEntry]:
        """Copies of the entries of those of `labels` the ledger owns."""
        with self._lock:
            return {
                label: dataclasses.replace(e, capacities=dict(e.capacities))
                for label in labels
                if (e := self._entries.get(label)) is not None
            }

    def pop(self, label: str) -> LedgerEntry | None:
        """Drop `label` from the ledger and return its entry (None if not owned)."""
        with self._lock:
            return self._entries.pop(label, None)

    def take_all(self) -> dict[str, LedgerEntry]:
        """Empty the ledger and return what it held."""
        with self._lock:
            entries, self._entries = self._entries, {}
            return entries

    def domain_labels(self) -> list[tuple[str, dict[str, str], float]]:
        """(label, selector, capacity) of every label that lives on a topology domain."""
        with self._lock:
            return [
                (label, dict(e.selector), e.domain_capacity)
                for label, e in self._entries.items()
                if e.selector is not None and e.domain_capacity > 0
            ]

    def take_lost(self, alive: set[str]) -> list[tuple[str, str, float, LedgerEntry]]:
        """(label, node, capacity, entry) of every copy on a node not in `alive`; they are
        dropped from the entries."""
        with self._lock:
            lost = [
                (label, node, cap, entry)
                for label, entry in self._entries.items()
                for node, cap in entry.capacities.items()
                if node not in alive
            ]
            for _label, node, _, entry in lost:
                entry.capacities.pop(node, None)
            return lost


def delete_everywhere(backend: Backend, entries: Mapping[str, LedgerEntry]) -> list[str]:
    """Delete every label of `entries` wherever it exists: the nodes the entries know and
    those the cluster state shows holding it, one bulk write per node.

    Returns:
        The problems, as text (empty when all went well).
    """
    if not entries:
        return []
    try:
        state = backend.get_cluster_state()
    except EscherError as exc:
        return [f"cannot read the cluster state: {exc}"]
    by_node: dict[str, dict[str, float]] = {}
    for label, entry in entries.items():
        for node in set(entry.capacities) | set(state.holding(label)):
            if node in state.nodes:
                by_node.setdefault(node, {})[label] = 0
    alive = {nid for nid, n in state.nodes.items() if n.alive}
    same = {frozenset(labels) for labels in by_node.values()}
    if set(by_node) == alive and len(same) == 1:  # the same labels on every node: one call
        try:
            backend.set_resources(next(iter(by_node.values())), EVERY_NODE)
        except EscherError as exc:
            return [f"{', '.join(sorted(next(iter(same))))}: {exc}"]
        return []
    errors: list[str] = []
    for node in sorted(by_node):
        try:
            backend.set_resources(by_node[node], node)
        except EscherError as exc:
            errors.append(f"{', '.join(sorted(by_node[node]))} on {node}: {exc}")
    return errors


def delete_all(backend: Backend, ledger: Ledger) -> list[str]:
    """Empty `ledger` and delete everything it held (see `delete_everywhere`)."""
    return delete_everywhere(backend, ledger.take_all())
