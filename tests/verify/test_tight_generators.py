"""The fresh tight-packing constructions of the bench (p5 `tight_hair`, p6 `tight_fillers`):
they are as tight as they claim, and their infeasible variants (one node short) stay
decided by the totals, quickly, with no solver search."""

from __future__ import annotations

from typing import Any

import pytest

from escher.core.cluster import ClusterState
from escher.verify import Verdict, verify
from tests.verify._bench import bench


def _fill(plan: Any, cluster: dict[str, Any], resource: str) -> float:
    asked = sum(t.resources.get(resource, 0) * t.count for t in plan.tasks)
    have = sum(n["total"].get(resource, 0) for n in cluster["nodes"])
    return asked / have if have else 1.0


@pytest.mark.parametrize("name", ["tight_hair", "tight_fillers"])
@pytest.mark.parametrize("seed", [7, 12])
def test_every_resource_is_asked_for_at_98_to_100_percent(name: str, seed: int) -> None:
    plan, cluster, feasible = getattr(bench(), name)(20, seed)
    assert feasible
    for resource in bench().P5_RES:
        assert 0.98 <= _fill(plan, cluster, resource) <= 1.0, resource


def test_every_node_of_tight_hair_has_a_capacity_of_its_own() -> None:
    _, cluster, _ = bench().tight_hair(100, 3)
    caps = {tuple(sorted(n["total"].items())) for n in cluster["nodes"]}
    assert len(caps) == len(cluster["nodes"])


@pytest.mark.parametrize("name", ["tight_hair", "tight_fillers"])
@pytest.mark.parametrize("seed", [7, 12])
def test_one_node_short_is_infeasible_by_the_totals(name: str, seed: int) -> None:
    made = getattr(bench(), name)(20, seed)
    plan, cluster, expect = bench().tight_variant(made, "short", seed)
    if expect is not False:
        pytest.skip("not infeasible by the totals on this seed")
    result = verify(plan, ClusterState.from_dict(cluster), timeout=60, check_intents=False)
    assert result.status is Verdict.INFEASIBLE
