"""The graph engine's local search with capacities (equitable colourings) and belief
propagation near the threshold where a planted colouring can be found."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from escher.core.cluster import ClusterState
from escher.verify import Verdict, check_placement, verify
from escher.verify.engines._graph import capacity_rows, propagated_colour, tabu_colour
from escher.verify.engines._propagation import beliefs_colouring
from tests.verify._bench import bench
from tests.verify._graphs import built, nodes_of_vertices


def _equitable(made: tuple[object, dict[str, list[dict[str, object]]], bool], share: int) -> None:
    for node in made[1]["nodes"]:
        node["total"] = {"CPU": share, "memory": 2 * share}


def test_capacities_with_room_to_spare_are_left_out_of_the_local_search() -> None:
    p, g = built(bench().colouring(120, 4, 600, 0, 5))
    assert capacity_rows(p, g) == []


def test_tabucol_finds_a_colouring_whose_nodes_hold_exactly_their_share() -> None:
    made = bench().colouring(120, 4, 600, 0, 17)
    _equitable(made, 30)
    p, g = built(made)
    assert capacity_rows(p, g)
    found = None
    for seed in range(4):
        found = tabu_colour(p, g, time.monotonic() + 120, None, seed)
        if found is not None:
            break
    assert found is not None
    at = nodes_of_vertices(g, found)
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
    p, g = built(bench().colouring(1000, 4, 5000, 0, 11))
    found = None
    for seed in range(6):
        found = propagated_colour(p, g, time.monotonic() + 300, None, seed)
        if found is not None:
            break
    assert found is not None
    at = nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)


def test_beliefs_past_their_deadline_answer_nothing() -> None:
    edges = [(0, 1), (1, 2), (2, 0)]
    assert beliefs_colouring(edges, [[0, 1, 2]] * 3, 3, time.monotonic() - 1.0, 0) is None


def test_unequal_hidden_classes_on_five_nodes_are_coloured() -> None:
    p, g = built(bench().colouring_uneven(600, 5, 3000, 0, 29))
    found = None
    for seed in range(4):
        found = propagated_colour(p, g, time.monotonic() + 300, None, seed) or tabu_colour(
            p, g, time.monotonic() + 60, None, seed
        )
        if found is not None:
            break
    assert found is not None
    at = nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)


def test_swaps_reach_an_equitable_colouring_where_every_single_move_overfills() -> None:
    from escher.verify.engines._swap_tabu import swap_tabu

    # a path 0-1-2-3 on two nodes of two each: from [0, 0, 1, 1] any one move overfills
    adj = [[1], [0, 2], [1, 3], [2]]
    until = time.monotonic() + 30
    got = swap_tabu(adj, [[0, 1]] * 4, 2, [[1.0] * 4], [[2.0, 2.0]], until, start=[0, 0, 1, 1])
    assert got in ([0, 1, 0, 1], [1, 0, 1, 0])


def test_swaps_keep_unequal_loads_within_unequal_capacities() -> None:
    from escher.verify.engines._swap_tabu import swap_tabu

    # a 6-cycle with loads 1 and 2 alternating: a proper 2-colouring puts the loads 1 on
    # one node (3 in all) and the loads 2 on the other (6); nodes of 3 and 6 fit only one
    adj = [[(v - 1) % 6, (v + 1) % 6] for v in range(6)]
    loads = [[0.5, 1.0] * 3]
    got = swap_tabu(adj, [[0, 1]] * 6, 2, loads, [[1.5, 3.0]], time.monotonic() + 30, seed=3)
    assert got is not None
    assert all(got[v] != got[(v + 1) % 6] for v in range(6))
    assert [got[v] for v in range(0, 6, 2)] == [0, 0, 0]


@pytest.mark.parametrize(("pairs", "seed"), [(4000, 5), (4000, 17), (3000, 6), (6000, 8)])
def test_equitable_colourings_below_the_beliefs_threshold_are_found(pairs: int, seed: int) -> None:
    # col5: equal hidden classes, uniformly random pairs, nodes of exactly 250
    p, g = built(bench().colouring_equitable(1000, 4, pairs, seed))
    found = None
    for s in range(6):
        found = propagated_colour(p, g, time.monotonic() + 120, None, s, tabu_seconds=60)
        if found is not None:
            break
    assert found is not None
    at = nodes_of_vertices(g, found)
    assert all(at[u] != at[w] for u, w in g.why)
    # tasks with no separation are not in the graph: the greedy orders place them after
    assert max(Counter(at).values()) <= 250


def test_an_equitable_colouring_of_the_fifth_construction_is_verified() -> None:
    plan, cluster, expected = bench().colouring_equitable(1000, 4, 4000, 29)
    state = ClusterState.from_dict(cluster)
    result = verify(plan, state, timeout=300, check_intents=False)
    assert expected and result.status is Verdict.FEASIBLE
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []
