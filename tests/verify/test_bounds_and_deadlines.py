"""Exact bounds found without a solver, and a MILP run that ends by its hard deadline."""

from __future__ import annotations

import time
from typing import Any

import pytest

from escher.core.cluster import ClusterState
from escher.core.plan import PinnedTo, Plan, Separated
from escher.verify import Verdict, verify

NODES = [{"id": f"n{i}", "total": {"CPU": 8}} for i in range(5)]


def _state() -> ClusterState:
    return ClusterState.from_dict({"nodes": NODES})


def test_a_separated_set_larger_than_the_nodes_is_infeasible_without_search() -> None:
    plan = Plan()
    plan.add_task("replica", {"CPU": 1}, count=6, source="job")
    plan.add_task("other", {"CPU": 1}, count=3, source="other job")
    plan.add_intent(Separated(("replica",), source="AntiAffinity"))
    result = verify(plan, _state(), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert result.stats["method"] == "separation vs node count"
    assert "6 replicas of 'replica' need 6 nodes" in result.cause
    assert "may use only 5" in result.cause
    assert result.explanation is not None
    assert result.explanation.minimal
    assert {s.text for s in result.explanation.statements} == {
        "task 'replica' x6 requesting {'CPU': 1} (from job)",
        "no two of (replica) in one node (AntiAffinity)",
    }


def test_the_nodes_a_separated_set_may_use_are_those_its_pins_allow() -> None:
    plan = Plan()
    plan.add_task("replica", {"CPU": 1}, count=3, source="job")
    plan.add_intent(Separated(("replica",), source="AntiAffinity"))
    plan.add_intent(PinnedTo(("replica",), nodes=("n0", "n1"), source="pins"))
    result = verify(plan, _state(), check_intents=False)
    assert result.status is Verdict.INFEASIBLE
    assert "may use only 2" in result.cause
    plan.tasks[0] = plan.tasks[0].__class__(**{**plan.tasks[0].__dict__, "count": 2})
    assert verify(plan, _state(), check_intents=False).status is Verdict.FEASIBLE


def test_a_milp_that_does_not_answer_is_killed_at_its_hard_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("scipy")
    from escher.verify.engines import _bounded

    if not _bounded._can_fork():
        pytest.skip("the solver runs in this process here")

    def stuck(*_: Any) -> Any:  # as HiGHS inside a step that ignores its time limit
        time.sleep(3600)

    monkeypatch.setattr(_bounded, "_solve", stuck)
    assert _bounded.milp(None, None, None, None, 0.05, 0.5) == (None, None)


def test_a_milp_in_its_own_process_answers_as_in_this_one() -> None:
    pytest.importorskip("scipy")
    import numpy as np
    from scipy.sparse import csr_matrix

    from escher.verify.engines import _bounded

    # x0 + x1 == 3, x0 <= 1: integral solutions (1, 2) and (0, 3)
    a = csr_matrix(np.array([[1.0, 1.0]]))
    lo, hi, upper = np.array([3.0]), np.array([3.0]), np.array([1.0, np.inf])
    status, x = _bounded.milp(a, lo, hi, upper, 10.0, 30.0)
    assert status == 0
    assert x is not None
    assert x[0] + x[1] == pytest.approx(3.0)
    assert x[0] <= 1.0 + 1e-9
    infeasible = _bounded.milp(
        a, np.array([5.0]), np.array([5.0]), np.array([1.0, 2.0]), 10.0, 30.0
    )
    assert infeasible[0] == 2
