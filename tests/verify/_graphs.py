"""The set-up the graph engine's tests share: a bench instance built into a problem and its
conflict graph, and the node of each vertex in a placement."""

from __future__ import annotations

from collections import Counter

from escher.core.cluster import ClusterState
from escher.verify.engines._graph import Graph, conflict_graph
from escher.verify.model import Problem, build


def built(plan_cluster: tuple[object, object, object]) -> tuple[Problem, Graph]:
    """The problem of a generator's (plan, cluster, expected) and its conflict graph."""
    plan, cluster, _ = plan_cluster
    p = build(plan, ClusterState.from_dict(cluster))  # type: ignore[arg-type]
    g = conflict_graph(p)
    assert g is not None
    return p, g


def nodes_of_vertices(g: Graph, placement: list[list[int]]) -> list[int]:
    """The node of each vertex of `g` (its item's copies in order) in `placement`."""
    copy: Counter[int] = Counter()
    at = []
    for i in g.item:
        at.append(placement[i][copy[i]])
        copy[i] += 1
    return at


def proper(g: Graph, placement: list[list[int]]) -> bool:
    """No two neighbours of `g` on one node."""
    at = nodes_of_vertices(g, placement)
    return all(at[u] != at[w] for u, w in g.why)
