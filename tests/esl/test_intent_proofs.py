"""Each ESL's declared intent is proven by the verifier (Z3) on sample clusters."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import escher
from escher import Plan
from escher.backends.memory import MemoryBackend
from escher.core.plan import Separated, SpreadAtMost
from escher.esl import (
    AntiAffinity,
    BinPacking,
    CoLocation,
    DataLocality,
    FairShare,
    Gang,
    LoadBalance,
    Policy,
    Priority,
    TaskQueue,
    WeightedFairQueue,
)
from escher.verify import IntentStatus, Verdict, verify

CPU1 = {"CPU": 1}


def proven(plan: Plan, backend: MemoryBackend) -> None:
    result = verify(plan, backend.get_cluster_state(), timeout=60)
    assert result.status is Verdict.FEASIBLE, result
    assert result.intents, "the policy declared no intent"
    for intent in result.intents:
        assert intent.status is IntentStatus.PROVEN, (intent.intent.describe(), intent.detail)
        assert intent.intent.source  # explanations speak in the policy's terms


def colocated(b: MemoryBackend) -> Plan:
    return CoLocation(b).group("ps", 3, CPU1).declare(None, "ps", count=3, resources=CPU1)


def unknown_group(b: MemoryBackend) -> Plan:
    return CoLocation(b).unknown_group("u", 3).declare(None, "u", count=3, resources=CPU1)


def anti_affinity(b: MemoryBackend) -> Plan:
    return AntiAffinity(b).declare(None, "w", count=4, resources=CPU1)


def load_balance(b: MemoryBackend) -> Plan:
    return LoadBalance(b, tasks=7).declare(None, "w", count=7, resources=CPU1)


def priority(b: MemoryBackend) -> Plan:
    prio = Priority(b, levels=10)
    return prio.low.declare(prio.high.declare(None, "hi", count=4), "lo", count=2)


def fair_share(b: MemoryBackend) -> Plan:
    fair = FairShare(b, slots_per_node=4, nodes=["n0", "n1"])
    fair.create_user("b", 3)
    return fair.create_user("a").declare(None, "a", count=2)


def locality(b: MemoryBackend) -> Plan:
    loc = DataLocality(b)
    loc.add("d", ["n1", "n2"])
    return loc.near("d").declare(None, "r", count=3)


def gang(b: MemoryBackend) -> Plan:
    return Gang(b, mode="native").declare(None, "g", count=4, resources={"CPU": 4})


def bin_packing(b: MemoryBackend) -> Plan:
    pack = BinPacking(b)
    pack.launch(int, resources=CPU1).result(10)
    return pack.declare(None, "p", count=3, resources=CPU1)


def queue(b: MemoryBackend) -> Plan:
    return TaskQueue(b, rate=2).declare(None, "q", count=8)


def wfq(b: MemoryBackend) -> Plan:
    return (
        WeightedFairQueue({"x": 3, "y": 1}, slots_per_node=4, backend=b)
        .queue("y")
        .declare(None, "y", count=4)
    )


CASES: dict[str, Callable[[MemoryBackend], Plan]] = {
    f.__name__: f
    for f in (
        colocated,
        unknown_group,
        anti_affinity,
        load_balance,
        priority,
        fair_share,
        locality,
        gang,
        bin_packing,
        queue,
        wfq,
    )
}


@pytest.fixture
def cluster() -> MemoryBackend:
    with escher.init(MemoryBackend(nodes={f"n{i}": {"CPU": 4} for i in range(4)})) as b:
        assert isinstance(b, MemoryBackend)
        yield b


@pytest.mark.parametrize("case", sorted(CASES))
def test_intent_is_proven(cluster: MemoryBackend, case: str) -> None:
    proven(CASES[case](cluster), cluster)


def test_paper_composition_pairs_load_balanced(cluster: MemoryBackend) -> None:
    """Co-located pairs under a load balancer: pairs together, at most 2 tasks per node."""
    with LoadBalance(tasks=8) as lb, CoLocation() as colo:
        plan = Plan()
        for i in range(4):
            pair: Policy = colo.group(f"p{i}", 2, CPU1, policy=lb)
            pair.declare(plan, f"p{i}", count=2, resources=CPU1)
        names = tuple(f"p{i}" for i in range(4))
        plan.add_intent(SpreadAtMost(names, source="LoadBalance over all pairs", per_node=2))
        proven(plan, cluster)


def test_spread_pairs_with_anti_affinity(cluster: MemoryBackend) -> None:
    with AntiAffinity(per_node=2) as spread, CoLocation() as colo:
        plan = Plan()
        for i in range(3):
            colo.group(f"s{i}", 2, CPU1, policy=spread).declare(
                plan, f"s{i}", count=2, resources=CPU1
            )
        plan.add_intent(SpreadAtMost(("s0", "s1", "s2"), source="pairs own nodes", per_node=2))
        proven(plan, cluster)


def test_a_claim_the_policy_does_not_make_is_refuted(cluster: MemoryBackend) -> None:
    """Load balancing at 2 per node does not separate tasks: Z3 finds a counterexample."""
    with LoadBalance(per_node=2) as lb:
        plan = lb.declare(None, "w", count=4, resources=CPU1)
        plan.add_intent(Separated(("w",), source="wrong claim"))
        result = verify(plan, cluster.get_cluster_state(), timeout=60)
        assert result.status is Verdict.FEASIBLE
        by_source = {i.intent.source: i for i in result.intents}
        assert by_source["wrong claim"].status is IntentStatus.VIOLATED
        assert by_source["wrong claim"].counterexample
        assert by_source[lb.source].status is IntentStatus.PROVEN


def test_an_oversized_group_is_infeasible_in_policy_terms(cluster: MemoryBackend) -> None:
    with CoLocation() as colo:
        group = colo.group("big", 5, CPU1)  # 5 CPUs on 4-CPU nodes: never placed
        assert group.node is None
        result = verify(
            group.declare(None, "big", count=5, resources=CPU1),
            cluster.get_cluster_state(),
            timeout=60,
        )
        assert result.status is Verdict.INFEASIBLE
        assert result.explanation is not None
        assert "big" in str(result.explanation.render())
