"""Plans with fallback requests (`PlannedTask.fallbacks`, a `FirstOf`): a replica runs with
any one of its alternatives; the witness says which."""

from __future__ import annotations

import pytest

from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError, ValidationError
from escher.core.plan import Plan, Separated, SpreadAtMost
from escher.verify import Verdict, check_placement, verify


def nodes(count: int, cpus: float = 4, gpus: float = 0) -> ClusterState:
    total = {"CPU": cpus, **({"GPU": gpus} if gpus else {})}
    return ClusterState.from_dict(
        {"nodes": [{"id": f"n{i}", "total": total} for i in range(count)]}
    )


def test_the_plan_file_keeps_fallbacks_in_order_and_plans_without_stay_as_they_were() -> None:
    plan = Plan()
    plan.add_task("web", {"CPU": 4}, count=2, fallbacks=[{"CPU": 2}, {"CPU": 1}])
    plan.add_task("db", {"CPU": 1})
    data = plan.to_dict()
    assert data["tasks"][0]["fallbacks"] == [{"CPU": 2}, {"CPU": 1}]
    assert "fallbacks" not in data["tasks"][1]  # unchanged format without fallbacks
    again = Plan.from_dict(data)
    assert again.task("web").alternatives == plan.task("web").alternatives
    assert again.to_dict() == data
    data["tasks"][0]["fallbacks"] = [{"memory": "1Gi"}]
    assert Plan.from_dict(data).task("web").fallbacks[0]["memory"] == 2**30
    data["tasks"][0]["fallbacks"] = {"CPU": 1}
    with pytest.raises(PlanFormatError, match=r"tasks\[0\]"):
        Plan.from_dict(data)
    with pytest.raises(ValidationError, match="fallbacks"):
        Plan().add_task("x", {"CPU": 1}, fallbacks={"CPU": 1})  # type: ignore[arg-type]


def test_the_preferred_request_is_used_when_it_fits() -> None:
    plan = Plan()
    plan.add_task("web", {"CPU": 2}, count=4, fallbacks=[{"CPU": 1}])
    result = verify(plan, nodes(2))
    assert result.status is Verdict.FEASIBLE
    assert sorted(result.witness["web"]) == ["n0", "n0", "n1", "n1"]  # type: ignore[index]
    assert "runs with its preferred request" in result.preferences[0]


@pytest.mark.parametrize(
    ("count", "cpus", "nodes_", "spread"), [(3, 4, 2, 0), (4, 6, 2, 0), (4, 3, 3, 2)]
)
def test_a_plan_feasible_only_through_a_fallback_is_feasible_with_a_witness_that_uses_it(
    count: int, cpus: float, nodes_: int, spread: int
) -> None:
    plan = Plan()
    plan.add_task(
        "big", {"CPU": cpus}, count=count, fallbacks=[{"CPU": cpus + 1}, {"CPU": cpus / 2}]
    )
    if spread:
        plan.add_intent(SpreadAtMost(("big",), per_node=spread))
    state = nodes(nodes_, cpus)
    alone = Plan(intents=list(plan.intents))
    alone.add_task("big", {"CPU": cpus}, count=count)  # the preferred request alone
    assert verify(alone, state).status is Verdict.INFEASIBLE
    result = verify(plan, state)
    assert result.status is Verdict.FEASIBLE, result.render()
    assert len(result.witness["big"]) == count  # type: ignore[index]
    assert any("fallback 2" in line for line in result.preferences), result.preferences
    # the witness fits with the alternatives it names: at most 2 on a node in all
    per_node: dict[str, int] = {}
    for n in result.witness["big"]:  # type: ignore[index]
        per_node[n] = per_node.get(n, 0) + 1
    assert max(per_node.values()) <= 2


def test_infeasible_under_every_alternative_names_the_alternatives() -> None:
    plan = Plan()
    plan.add_task("big", {"CPU": 8}, count=2, fallbacks=[{"CPU": 5}])
    result = verify(plan, nodes(2))
    assert result.status is Verdict.INFEASIBLE
    assert any("every alternative of 'big'" in w and "{'CPU': 5.0}" in w for w in result.warnings)
    assert result.explanation is not None


def test_infeasible_through_an_intent_is_caught_by_the_least_requests() -> None:
    plan = Plan()
    plan.add_task("a", {"CPU": 4}, fallbacks=[{"CPU": 1}])
    plan.add_task("b", {"CPU": 4}, fallbacks=[{"CPU": 1}])
    plan.add_task("c", {"CPU": 1})
    plan.add_intent(Separated(("a", "b", "c")))
    result = verify(plan, nodes(2))
    assert result.status is Verdict.INFEASIBLE
    assert any("under every alternative of 'a'" in w for w in result.warnings)


def test_infeasible_under_every_combination_when_the_least_requests_fit() -> None:
    """Each task asks 4 CPUs or a GPU: the least of the two is nothing, which fits; one node
    with 4 CPUs and no GPU holds one of the two tasks under every combination."""
    plan = Plan()
    plan.add_task("a", {"CPU": 4}, fallbacks=[{"GPU": 1}])
    plan.add_task("b", {"CPU": 4}, fallbacks=[{"GPU": 1}])
    result = verify(plan, nodes(1))
    assert result.status is Verdict.INFEASIBLE, result.render()
    assert any("every combination of the alternatives of 'a'" in w for w in result.warnings)
    with_gpu = verify(plan, nodes(1, gpus=1))
    assert with_gpu.status is Verdict.FEASIBLE
    assert any("fallback 1 {'GPU': 1.0}" in line for line in with_gpu.preferences)


def test_two_tasks_choose_independently() -> None:
    plan = Plan()
    plan.add_task("a", {"CPU": 3}, fallbacks=[{"CPU": 1}])
    plan.add_task("b", {"CPU": 3}, fallbacks=[{"CPU": 1}])
    plan.add_task("c", {"CPU": 2})
    plan.add_intent(Separated(("b", "c")))
    result = verify(plan, nodes(2))
    assert result.status is Verdict.FEASIBLE, result.render()
    assert set(result.witness) == {"a", "b", "c"}  # type: ignore[arg-type]
    assert result.witness["b"] != result.witness["c"]  # type: ignore[index]


def test_the_witness_of_a_plain_plan_is_unchanged() -> None:
    plan = Plan()
    plan.add_task("a", {"CPU": 1}, count=2)
    result = verify(plan, nodes(1))
    assert result.feasible and not result.preferences
    assert check_placement(plan, nodes(1), result.witness) == []  # type: ignore[arg-type]


def test_many_replicas_use_the_fewest_fallbacks_that_fit() -> None:
    plan = Plan()
    plan.add_task("w", {"CPU": 2}, count=21, fallbacks=[{"CPU": 1}])
    result = verify(plan, nodes(10))
    assert result.status is Verdict.FEASIBLE, result.render()
    assert len(result.witness["w"]) == 21  # type: ignore[index]
    assert "19 on the preferred request" in result.preferences[0], result.preferences
