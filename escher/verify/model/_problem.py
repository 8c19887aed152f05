"""The integer placement problem the stages of `build` produce, and the scenario constraints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from escher.verify.model._statement import Statement, fmt
from escher.verify.model._topology import Domains

CONC = "conc"

#: An integer capacity vector entry; None means unbounded (its statement was dropped).
Cap = int | None


@dataclass
class Item:
    """Replicas that are placed together on one node, `mult` identical copies of them.

    Attributes:
        members: (unit name, replicas) carried by one copy.
        mult: Number of identical copies (each copy goes to some node).
        loads: Group id -> per-resource load of one copy in that simultaneous group.
        single: Per-resource largest request of a replica that only has to fit alone.
        creates: Resource index -> capacity a copy creates on its node.
        tags: Limit id -> replicas of that limit's tasks in one copy.
        allowed: Node indices a copy may use (None = any).
        stmts: Statement ids this item depends on.
        allowed_stmts: Statement ids behind `allowed`.
    """

    members: list[tuple[str, int]]
    mult: int
    loads: dict[str, tuple[int, ...]]
    single: tuple[int, ...]
    creates: dict[int, int]
    tags: dict[str, int]
    allowed: frozenset[int] | None
    stmts: frozenset[str]
    allowed_stmts: frozenset[str] = frozenset()
    nonzero: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.nonzero:
            self.nonzero = tuple(
                r
                for r in range(len(self.single))
                if self.single[r] or any(load[r] for load in self.loads.values())
            )

    def shape(self) -> tuple[Any, ...]:
        """Key of the class of interchangeable items."""
        return (
            tuple(sorted(self.loads.items())),
            self.single,
            tuple(sorted(self.creates.items())),
            tuple(sorted(self.tags.items())),
            self.allowed,
        )

    def need(self, r: int) -> int:
        """The most of resource `r` one copy needs on its node at any instant."""
        return max([self.single[r], *(load[r] for load in self.loads.values())])


@dataclass
class NodeType:
    """Interchangeable nodes: same capacities, same statements, same pin sets and domains."""

    name: str
    nodes: list[int]
    cap: tuple[Cap, ...]
    held: tuple[int, ...]
    capsrc: tuple[str, ...]


@dataclass
class Problem:
    """An integer placement problem with every constraint tracked by a statement id."""

    resources: list[str]
    node_ids: list[str]
    cap: list[tuple[Cap, ...]]
    held: list[tuple[int, ...]]
    node_type: list[int]
    types: list[NodeType]
    items: list[Item]
    groups: dict[str, str | None]
    limits: dict[str, tuple[int, str | None]]
    statements: dict[str, Statement]
    created: frozenset[int]
    units: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    scales: list[int] = field(default_factory=list)
    domains: dict[str, Domains] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def totals(self) -> list[int]:
        """Per resource, the capacity of all nodes together (unbounded counts as 0), >= 1."""
        if "totals" not in self.memo:
            self.memo["totals"] = [
                sum((c[r] or 0) * n for c, n in self._caps_by_type()) or 1
                for r in range(len(self.resources))
            ]
        return list(self.memo["totals"])

    def _caps_by_type(self) -> list[tuple[tuple[Cap, ...], int]]:
        """(capacities, nodes with them), one pair per node type: sums over the nodes cost
        types x resources, not nodes x resources (10,000 nodes are a few types)."""
        if sum(len(t.nodes) for t in self.types) == len(self.cap):
            return [(t.cap, len(t.nodes)) for t in self.types]
        return [(c, 1) for c in self.cap]  # pragma: no cover - a problem built without types

    def type_spread(self, t: int) -> float:
        """Sum over the resources type `t` has of 1 / (nodes that have it): how much of what
        is rare a node of this type holds."""
        key = f"spread:{t}"
        if key not in self.memo:
            holders = self.holders()
            self.memo[key] = sum(
                1.0 / holders[r] for r, c in enumerate(self.types[t].cap) if c is None or c
            )
        return float(self.memo[key])

    def type_size(self, t: int) -> float:
        """Sum of type `t`'s capacities, each relative to its total."""
        key = f"size:{t}"
        if key not in self.memo:
            totals = self.totals()
            self.memo[key] = sum(
                (totals[r] if c is None else c) / totals[r] for r, c in enumerate(self.types[t].cap)
            )
        return float(self.memo[key])

    def holders(self) -> list[int]:
        """Per resource, how many nodes have some of it (unbounded counts), >= 1."""
        if "holders" not in self.memo:
            self.memo["holders"] = [
                sum(n for c, n in self._caps_by_type() if c[r] is None or c[r]) or 1
                for r in range(len(self.resources))
            ]
        return list(self.memo["holders"])

    def cap_stmt(self, node: int, r: int) -> str:
        """The statement that bounds resource `r` on `node`."""
        return self.types[self.node_type[node]].capsrc[r]

    def quantity(self, r: int, value: int | None) -> str:
        """An integer amount of resource `r` as a short decimal."""
        return fmt(value, self.scales[r] if self.scales else 1)


@dataclass
class Mods:
    """Extra scenario constraints used by intent proofs (not user statements).

    Attributes:
        split: Task -> number of replicas to split off as single-replica units
            (named ``task#0``, ``task#1``...).
        merge: Groups of unit names forced onto one node.
        apart: Pairs of unit names forced onto different nodes.
        only: Unit name -> the node ids it may use.
        drop_intents: Ignore every intent except gangs (placements the resources allow).
        require: Preferences (intents with a weight) to treat as requirements.
        domain_apart: (key, unit a, unit b): the two units in different domains of key.
        domain_merge: (key, units): the units all in one domain of key.
        excess: (key, tasks, (domain a, domain b), k): replicas of tasks in domain a exceed
            those in domain b by at least k.
    """

    split: dict[str, int] = field(default_factory=dict)
    merge: list[tuple[str, ...]] = field(default_factory=list)
    apart: list[tuple[str, str]] = field(default_factory=list)
    only: dict[str, frozenset[str]] = field(default_factory=dict)
    drop_intents: bool = False
    require: frozenset[int] = frozenset()
    domain_apart: list[tuple[str, str, str]] = field(default_factory=list)
    domain_merge: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    excess: list[tuple[str, tuple[str, ...], tuple[int, int], int]] = field(default_factory=list)


@dataclass(frozen=True)
class Rule:
    """A constraint over the domains of a key, on the items tagged `tag`.

    Attributes:
        kind: ``together`` (all in one domain), ``limit`` (at most `value` per domain),
            ``even`` (max minus min count over all domains at most `value`) or ``excess``
            (domain pair[0] holds at least `value` more than domain pair[1]).
        key: The topology key (`_topology.EACH_NODE`: every node its own domain).
        value: The limit or skew.
        stmt: The statement it comes from (None for a scenario constraint).
        tag: The item tag that counts replicas under it.
    """

    kind: str
    key: str
    value: int
    stmt: str | None
    tag: str
    pair: tuple[int, int] = (-1, -1)


class Timeout(Exception):
    """The deadline passed."""


def type_total(p: Problem, r: int) -> int | None:
    """The capacity of resource `r` over all nodes, None if some node has it unbounded."""
    caps = [(nt.cap[r], len(nt.nodes)) for nt in p.types]
    if any(c is None for c, _ in caps):
        return None
    return sum(c * n for c, n in caps if c is not None)
