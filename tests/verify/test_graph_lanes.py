"""The graph engine's lanes in the race, and its Tabucol step.

Where a separation graph of hundreds of copies is the bulk of the problem, the race starts
the local search and the 0/1 model in lanes of their own and no Z3 lane; small graphs, and
graphs beside a larger packing, keep the Z3 lane. Tabucol colours planted graphs, keeps to
the colours each vertex may take, and stops at its deadline on a graph it cannot colour."""

from __future__ import annotations

import itertools
import random
import time

import pytest

from escher.core.cluster import ClusterState
from escher.core.plan import Plan, Separated
from escher.verify import Verdict, check_placement, verify
from escher.verify.engines._engine import GRAPH_ONLY_COPIES, _lanes, _Run
from escher.verify.engines._tabucol import Tabucol
from escher.verify.model import build


def _apart(tasks: int, nodes: int, pairs: int, seed: int, plain: int = 0) -> tuple[Plan, dict]:
    """`tasks` tasks in `nodes` hidden groups, `pairs` random separated pairs across groups
    (a colouring exists), and `plain` more tasks under no separation; nodes with room."""
    rng = random.Random(seed)
    group = [rng.randrange(nodes) for _ in range(tasks)]
    plan = Plan()
    for t in range(tasks):
        plan.add_task(f"s{t}", {"CPU": 1})
    for t in range(plain):
        plan.add_task(f"p{t}", {"CPU": 1})
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a, b = sorted(rng.sample(range(tasks), 2))
        if group[a] != group[b] and (a, b) not in seen:
            seen.add((a, b))
            plan.add_intent(Separated((f"s{a}", f"s{b}")))
    cap = tasks + plain
    return plan, {"nodes": [{"id": f"n{i}", "total": {"CPU": cap}} for i in range(nodes)]}


def _lane_names(plan: Plan, cluster: dict) -> set[str]:
    p = build(plan, ClusterState.from_dict(cluster))
    return set(_lanes(_Run(p, time.monotonic() + 60, None)))


@pytest.mark.parametrize(("tasks", "nodes", "pairs"), [(600, 3, 1500), (1200, 5, 5000)])
def test_a_large_separation_graph_races_without_a_z3_lane(
    tasks: int, nodes: int, pairs: int
) -> None:
    assert tasks >= GRAPH_ONLY_COPIES
    assert _lane_names(*_apart(tasks, nodes, pairs, 3)) == {"graph", "sat"}


def test_a_small_separation_graph_keeps_the_z3_lane() -> None:
    assert _lane_names(*_apart(120, 4, 600, 5)) == {"graph", "sat", "z3"}


def test_a_graph_beside_a_larger_packing_keeps_the_z3_lane() -> None:
    assert _lane_names(*_apart(GRAPH_ONLY_COPIES, 4, 1500, 6, plain=800)) == {"graph", "sat", "z3"}


def test_a_large_colouring_is_decided_with_a_checked_witness_by_its_lanes() -> None:
    plan, cluster = _apart(700, 3, 1400, 8)
    state = ClusterState.from_dict(cluster)
    result = verify(plan, state, timeout=120, check_intents=False)
    assert result.status is Verdict.FEASIBLE
    assert result.witness is not None and check_placement(plan, state, result.witness) == []


def _planted(n: int, k: int, edges: int, seed: int) -> tuple[list[list[int]], list[int]]:
    rng = random.Random(seed)
    hidden = [rng.randrange(k) for _ in range(n)]
    adj: list[set[int]] = [set() for _ in range(n)]
    made = 0
    while made < edges:
        a, b = rng.sample(range(n), 2)
        if hidden[a] != hidden[b] and b not in adj[a]:
            adj[a].add(b)
            adj[b].add(a)
            made += 1
    return [sorted(a) for a in adj], hidden


@pytest.mark.parametrize(("n", "k", "edges", "seed"), [(300, 3, 600, 1), (500, 5, 2500, 2)])
def test_tabucol_colours_planted_graphs(n: int, k: int, edges: int, seed: int) -> None:
    adj, _ = _planted(n, k, edges, seed)
    t = Tabucol(adj, [list(range(k))] * n, k, seed)
    assert t.run(time.monotonic() + 60)
    assert all(t.col[v] != t.col[u] for v in range(n) for u in adj[v])


def test_tabucol_keeps_to_the_colours_each_vertex_may_take() -> None:
    adj, hidden = _planted(200, 4, 500, 7)
    # every vertex may take its hidden colour and one other
    allowed = [sorted({h, (h + 1 + v) % 4}) for v, h in enumerate(hidden)]
    t = Tabucol(adj, allowed, 4, 3)
    assert t.run(time.monotonic() + 60)
    assert all(c in allowed[v] for v, c in enumerate(t.col))
    assert all(t.col[v] != t.col[u] for v in range(200) for u in adj[v])


def test_tabucol_stops_at_its_deadline_on_a_graph_it_cannot_colour() -> None:
    adj = [[u for u in range(5) if u != v] for v in range(5)]  # K5 on 4 colours
    t = Tabucol(adj, [list(range(4))] * 5, 4, 0)
    t0 = time.monotonic()
    assert not t.run(t0 + 0.3)
    assert time.monotonic() - t0 < 2.0
    assert t.conflicts >= 1 and t.fewest >= 1
    count = sum(t.col[v] == t.col[u] for v, u in itertools.combinations(range(5), 2))
    assert count == t.conflicts


@pytest.mark.parametrize(
    ("tasks", "nodes", "pairs", "seed"), [(1500, 5, 5000, 4), (999, 3, 3000, 5)]
)
def test_the_local_search_finds_equitable_colourings_of_other_shapes(
    tasks: int, nodes: int, pairs: int, seed: int
) -> None:
    from escher.verify.engines._graph import propagated_colour, tabu_colour
    from tests.verify._graphs import built, nodes_of_vertices, proper

    rng = random.Random(seed)
    hidden = [v % nodes for v in range(tasks)]
    rng.shuffle(hidden)
    plan = Plan()
    for t in range(tasks):
        plan.add_task(f"e{t}", {"CPU": 1})
    seen: set[tuple[int, int]] = set()
    while len(seen) < pairs:
        a, b = sorted(rng.sample(range(tasks), 2))
        if hidden[a] != hidden[b]:
            seen.add((a, b))
    for a, b in sorted(seen):
        plan.add_intent(Separated((f"e{a}", f"e{b}")))
    share = tasks // nodes  # every node holds exactly its class
    cluster = {"nodes": [{"id": f"n{i}", "total": {"CPU": share}} for i in range(nodes)]}
    p, g = built((plan, cluster, True))
    found = None
    for s in range(4):  # the tries `_local_search` takes, in CPU seconds
        found = propagated_colour(p, g, time.monotonic() + 300, None, s, 1.5 * 2**s)
        found = found or tabu_colour(p, g, time.monotonic() + 300, None, s, seconds=1.5 * 2**s)
        if found is not None:
            break
    assert found is not None and proper(g, found)
    at = nodes_of_vertices(g, found)  # a task in no pair is no vertex: placed later
    assert all(at.count(n) <= share for n in range(nodes))
