"""The slot-count bound, the separation graph (clique, DSatur, Tabucol, the 0/1 model) and
engines run alone: each against exhaustive enumeration and on the bench's own families."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.plan import Plan, Separated, SpreadAtMost
from escher.verify import Verdict, check_placement, verify
from escher.verify.check._witness import to_witness
from escher.verify.engines._engine import ENGINES, decide
from tests.verify._bench import bench
from tests.verify._oracle import assert_minimal_conflict, feasible


def _nodes(gpus: list[int]) -> ClusterState:
    return ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": 64, "GPU": g}} for i, g in enumerate(gpus)]}
    )


def test_fragmented_gpus_are_infeasible_by_the_slot_count_with_the_cause() -> None:
    # 4 + 4 + 8 GPUs = 16 >= 5 x 3 asked, but a node holds C // 3 tasks of 3: 1 + 1 + 2 = 4
    plan = Plan()
    plan.add_task("train", {"CPU": 1, "GPU": 3}, count=5, source="job train")
    result = verify(plan, _nodes([4, 4, 8]), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "slot count"
    assert "GPU: the tasks asking 3 or more need 5 slots of 3" in result.cause
    assert "have only 4" in result.cause
    assert result.explanation is not None and result.explanation.minimal
    plan.tasks[0] = plan.tasks[0].__class__(**{**plan.tasks[0].__dict__, "count": 4})
    assert verify(plan, _nodes([4, 4, 8]), check_intents=False).status is Verdict.FEASIBLE


def test_a_task_asking_twice_the_slot_fills_two_slots() -> None:
    plan = Plan()
    plan.add_task("big", {"GPU": 6}, count=1, source="job big")
    plan.add_task("mid", {"GPU": 3}, count=1, source="job mid")
    # 6 + 3 = 9 <= 10 GPUs, but an 8-GPU node holds 8 // 3 = 2 slots and a 2-GPU node none
    result = verify(plan, _nodes([8, 2]), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "slot count"


def test_requests_on_a_grid_are_counted_in_slots_of_their_common_divisor() -> None:
    # 4 + 3 x 6 = 22 GB on 3 + 6 + 13 = 22: slots of 6 (3 <= 0 + 1 + 2) and of 4
    # (4 <= 0 + 1 + 3) pass, but every request is a multiple of 2: the tasks fill 2 + 9 = 11
    # slots of 2 and the nodes hold 3 // 2 + 6 // 2 + 13 // 2 = 10
    plan = Plan()
    plan.add_task("a", {"memory": 4}, count=1, source="job a")
    plan.add_task("b", {"memory": 6}, count=3, source="job b")

    def nodes(*memory: int) -> ClusterState:
        return ClusterState.from_dict(
            {"nodes": [{"id": f"n{i}", "total": {"memory": m}} for i, m in enumerate(memory)]}
        )

    result = verify(plan, nodes(3, 6, 13), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "slot count"
    assert "slots of 2" in result.cause
    assert verify(plan, nodes(3, 6, 16), check_intents=False).status is Verdict.FEASIBLE


def _pairs_plan(n_tasks: int, pairs: list[tuple[int, int]], clique: int = 0) -> Plan:
    plan = Plan()
    for i in range(n_tasks + clique):
        plan.add_task(f"t{i}", {"CPU": 1}, source=f"service t{i}")
    for a, b in pairs:
        plan.add_intent(Separated((f"t{a}", f"t{b}"), source=f"AntiAffinity(t{a}, t{b})"))
    members = range(n_tasks, n_tasks + clique)
    for a, b in itertools.combinations(members, 2):
        plan.add_intent(Separated((f"t{a}", f"t{b}"), source=f"AntiAffinity(t{a}, t{b})"))
    return plan


def _cpu_nodes(n: int, cpu: int = 100) -> ClusterState:
    return ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": cpu}} for i in range(n)]}
    )


def test_a_clique_of_separations_larger_than_the_nodes_is_named_in_the_cause() -> None:
    plan = _pairs_plan(6, [(0, 1), (2, 3)], clique=4)
    result = verify(plan, _cpu_nodes(3), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "clique of separations"
    assert "4 tasks must each run on a different node" in result.cause
    assert "'t6', 't7', 't8', 't9'" in result.cause
    assert "may use only 3 nodes" in result.cause
    assert result.explanation is not None and result.explanation.minimal
    # the 4 tasks and the 6 separations of the clique's edges
    assert len(result.explanation.statements) == 10


def test_an_odd_cycle_on_two_nodes_is_infeasible_by_the_sat_model() -> None:
    # no clique larger than 2, yet not 2-colourable: the 0/1 model decides it
    plan = _pairs_plan(5, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    result = verify(plan, _cpu_nodes(2), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.explanation is not None and result.explanation.minimal
    assert len(result.explanation.statements) == 10  # five tasks, five separations


@pytest.mark.parametrize(("nodes", "verdict"), [(2, Verdict.INFEASIBLE), (3, Verdict.FEASIBLE)])
def test_separations_with_memory_in_bytes_are_decided(nodes: int, verdict: Verdict) -> None:
    """Separations with capacities past 2**31 (memory in bytes) are decided: a cycle of seven
    separations, four 2 GiB tasks to a node of 8 GiB."""
    plan = Plan()
    for i in range(7):
        plan.add_task(f"t{i}", {"memory": 2 << 30}, source=f"service t{i}")
    for a in range(7):
        b = (a + 1) % 7
        plan.add_intent(Separated((f"t{a}", f"t{b}"), source=f"AntiAffinity(t{a}, t{b})"))
    cluster = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"memory": 8 << 30}} for i in range(nodes)]}
    )
    assert verify(plan, cluster, check_intents=False, timeout=30).status is verdict


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_planted_colourings_are_found_and_checked(seed: int) -> None:
    plan, cluster, expected = bench().colouring(120, 4, 600, 0, seed)
    state = ClusterState.from_dict(cluster)
    result = verify(plan, state, timeout=30, check_intents=False)
    assert expected and result.status is Verdict.FEASIBLE
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []


@pytest.mark.parametrize("seed", [21, 22])
def test_a_planted_colouring_with_a_clique_too_large_is_infeasible(seed: int) -> None:
    plan, cluster, expected = bench().colouring(120, 4, 600, 5, seed)
    result = verify(plan, ClusterState.from_dict(cluster), timeout=30, check_intents=False)
    assert not expected and result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "clique of separations"


@pytest.mark.parametrize("seed", [31, 32])
def test_gpu_fragmentation_of_other_shapes_is_decided(seed: int) -> None:
    for want in (False, True):
        plan, cluster, expected = bench().gpus(100, seed, want)
        result = verify(plan, ClusterState.from_dict(cluster), timeout=30, check_intents=False)
        assert result.status is (Verdict.FEASIBLE if expected else Verdict.INFEASIBLE)


@st.composite
def graphs(draw: st.DrawFn) -> tuple[Plan, ClusterState]:
    n_nodes = draw(st.integers(1, 3))
    nodes = [
        {"id": f"n{i}", "total": {"CPU": draw(st.sampled_from([1, 2, 3, 8]))}}
        for i in range(n_nodes)
    ]
    plan = Plan()
    n_tasks = draw(st.integers(2, 5))
    for i in range(n_tasks):
        plan.add_task(f"t{i}", {"CPU": draw(st.sampled_from([0, 1, 2]))}, source=f"s{i}")
    all_pairs = list(itertools.combinations(range(n_tasks), 2))
    for a, b in draw(st.lists(st.sampled_from(all_pairs), max_size=8, unique=True)):
        plan.add_intent(Separated((f"t{a}", f"t{b}"), source=f"AntiAffinity(t{a}, t{b})"))
    if draw(st.integers(0, 3)) == 0:
        names = tuple(f"t{i}" for i in range(n_tasks))
        plan.add_intent(SpreadAtMost(names, per_node=2, source="LoadBalance"))
    return plan, ClusterState.from_dict({"nodes": nodes})


@settings(
    max_examples=600, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(graphs())
def test_separation_graphs_agree_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    plan, state = inst
    result = verify(plan, state, timeout=30, check_intents=False)
    expected = feasible(plan, state)
    assert result.status is (Verdict.FEASIBLE if expected else Verdict.INFEASIBLE)
    if expected:
        assert result.witness is not None
        assert check_placement(plan, state, result.witness) == []
    else:
        assert result.explanation is not None and result.explanation.minimal
        assert_minimal_conflict(plan, state, result.explanation.ids)


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(graphs())
def test_the_graph_engine_alone_agrees_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    """The graph engine alone (no pre-checks): a witness that checks, or an UNSAT that
    enumeration confirms; never a wrong answer."""
    plan, state = inst
    d = decide(plan, state, deadline=time.monotonic() + 30, engines=frozenset({"graph"}))
    expected = feasible(plan, state)
    if d.status == "feasible":
        assert expected
        assert d.placement is not None
        assert check_placement(plan, state, to_witness(d.problem, d.placement)) == []
    elif d.status == "infeasible":
        assert not expected


def test_every_engine_alone_never_contradicts_the_construction() -> None:
    cases = [
        bench().gpus(30, 5, False),
        bench().gpus(30, 5, True),
        bench().colouring(40, 3, 120, 0, 5),
        bench().colouring(40, 3, 120, 4, 5),
        bench().triplets(10, 5, False, True),
    ]
    for plan, cluster, want in cases:
        state = ClusterState.from_dict(cluster)
        for name in ["bounds", *ENGINES]:
            d = decide(plan, state, deadline=time.monotonic() + 5, engines=frozenset({name}))
            assert d.status in ("feasible" if want else "infeasible", "unknown"), (name, d)


def test_a_stopped_engine_of_the_graph_portfolio_gives_up_with_unknown() -> None:
    """The first answer stops the other engine: a set `stop` ends Tabucol and the 0/1 model
    without an answer, which the portfolio then ignores."""
    import threading

    from escher.verify.engines import _graph
    from escher.verify.model._model import build

    plan, cluster, _ = bench().colouring(200, 4, 1000, 0, 41)
    state = ClusterState.from_dict(cluster)
    p = build(plan, state, deadline=time.monotonic() + 60)
    g = _graph.conflict_graph(p)
    assert g is not None
    stop = threading.Event()
    stop.set()
    assert _graph.tabu_colour(p, g, time.monotonic() + 60, stop) is None
    status, reason = _graph.solve(p, g, time.monotonic() + 60, None, stop)
    assert status == "unknown"
    assert "another engine answered first" in reason


def test_z3_pseudo_boolean_terms_are_scaled_into_c_ints() -> None:
    """Z3's PbLe takes C ints: a constraint that always holds is dropped, large ones are
    divided by their common divisor, and one that stays too large is declined (the engine
    answers unknown) instead of failing in its thread (the kube-scheduler agreement test
    found byte-sized memory there)."""
    from escher.verify.engines._graph import _int32_terms

    big = 2**33
    assert _int32_terms([(1, 3), (2, 4)], 7) == ([], 7)
    assert _int32_terms([(1, 3), (2, 4)], 6) == ([(1, 3), (2, 4)], 6)
    assert _int32_terms([(1, big), (2, big)], big) == ([(1, 1), (2, 1)], 1)
    assert _int32_terms([(1, big + 1), (2, big)], big) is None
