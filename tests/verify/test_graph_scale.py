"""The graph engine at 1,000 tasks: the clique search and belief propagation + Tabucol on
the bench's three colouring constructions, and the exact clique search against brute force."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.verify import Verdict, check_placement, verify
from escher.verify.engines._graph import Graph, max_clique, propagated_colour
from escher.verify.engines._propagation import beliefs_colouring
from tests.verify._bench import bench
from tests.verify._graphs import built, proper


@pytest.mark.parametrize(
    "make",
    [
        lambda: bench().colouring(1000, 4, 5000, 5, 31),
        lambda: bench().colouring_balanced(1000, 4, 5000, 5, 32),
    ],
)
def test_a_small_clique_among_a_thousand_tasks_is_infeasible(make: object) -> None:
    plan, cluster, expected = make()  # type: ignore[operator]
    result = verify(plan, ClusterState.from_dict(cluster), timeout=120, check_intents=False)
    assert not expected and result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "clique of separations"


@pytest.mark.parametrize("seed", [9, 12])
def test_beliefs_and_tabucol_colour_a_planted_thousand_task_graph(seed: int) -> None:
    p, g = built(bench().colouring(1000, 4, 5000, 0, seed))
    found = None
    for s in range(4):  # a few starts, as the engine takes them
        found = propagated_colour(p, g, time.monotonic() + 120, None, s)
        if found is not None:
            break
    assert found is not None
    assert proper(g, found)


def test_a_planted_thousand_task_colouring_is_feasible_with_a_checked_witness() -> None:
    plan, cluster, expected = bench().colouring(1000, 4, 5000, 0, 9)
    state = ClusterState.from_dict(cluster)
    result = verify(plan, state, timeout=120, check_intents=False)
    assert expected and result.status is Verdict.FEASIBLE
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []


def test_beliefs_respect_the_colours_a_vertex_may_take() -> None:
    edges = [(0, 1), (1, 2), (2, 0), (2, 3)]
    allowed = [[0], [1, 2], [0, 1, 2], [2]]
    got = beliefs_colouring(edges, allowed, 3, time.monotonic() + 30, 0)
    assert got is not None
    assert all(c in allowed[v] for v, c in enumerate(got))


@st.composite
def small_graphs(draw: st.DrawFn) -> Graph:
    n = draw(st.integers(1, 11))
    pairs = list(itertools.combinations(range(n), 2))
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True)) if pairs else []
    adj: list[set[int]] = [set() for _ in range(n)]
    for u, w in chosen:
        adj[u].add(w)
        adj[w].add(u)
    return Graph(list(range(n)), adj, {e: None for e in chosen})


@settings(
    max_examples=400, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(small_graphs())
def test_the_clique_search_finds_a_largest_clique(g: Graph) -> None:
    n = len(g.item)
    largest = max(
        (
            len(c)
            for k in range(1, n + 1)
            for c in itertools.combinations(range(n), k)
            if all(w in g.adj[u] for u, w in itertools.combinations(c, 2))
        ),
        default=0,
    )
    clique = max_clique(g, time.monotonic() + 30)
    assert all(w in g.adj[u] for u, w in itertools.combinations(clique, 2))
    assert len(clique) == largest
