"""The planning run: the plan comes from the launching code itself.

For each ESL and composition the docs show, the same app is planned, its plan verified,
then run on the in-memory backend over the same cluster: the real placement must satisfy
every intent the verifier proved (and a feasible plan must place every task).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import escher
from escher import esl
from escher.core.plan import Colocated, Gang, PinnedTo, Separated, SpreadAtMost
from escher.verify import Verdict, find_repairs, verify
from tests.support.planning import cluster, hold, plan_and_run


def colocation_known() -> None:
    colo = esl.CoLocation(name="colo")
    for g in range(3):
        group = colo.group(f"pair-{g}", 2, {"CPU": 1})
        for _ in range(2):
            group.launch(hold)


def colocation_unknown() -> None:
    colo = esl.CoLocation(name="colo")
    group = colo.unknown_group("u", 3, resources={"CPU": 1})
    for _ in range(3):
        group.launch(hold)


def shared_anti_affinity() -> None:
    """The issue's app: two groups share one anti-affinity, plus a gang."""
    aa = esl.AntiAffinity(per_node=3, name="aa")
    colo = esl.CoLocation(name="colo")
    shards = [colo.group(f"shard-{s}", 3, {"CPU": 2}, policy=aa) for s in range(2)]
    for shard in shards:
        for i in range(3):
            shard.launch(hold, i)
    gang = esl.Gang(name="trainers")
    gang.run([esl.Member(hold, resources={"CPU": 1}, name="trainer") for _ in range(2)])


def anti_affinity() -> None:
    aa = esl.AntiAffinity(name="aa")
    for _ in range(3):
        aa.launch(hold, resources={"CPU": 1})


def anti_affinity_groups() -> None:
    aa = esl.AntiAffinity(name="aa")
    for name in ("a", "b"):
        for _ in range(2):
            aa.group(name).launch(hold, resources={"CPU": 1})


def load_balance_and_pairs() -> None:
    lb = esl.LoadBalance(tasks=8, name="lb")
    colo = esl.CoLocation(name="colo")
    pairs = [colo.group(f"pair-{p}", 2, {"CPU": 1}, policy=lb) for p in range(4)]
    for pair in pairs:
        for _ in range(2):
            pair.launch(hold)


def and_composition() -> None:
    lb = esl.LoadBalance(per_node=1, name="lb")
    aa = esl.AntiAffinity(per_node=2, name="aa")
    both = lb & aa
    for _ in range(3):
        both.launch(hold, resources={"CPU": 1})


def bin_packing() -> None:
    pack = esl.BinPacking(name="pack")
    for _ in range(5):
        pack.launch(hold, resources={"CPU": 1})


def node_affinity() -> None:
    ssd = esl.NodeAffinity({"disk": "ssd"}, name="ssd")
    for _ in range(3):
        ssd.launch(hold, resources={"CPU": 1})


def domain_anti_affinity() -> None:
    one = esl.DomainAntiAffinity("zone", name="zones")
    for _ in range(2):
        one.launch(hold, resources={"CPU": 1})


def domain_spread() -> None:
    even = esl.DomainSpread("zone", max_skew=1, name="even")
    for _ in range(4):
        even.launch(hold, resources={"CPU": 1})


def domain_colocation() -> None:
    colo = esl.DomainColocation("zone", name="dcolo")
    team = colo.group("team", size=3, resources={"CPU": 1})
    for _ in range(3):
        team.launch(hold)


def preferences() -> None:
    soft = esl.Preferences(esl.PreferNodes(ids=["n2"]), name="soft")
    aa = esl.AntiAffinity(name="aa")
    policy = aa & soft
    for _ in range(3):
        policy.launch(hold, resources={"CPU": 1})


def fair_share() -> None:
    fair = esl.FairShare(slots_per_node=2, name="fair")
    alice = fair.create_user("alice")
    for _ in range(3):
        alice.launch(hold, resources={"CPU": 1})


def gang_alone() -> None:
    gang = esl.Gang(name="g")
    gang.run([esl.Member(hold, resources={"CPU": 2}, name="worker") for _ in range(3)])


def data_locality() -> None:
    loc = esl.DataLocality(name="loc")
    loc.add("shard", ["n1"])
    for _ in range(2):
        loc.near("shard").launch(hold, resources={"CPU": 1})


def task_queue() -> None:
    queue = esl.TaskQueue(rate=2, name="q")
    for _ in range(5):
        queue.launch(hold, resources={"CPU": 1})


def priorities() -> None:
    prio = esl.Priority(levels=3, name="prio")
    prio.high.launch(hold, resources={"CPU": 1})
    prio.low.launch(hold, resources={"CPU": 1})


def weighted_queues() -> None:
    wfq = esl.WeightedFairQueue({"gold": 3, "bronze": 1}, slots_per_node=4, name="wfq")
    for _ in range(3):
        wfq.queue("gold").launch(hold, resources={"CPU": 1})
    wfq.queue("bronze").launch(hold, resources={"CPU": 1})


def first_of() -> None:
    """A fallback whose first alternative fits: the plan proves that one."""
    aa = esl.AntiAffinity(name="aa")
    soft = esl.FirstOf(aa, {"CPU": 1}, timeout=10)
    for _ in range(3):
        soft.launch(hold, resources={"CPU": 1})


def fair_and_anti_affinity() -> None:
    fair = esl.FairShare(slots_per_node=4, name="fair")
    aa = esl.AntiAffinity(name="aa")
    alice = fair.create_user("alice")
    for _ in range(3):
        (alice & aa).launch(hold, resources={"CPU": 1})


def zoned(i: int) -> dict[str, str]:
    return {"zone": "ab"[i % 2], "disk": "ssd" if i < 2 else "hdd"}


APPS: list[tuple[Callable[[], Any], int]] = [
    (colocation_known, 4),
    (colocation_unknown, 4),
    (shared_anti_affinity, 8),  # 8 CPUs each
    (anti_affinity, 4),
    (anti_affinity_groups, 4),
    (load_balance_and_pairs, 4),
    (and_composition, 4),
    (bin_packing, 4),
    (node_affinity, 4),
    (domain_anti_affinity, 4),
    (domain_spread, 4),
    (domain_colocation, 4),
    (preferences, 4),
    (fair_share, 4),
    (gang_alone, 4),
    (data_locality, 4),
    (task_queue, 4),
    (priorities, 4),
    (weighted_queues, 4),
    (first_of, 4),
    (fair_and_anti_affinity, 4),
]


@pytest.mark.parametrize(("app", "count"), APPS, ids=[a.__name__ for a, _ in APPS])
def test_the_run_keeps_every_proven_intent(app: Callable[[], Any], count: int) -> None:
    cpus = 8 if app is shared_anti_affinity else 4
    outcome = plan_and_run(app, cluster(count, cpus=cpus, labels=zoned))
    assert outcome.result.status is Verdict.FEASIBLE, outcome.result.render()
    # (what only a FirstOf's preferred alternative promises is a preference; a queue's
    # promise is about time, which its warning states: tests/esl/test_planning_pages.py)
    promised = outcome.result.intents or any(i.preferred for i in outcome.plan.intents)
    assert promised or app is task_queue, "every ESL promises something"
    assert outcome.all_placed, (outcome.placement, outcome.planned)
    assert outcome.violations() == []


def test_a_shared_anti_affinity_keeps_its_groups_apart() -> None:
    outcome = plan_and_run(shared_anti_affinity, cluster(8, cpus=8))
    intents = [r.intent for r in outcome.result.intents]
    apart = [i for i in intents if isinstance(i, Separated)]
    assert len(apart) == 1 and "never share a node" in apart[0].source

    def replicas(names: tuple[str, ...]) -> int:
        return sum(outcome.plan.task(n).count for n in names)

    assert any(isinstance(i, SpreadAtMost) and replicas(i.tasks) == 6 for i in intents)
    assert sum(isinstance(i, Colocated) for i in intents) == 2
    assert any(isinstance(i, Gang) and i.source == "Gang('trainers')" for i in intents)
    assert all(r.status.value == "proven" for r in outcome.result.intents)
    shards = [outcome.placement[t][0] for t in apart[0].tasks]
    assert len(set(shards)) == 2


def test_a_group_is_planned_on_some_node_with_room_not_a_node_of_this_cluster() -> None:
    plan = esl.plan_app(colocation_known, cluster(4)).plan
    assert not any(r.node_spec.node_id for r in plan.resources)
    creators = [t for t in plan.tasks if t.creates]
    assert len(creators) == 3 and all(c.creates[0].capacity == 1 for c in creators)


def test_the_same_code_gives_the_same_plan_file(tmp_path: Any) -> None:
    state = cluster(8, cpus=8)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    esl.plan_app(shared_anti_affinity, state).plan.save(first)
    esl.plan_app(shared_anti_affinity, state).plan.save(second)
    assert first.read_bytes() == second.read_bytes()
    assert (
        escher.Plan.load(first).to_dict()
        == esl.plan_app(shared_anti_affinity, state).plan.to_dict()
    )


def test_an_infeasible_app_does_not_place_every_task() -> None:
    def too_many() -> None:
        aa = esl.AntiAffinity(name="aa")
        for _ in range(5):
            aa.launch(hold, resources={"CPU": 1})

    outcome = plan_and_run(too_many, cluster(4))
    assert outcome.result.status is Verdict.INFEASIBLE
    assert not outcome.all_placed


def test_ghost_anti_affinity_is_planned_as_its_tasks() -> None:
    def ghosts() -> None:
        aa = esl.AntiAffinity(ghost=True, name="g")
        for _ in range(3):
            aa.launch(hold, resources={"CPU": 1})

    run = esl.plan_app(ghosts, cluster(4))
    assert [(t.name, t.count) for t in run.plan.tasks] == [("hold", 3)]  # alike: replicas
    assert [type(i) for i in run.plan.intents] == [Separated]


def test_bin_packing_pins_to_its_pack_nodes() -> None:
    plan = esl.plan_app(bin_packing, cluster(4)).plan
    pinned = [i for i in plan.intents if isinstance(i, PinnedTo)]
    assert len(pinned) == 1 and sum(plan.task(t).count for t in pinned[0].tasks) == 5


def test_a_plan_verifies_against_another_cluster_without_pinned_nodes() -> None:
    plan = esl.plan_app(shared_anti_affinity, cluster(8, cpus=8)).plan
    six = escher.ClusterState(
        {
            f"other-{i}": escher.Node(
                f"other-{i}", escher.Resources({"CPU": 6}), escher.Resources({"CPU": 6})
            )
            for i in range(3)
        }
    )
    result = verify(plan, six)
    assert result.feasible and result.warnings == ()
    assert all(r.status.value == "proven" for r in result.intents)


def test_launches_of_one_name_are_replicas_of_one_task() -> None:
    """Six alike launches of `web` are `web` x6, so repairs read `web: 6 -> 4`; launches of
    one name that differ (request, policy) stay tasks of their own, named as before."""

    def web() -> None:
        for _ in range(6):
            escher.launch(hold, resources={"CPU": 2}, name="web")
        escher.launch(hold, resources={"CPU": 1}, name="web")  # another request
        aa = esl.AntiAffinity(name="aa")
        for _ in range(2):
            aa.launch(hold, resources={"CPU": 1}, name="web")  # another policy

    state = cluster(2)
    run = esl.plan_app(web, state)
    assert [(t.name, t.count) for t in run.plan.tasks] == [("web", 6), ("web-7", 1), ("web-8", 2)]
    assert run.replicas["web-6"] == "web" and run.replicas["web-9"] == "web-8"
    assert esl.plan_app(web, state).plan.to_dict() == run.plan.to_dict()
    result = verify(run.plan, state)
    assert result.status is Verdict.INFEASIBLE
    found = find_repairs(run.plan, state, timeout=30)
    texts = [r.render() for r in found.repairs]
    assert any("web: 6 -> " in t for t in texts), texts


def test_tasks_already_launched_are_planned_by_the_same_recording() -> None:
    """`plan_tasks` (what `escher view` verifies): tasks as launched, with their promises."""
    from escher.backends.memory import MemoryBackend

    with escher.init(MemoryBackend(nodes={"n0": {"CPU": 1}, "n1": {"CPU": 1}})):
        aa = esl.AntiAffinity(name="aa")
        refs = [aa.launch(escher.node_id, resources={"CPU": 1}, name="w") for _ in range(3)]
        plan = esl.plan_tasks(aa, refs)
    assert [(t.name, t.count) for t in plan.tasks] == [("w", 3)]
    assert [i.describe() for i in plan.intents] == ["no two of (w) in one node"]
    assert not plan.resources  # the policy's labels are on the cluster already
