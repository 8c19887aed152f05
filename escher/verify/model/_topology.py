"""Topology domains: which alive nodes form the domains of a topology key.

A domain of key K is the set of alive nodes sharing one value of node label K, or of the
plan's own grouping K (`Plan.add_topology`, which overrides the label). Tasks under an intent
with key K only run on nodes that belong to a domain of K. ``SpreadEvenly`` with key None
makes every alive node its own domain.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from escher.core.cluster import Node
from escher.core.plan import Intent, Plan, SpreadEvenly

#: The pseudo key under which every node is its own domain (SpreadEvenly without a key).
EACH_NODE = ""


@dataclass(frozen=True)
class Domains:
    """The domains of one key over a list of nodes.

    Attributes:
        key: The topology key.
        names: Domain names, sorted.
        of: Node index -> domain index, for nodes that belong to a domain.
    """

    key: str
    names: tuple[str, ...]
    of: Mapping[int, int]

    def members(self) -> list[list[int]]:
        """Node indices of each domain."""
        out: list[list[int]] = [[] for _ in self.names]
        for n, d in sorted(self.of.items()):
            out[d].append(n)
        return out


def topology_key(intent: Intent) -> str | None:
    """The intent's domain key: None for per-node intents; `EACH_NODE` for a SpreadEvenly
    without a key."""
    key = getattr(intent, "topology_key", None)
    if key is None and isinstance(intent, SpreadEvenly):
        return EACH_NODE
    return key if isinstance(key, str) else None


def node_domain(
    plan_topologies: Mapping[str, Mapping[str, str]], node: Node, key: str
) -> str | None:
    """The domain of `node` under `key` (None: the node is in no domain of that key)."""
    if key == EACH_NODE:
        return node.id
    grouping = plan_topologies.get(key)
    if grouping is not None:
        return grouping.get(node.id)
    value = node.labels.get(key)
    return None if value is None else str(value)


def domains_for(plan: Plan, nodes: Sequence[Node], key: str) -> Domains:
    """The domains of `key` over `nodes` (alive nodes, in index order)."""
    values = [node_domain(plan.topologies, n, key) for n in nodes]
    names = tuple(sorted({v for v in values if v is not None}))
    pos = {name: i for i, name in enumerate(names)}
    return Domains(key, names, {k: pos[v] for k, v in enumerate(values) if v is not None})


def domains_of(
    plan: Plan,
    nodes: Sequence[Node],
    intents: Sequence[tuple[int, Intent]],
    on: Callable[[str], bool],
    extra: Iterable[str] = (),
) -> dict[str, Domains]:
    """Domains of every key used by an active intent (and the `extra` keys)."""
    keys = {
        key
        for i, intent in intents
        if on(f"intent:{i}") and (key := topology_key(intent)) is not None
    } | set(extra)
    return {key: domains_for(plan, nodes, key) for key in sorted(keys)}
