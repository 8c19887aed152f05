"""The greedy stage deals a class under one domain rule to the domains first (`_domainfill`)."""

from __future__ import annotations

from collections import Counter

import pytest

from escher.core.cluster import ClusterState, Node
from escher.core.plan import Colocated, PinnedTo, Plan, Separated, SpreadAtMost, SpreadEvenly
from escher.core.resources import Resources
from escher.verify import Verdict, verify
from escher.verify.engines._domainfill import _level


def cluster(zones: int, per_zone: int, cpu: float = 8) -> ClusterState:
    nodes = {}
    for z in range(zones):
        for k in range(per_zone):
            nid = f"z{z}-{k}"
            cap = Resources({"CPU": cpu})
            nodes[nid] = Node(nid, cap, cap, {"zone": f"z{z}"})
    return ClusterState(nodes)


def zone_counts(nodes: list[str]) -> list[int]:
    return sorted(Counter(n.split("-")[0] for n in nodes).values())


def test_level_fills_evenly_within_caps() -> None:
    assert _level([5, 5, 5], 7) == [3, 2, 2]
    assert _level([1, 9, 9], 9) == [1, 4, 4]
    assert _level([0, 3], 4) is None


@pytest.mark.parametrize(("zones", "replicas", "skew"), [(4, 1000, 1), (3, 301, 2), (5, 7, 1)])
def test_zone_spread_of_many_replicas_is_found_by_the_greedy_stage(
    zones: int, replicas: int, skew: int
) -> None:
    plan = Plan()
    plan.add_task("web", {"CPU": 1}, count=replicas)
    plan.add_intent(SpreadEvenly(("web",), topology_key="zone", max_skew=skew))
    # a second, unconstrained class takes room first in some zones
    plan.add_task("batch", {"CPU": 2}, count=50)
    r = verify(plan, cluster(zones, 40), timeout=60, check_intents=False)
    assert r.status is Verdict.FEASIBLE
    assert "greedy" in r.stats["method"]
    assert r.witness is not None
    counts = zone_counts(r.witness["web"])
    assert len(counts) == zones and counts[-1] - counts[0] <= skew


def test_spread_with_a_zone_the_class_cannot_use() -> None:
    """A zone the task may not use stays at 0: every other zone holds at most maxSkew."""
    state = cluster(3, 4)
    allowed = tuple(n for n in state.nodes if not n.startswith("z0"))
    plan = Plan()
    plan.add_task("web", {"CPU": 1}, count=4)
    plan.add_intent(PinnedTo(("web",), nodes=allowed))
    plan.add_intent(SpreadEvenly(("web",), topology_key="zone", max_skew=2))
    r = verify(plan, state, timeout=30, check_intents=False)
    assert r.feasible and r.witness is not None
    assert zone_counts(r.witness["web"]) == [2, 2]
    plan.tasks[0] = plan.tasks[0].__class__("web", plan.tasks[0].resources, 5)
    assert verify(plan, state, timeout=30, check_intents=False).status is Verdict.INFEASIBLE


def test_limit_and_together_rules() -> None:
    state = cluster(4, 3)
    plan = Plan()
    plan.add_task("a", {"CPU": 1}, count=6)  # b fills a zone: 2 in each of the others
    plan.add_intent(SpreadAtMost(("a",), per_node=2, topology_key="zone"))
    plan.add_task("b", {"CPU": 4}, count=6)
    plan.add_intent(Colocated(("b",), topology_key="zone"))
    plan.add_task("c", {"CPU": 1}, count=3)
    plan.add_intent(Separated(("c",), topology_key="zone"))
    r = verify(plan, state, timeout=30, check_intents=False)
    assert r.feasible and r.witness is not None
    assert max(zone_counts(r.witness["a"])) <= 2
    assert len(zone_counts(r.witness["b"])) == 1
    assert zone_counts(r.witness["c"]) == [1, 1, 1]
