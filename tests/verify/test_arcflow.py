"""The arc-flow engine (HiGHS through SciPy): exact on one resource, a relaxation per resource,
checked against exhaustive enumeration and on zero-slack packings."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify import Verdict, check_placement, verify
from escher.verify.check._witness import to_witness
from escher.verify.model._model import build
from tests.verify._oracle import cap_statement_nodes, feasible, sub_instance

pytest.importorskip("scipy")

from escher.verify.engines import _arcflow

NODE_SHAPES = [{"CPU": 2}, {"CPU": 4}, {"CPU": 3, "GPU": 1}, {"CPU": 4, "GPU": 2}, {"CPU": 5}]


@st.composite
def packings(draw: st.DrawFn) -> tuple[Plan, ClusterState]:
    """Plain packings (no intents, no planned resources), one or two resources."""
    two = draw(st.booleans())
    nodes = []
    for i in range(draw(st.integers(1, 3))):
        total = dict(draw(st.sampled_from(NODE_SHAPES if two else [*NODE_SHAPES[:2], {"CPU": 5}])))
        nodes.append({"id": f"n{i}", "total": total})
    plan = Plan()
    replicas = 0
    for j in range(draw(st.integers(1, 4))):
        count = draw(st.integers(1, 3 if replicas < 4 else 1))
        replicas += count
        req: dict[str, float] = {"CPU": draw(st.sampled_from([1, 2, 3, 1.5]))}
        if two and draw(st.booleans()):
            req["GPU"] = draw(st.sampled_from([1, 2]))
        plan.add_task(f"t{j}", req, count=count, source=f"job {j}")
    return plan, ClusterState.from_dict({"nodes": nodes})


@settings(
    max_examples=800, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(packings())
def test_arcflow_agrees_with_enumeration(inst: tuple[Plan, ClusterState]) -> None:
    plan, state = inst
    p = build(plan, state)
    expected = feasible(plan, state)
    # Decided in milliseconds; the long deadline only keeps a heavily loaded machine honest.
    status, placement = _arcflow.solve(p, time.monotonic() + 300)
    if status == "feasible":
        assert expected
        assert placement is not None
        assert check_placement(plan, state, to_witness(p, placement)) == []
    elif status == "infeasible":
        assert not expected
    else:
        assert len({r for it in p.items for r in it.nonzero}) > 1, "one resource: decided"
        core = _arcflow.project(p, time.monotonic() + 300)
        if core is not None:
            assert not expected
            sub, sub_state = sub_instance(plan, state, core, cap_statement_nodes(plan, state))
            assert not feasible(sub, sub_state), "the projection's statements are infeasible"


def _triplets(n_nodes: int, seed: int, short: bool) -> tuple[Plan, ClusterState]:
    rng = random.Random(seed)
    plan = Plan()
    for i in range(n_nodes):
        x = rng.randint(250, 500)
        y = rng.randint(max(250, 500 - x), min(500, 750 - x))
        for k, size in enumerate((x, y, 1000 - x - y)):
            plan.add_task(f"t{i}-{k}", {"mem": size}, source=f"task {i}-{k}")
    nodes = [{"id": f"n{i:03d}", "total": {"mem": 1000}} for i in range(n_nodes - short)]
    return plan, ClusterState.from_dict({"nodes": nodes})


def test_zero_slack_triplets_are_decided() -> None:
    """Every node filled exactly by three tasks: feasible, with a checked witness."""
    plan, state = _triplets(40, 3, short=False)
    result = verify(plan, state, timeout=120, check_intents=False)
    assert result.status is Verdict.FEASIBLE, result.render()
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []


def test_exact_model_proves_a_packing_infeasible() -> None:
    """Totals fit (12 of 12), but no node takes two of the 4s with a 2: only the model sees it."""
    plan = Plan()
    plan.add_task("a", {"mem": 5}, count=2, source="a")
    plan.add_task("b", {"mem": 2}, count=1, source="b")
    state = ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": {"mem": 6}} for i in (0, 1)]}
    )
    p = build(plan, state)
    assert _arcflow.solve(p, time.monotonic() + 30)[0] == "infeasible"
    assert not feasible(plan, state)


def test_the_milp_runs_once_with_all_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    """No restarts: HiGHS keeps its search to the deadline instead of starting over."""
    from escher.verify.engines import _bounded

    calls: list[tuple[float, float]] = []
    real = _bounded.milp

    def recorded(a: Any, lo: Any, hi: Any, upper: Any, seconds: float, hard: float) -> Any:
        calls.append((seconds, hard))
        return real(a, lo, hi, upper, seconds, hard)

    monkeypatch.setattr(_bounded, "milp", recorded)
    plan, state = _triplets(30, 9, short=False)
    p = build(plan, state)
    monkeypatch.setattr(_arcflow, "_exact_fills", lambda *_: None)  # the MILP itself
    start = time.monotonic()
    status, placement = _arcflow.solve(p, start + 60.0)
    assert status == "feasible" and placement is not None
    assert len(calls) == 1
    seconds, hard = calls[0]
    assert 50.0 < seconds <= 60.0  # the whole budget, less the time to build the model
    assert hard == seconds


def test_each_projection_gets_an_equal_part_of_the_time_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from escher.verify.engines import _bounded

    calls: list[float] = []

    def unknown(a: Any, lo: Any, hi: Any, upper: Any, seconds: float, hard: float) -> Any:
        calls.append(seconds)
        return (1, None)  # the solver's time limit: no answer

    monkeypatch.setattr(_bounded, "milp", unknown)
    plan = Plan()
    for i in range(12):
        plan.add_task(f"t{i}", {"CPU": 3 + i % 3, "memory": 5 + i % 4}, source=f"t{i}")
    nodes = [{"id": f"n{i}", "total": {"CPU": 16, "memory": 24}} for i in range(4)]
    p = build(plan, ClusterState.from_dict({"nodes": nodes}))
    assert _arcflow.project(p, time.monotonic() + 40.0) is None
    assert len(calls) == 2  # one run per resource
    assert 15.0 < calls[0] <= 20.0  # half of the time left, not all of it
    assert calls[1] > 15.0  # the first one's unused time passes on
