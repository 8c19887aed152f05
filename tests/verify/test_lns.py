"""The neighbourhood search with exact sub-solves (`_lns`): its placements always check,
it never places what cannot be placed, it keeps its deadline and stdout clean, and the race
gives it a lane on tight packings only."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.engines import _lns
from escher.verify.engines._engine import _lanes, _Run, decide
from escher.verify.engines._greedy import check
from escher.verify.model._model import build
from escher.verify.model._problem import Problem
from tests.verify._bench import bench
from tests.verify._oracle import feasible


def _problem(plan: Plan, state: ClusterState) -> Problem:
    return build(plan, state, deadline=time.monotonic() + 60)


def test_a_packing_the_first_fills_leave_unfinished_is_completed() -> None:
    # Five resources filled to 85-90% at 20 nodes (seed 4): the greedy orders do not place
    # it; the first fills leave a copy out, and the repair places it.
    plan, cluster, _ = bench().tight(20, 4, fill=(0.85, 0.9))
    p = _problem(plan, ClusterState.from_dict(cluster))
    stats: dict[str, object] = {}
    placement = _lns.find(p, time.monotonic() + 120, stats=stats)
    assert placement is not None, stats
    assert check(p, placement) == []


@st.composite
def packings(draw: st.DrawFn) -> tuple[Plan, ClusterState]:
    nodes = [
        {
            "id": f"n{i}",
            "total": {"CPU": draw(st.integers(2, 8)), "memory": draw(st.integers(2, 8))},
        }
        for i in range(draw(st.integers(1, 3)))
    ]
    plan = Plan()
    for i in range(draw(st.integers(1, 4))):
        need = {"CPU": draw(st.integers(1, 4)), "memory": draw(st.integers(0, 4))}
        plan.add_task(f"t{i}", need, count=draw(st.integers(1, 3)), source=f"s{i}")
    return plan, ClusterState.from_dict({"nodes": nodes})


@settings(max_examples=30, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(packings())
def test_a_placement_found_always_checks_and_exists(inst: tuple[Plan, ClusterState]) -> None:
    plan, state = inst
    p = _problem(plan, state)
    placement = _lns.find(p, time.monotonic() + 0.5)
    if placement is not None:
        assert check(p, placement) == []
        assert feasible(plan, state)


def test_an_impossible_packing_gets_no_placement_within_the_deadline() -> None:
    plan, cluster, _ = bench().tight(20, 3)
    cluster["nodes"].pop()  # one node short of the construction
    p = _problem(plan, ClusterState.from_dict(cluster))
    t0 = time.monotonic()
    assert _lns.find(p, t0 + 2.0) is None
    assert time.monotonic() - t0 < 2.0 + 3.0  # a HiGHS call ends within its time limit


def test_highs_writes_nothing_to_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    plan, cluster, _ = bench().tight(20, 1)
    p = _problem(plan, ClusterState.from_dict(cluster))
    _lns.find(p, time.monotonic() + 2.0)
    assert capfd.readouterr().out == ""


def test_the_race_gives_the_search_a_lane_on_tight_packings_only() -> None:
    tight_plan, tight_cluster, _ = bench().tight(20, 1)
    loose = Plan()
    loose.add_task("t", {"CPU": 1}, count=60)
    loose_state = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"CPU": 8}} for i in range(20)]}
    )
    for plan, state, want in [
        (tight_plan, ClusterState.from_dict(tight_cluster), True),
        (loose, loose_state, False),
    ]:
        run = _Run(_problem(plan, state), time.monotonic() + 60, None)
        assert ("lns" in _lanes(run)) is want


def test_the_engine_alone_decides_a_moderately_tight_packing() -> None:
    plan, cluster, _ = bench().tight(20, 5, fill=(0.85, 0.9))
    d = decide(
        plan,
        ClusterState.from_dict(cluster),
        deadline=time.monotonic() + 120,
        engines=frozenset({"lns"}),
    )
    assert d.status == "feasible", d.reason
    assert d.method.startswith("neighbourhood search")
