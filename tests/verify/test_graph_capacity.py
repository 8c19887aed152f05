"""The graph engine's local search with capacities (equitable colourings) and belief
propagation near the threshold where a planted colouring can be found."""

from __future__ import annotations

import time
from collections import Counter

from escher.core.cluster import ClusterState
from escher.verify import Verdict, check_placement, verify
from escher.verify.engines._graph import (
    Graph,
    capacity_rows,
    conflict_graph,
    propagated_colour,
    tabu_colour,
)
from escher.verify.engines._propagation import beliefs_colouring
from escher.verify.model import Problem, build
from tests.verify._bench import bench


def _built(plan_cluster: tuple[object, object, bool]) -> tuple[Problem, Graph]:
    plan, cluster, _ = plan_cluster
    p = build(plan, ClusterState.from_dict(cluster))  # type: ignore[arg-type]
    g = conflict_graph(p)
    assert g is not None
    return p, g


def _nodes_of_vertices(g: Graph, placement: list[list[int]]) -> list[int]:
    copy: Counter[int] = Counter()
    at = []
    for i in g.item:
        at.append(placement[i][copy[i]])
        copy[i] += 1
    return at


def _equitable(made: tuple[object, dict[str, list[dict[str, object]]], bool], share: int) -> None:
    for node in made[1]["nodes"]:
        node["total"] = {"CPU": share, "memory": 2 * share}


def test_capacities_with_room_to_spare_are_left_out_of_the_local_search() -> None:
    p, g = _built(bench().colouring(120, 4, 600, 0, 5))
    assert capacity_rows(p, g) == []


def test_tabucol_finds_a_colouring_whose_nodes_hold_exactly_their_share() -> None:
    made = bench().colouring(120, 4, 600, 0, 17)
    _equitable(made, 30)
    p, g = _built(made)
    assert capacity_rows(p, g)
    found = None
    for seed in range(4):
        found = tabu_colour(p, g, time.monotonic() + 120, None, seed)
        if found is not None:
            break
    assert found is not None
    at = _nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)
    assert sorted(Counter(at).values()) == [30, 30, 30, 30]


def test_an_equitable_thousand_task_colouring_is_feasible_with_a_checked_witness() -> None:
    made = bench().colouring(1000, 4, 5000, 0, 19)
    _equitable(made, 250)
    plan, cluster, expected = made
    state = ClusterState.from_dict(cluster)
    result = verify(plan, state, timeout=300, check_intents=False)
    assert expected and result.status is Verdict.FEASIBLE
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []


def test_beliefs_find_the_planted_colouring_that_reinforcement_missed() -> None:
    # seed 11: the reinforced messages settled ~50 conflicts away from the planted colouring
    p, g = _built(bench().colouring(1000, 4, 5000, 0, 11))
    found = None
    for seed in range(6):
        found = propagated_colour(p, g, time.monotonic() + 300, None, seed)
        if found is not None:
            break
    assert found is not None
    at = _nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)


def test_beliefs_past_their_deadline_answer_nothing() -> None:
    edges = [(0, 1), (1, 2), (2, 0)]
    assert beliefs_colouring(edges, [[0, 1, 2]] * 3, 3, time.monotonic() - 1.0, 0) is None


def test_unequal_hidden_classes_on_five_nodes_are_coloured() -> None:
    p, g = _built(bench().colouring_uneven(600, 5, 3000, 0, 29))
    found = None
    for seed in range(4):
        found = propagated_colour(p, g, time.monotonic() + 300, None, seed) or tabu_colour(
            p, g, time.monotonic() + 60, None, seed
        )
        if found is not None:
            break
    assert found is not None
    at = _nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)
