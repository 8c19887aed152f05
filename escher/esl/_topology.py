"""Topology domains: which nodes form a zone, a rack, or any grouping, and how an ESL puts a
label on every node of one domain.

A `Topology` groups the alive nodes of a `ClusterState` into domains: by the value of a node
label (``Topology("zone")``: the nodes labelled ``zone=a`` are domain ``a``) or by a mapping
escher defines (``Topology("rack", {"n1": "r1", "n2": "r1", "n3": "r2"})``). Nodes without a
domain belong to none; tasks under a topology policy never run there.

An ESL steers a task into a domain with a label present on every node of that domain and
nowhere else (`DomainLabels`): one bulk write per domain, made the first time the domain is
used; for a node-label topology the write is a label selector, so `ESL.recover()` also puts
the label on nodes that join the domain later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.nodespec import NodeSpec
from escher.core.resources import MAX_CAPACITY, Resources
from escher.esl._esl import ESL


class Topology:
    """How nodes group into domains.

    Args:
        key: The node label whose value names a node's domain (e.g. ``"zone"``), or the
            name of an escher-defined grouping.
        domains: For an escher-defined grouping: node id -> domain (overrides the label).

    Raises:
        ValidationError: an empty key, or a grouping that is not node id -> domain strings.
    """

    def __init__(self, key: str, domains: Mapping[str, str] | None = None) -> None:
        if not isinstance(key, str) or not key:
            raise ValidationError(f"topology key must be a non-empty string, got {key!r}.")
        if domains is not None and (
            not isinstance(domains, Mapping)
            or not all(
                isinstance(k, str) and isinstance(v, str) and k and v for k, v in domains.items()
            )
        ):
            raise ValidationError(f"topology {key!r}: domains must map node ids to domain names.")
        self.key = key
        self.mapping = dict(domains) if domains is not None else None

    @classmethod
    def of(cls, value: TopologyLike) -> Topology:
        """A `Topology` from a node label key or a `Topology`."""
        return value if isinstance(value, Topology) else cls(value)

    def __repr__(self) -> str:
        where = "escher-defined" if self.mapping is not None else "node label"
        return f"Topology({self.key!r}, {where})"

    def domain_of(self, node: Node) -> str | None:
        """The domain of `node` (None if it belongs to none)."""
        if self.mapping is not None:
            return self.mapping.get(node.id)
        return node.labels.get(self.key)

    def domains(self, state: ClusterState) -> dict[str, list[str]]:
        """Domain -> its alive nodes (ids in order), domains in name order."""
        found: dict[str, list[str]] = {}
        for nid in sorted(state.nodes):
            node = state.nodes[nid]
            domain = self.domain_of(node) if node.alive else None
            if domain is not None:
                found.setdefault(domain, []).append(nid)
        return dict(sorted(found.items()))

    def selector(self, domain: str) -> dict[str, str] | None:
        """Node labels that select `domain` (None for an escher-defined grouping)."""
        return None if self.mapping is not None else {self.key: domain}

    def plan_topologies(self) -> dict[str, dict[str, str]]:
        """What a `Plan` needs to know of this topology (`Plan.add_topology`)."""
        return {} if self.mapping is None else {self.key: dict(self.mapping)}


def _names(node: object, domain: object) -> bool:
    return isinstance(node, str) and isinstance(domain, str) and bool(node) and bool(domain)


TopologyLike: TypeAlias = "str | Topology"


def copies(request: Resources, available: Mapping[str, float], most: int) -> int:
    """How many copies of `request` fit in `available` (at most `most`)."""
    if not request:
        return most
    fit = min((available.get(r, 0.0) / q for r, q in request.items() if q > 0), default=float(most))
    return max(0, min(most, int(fit + 1e-9)))


def room(
    topology: Topology,
    state: ClusterState,
    request: Resources,
    nodes: Mapping[str, list[str]] | None = None,
) -> dict[str, bool]:
    """Domain -> True if some node of it has `request` available now."""
    domains = topology.domains(state) if nodes is None else nodes
    return {
        d: any(request.fits_in(state.nodes[n].available) for n in members)
        for d, members in domains.items()
    }


class DomainLabels:
    """The labels of one ESL that mark whole domains (one label per domain), written lazily.

    Args:
        esl: The ESL that owns the labels (its ledger records them).
        topology: The domains.
        prefix: Part of the label names (``<prefix>-<domain>``).
    """

    def __init__(self, esl: ESL, topology: Topology, prefix: str) -> None:
        self.esl = esl
        self.topology = topology
        self.prefix = prefix
        self.labels: dict[str, str] = {}  # domain -> label, once written
        self.domain_of_label: dict[str, str] = {}

    def label(self, domain: str, members: list[str]) -> str:
        """The label of `domain`, written on its nodes `members` the first time."""
        label = self.labels.get(domain)
        if label is None:
            label = self.esl.label(f"{self.prefix}-{domain}")
            write_domain(self.esl, {label: MAX_CAPACITY}, self.topology, domain, members)
            self.labels[domain] = label
            self.domain_of_label[label] = domain
        return label


def write_domain(
    esl: ESL,
    capacities: Mapping[str, float],
    topology: Topology,
    domain: str,
    members: list[str],
) -> tuple[str, ...]:
    """Set `capacities` on every node of `domain` (one bulk call for a node-label topology,
    recorded with its selector so recovery extends it to nodes that join)."""
    selector = topology.selector(domain)
    if selector is None:
        return esl.set_resources(capacities, list(members), restorable=False)
    return esl.set_resources(capacities, NodeSpec.with_labels(selector), selector=selector)
