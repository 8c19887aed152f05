"""Launch by the proof (`escher.esl.follow`): a run follows the verified witness."""

from __future__ import annotations

import functools
import threading

import pytest

import escher
from escher import esl
from escher.backends.memory import MemoryBackend
from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.plan import Plan
from escher.core.resources import Resources
from escher.core.task import TaskRef
from escher.verify import Verdict, verify
from tests.support.planning import hold, plan_and_run


def sized(*cpus: float) -> ClusterState:
    nodes = {}
    for i, c in enumerate(cpus):
        total = Resources({"CPU": c})
        nodes[f"n{i}"] = Node(f"n{i}", total, total, {})
    return ClusterState(nodes)


def small_then_big() -> None:
    """First fit puts the small group on the big node and strands the big group."""
    colo = esl.CoLocation(name="colo")
    small = colo.group("small", 2, {"CPU": 1})
    big = colo.group("big", 4, {"CPU": 1})
    for group, size in ((small, 2), (big, 4)):
        for _ in range(size):
            group.launch(hold)


def three_sizes_shared_policy() -> None:
    """One anti-affinity shared by groups of three sizes (the groups never share a node)."""
    aa = esl.AntiAffinity(per_node=4, name="aa")
    colo = esl.CoLocation(name="mixed")
    groups = [colo.group(f"g{s}", s, {"CPU": 1}, policy=aa) for s in (1, 2, 3)]
    for group, size in zip(groups, (1, 2, 3), strict=True):
        for _ in range(size):
            group.launch(hold)


@pytest.mark.parametrize(
    ("app", "state"),
    [
        (small_then_big, sized(4, 2)),
        (small_then_big, sized(2, 4)),
        (three_sizes_shared_policy, sized(3, 1, 2)),
        (three_sizes_shared_policy, sized(2, 3, 1)),
    ],
)
def test_a_run_that_follows_the_witness_places_every_task(app: object, state: ClusterState) -> None:
    outcome = plan_and_run(app, state)  # type: ignore[arg-type]
    assert outcome.result.status is Verdict.FEASIBLE, outcome.result.render()
    assert outcome.all_placed, (outcome.placement, outcome.result.witness)
    assert outcome.violations() == []


def test_without_the_witness_first_fit_strands_the_big_group() -> None:
    """The gap `follow` closes: the same plan, proven feasible, run first fit."""
    outcome = plan_and_run(small_then_big, sized(4, 2), settle=1.0, follow=False)
    assert outcome.result.status is Verdict.FEASIBLE
    assert not outcome.all_placed


def test_follow_needs_a_witness() -> None:
    with pytest.raises(ValidationError, match="FEASIBLE"), esl.follow(Plan(), None):
        pass
    with esl.follow(Plan(), {}) as guide:
        assert guide.groups == {}


def plain_then_group() -> None:
    """First fit puts the plain tasks on the big node and strands the group after them."""
    for _ in range(2):
        escher.launch(hold, resources={"CPU": 1}, name="plain")
    big = esl.CoLocation(name="colo").group("big", 4, {"CPU": 1})
    for _ in range(4):
        big.launch(hold)


def spread_then_group() -> None:
    """Tasks of another ESL (anti-affinity) take room a later group needs."""
    aa = esl.AntiAffinity(per_node=2, name="aa")
    for _ in range(2):
        aa.launch(hold, resources={"CPU": 1}, name="unit")
    big = esl.CoLocation(name="colo").group("big", 3, {"CPU": 1})
    for _ in range(3):
        big.launch(hold)


@pytest.mark.parametrize(
    ("app", "state"),
    [
        (plain_then_group, sized(4, 2)),
        (plain_then_group, sized(1, 4, 2)),
        (spread_then_group, sized(3, 2)),
        (spread_then_group, sized(1, 3, 1)),
    ],
)
def test_plain_and_other_esl_tasks_follow_the_witness(app: object, state: ClusterState) -> None:
    unguided = plan_and_run(app, state, settle=1.0, follow=False)  # type: ignore[arg-type]
    assert unguided.result.status is Verdict.FEASIBLE, unguided.result.render()
    assert not unguided.all_placed, unguided.placement  # first fit strands the group
    outcome = plan_and_run(app, state)  # type: ignore[arg-type]
    assert outcome.all_placed, (outcome.placement, outcome.result.witness)
    assert outcome.violations() == []


def quick() -> str:
    return escher.node_id()


def two_quick_tasks() -> list[str]:
    refs = [escher.launch(quick, resources={"CPU": 1}, name="quick") for _ in range(2)]
    return list(escher.get(refs, timeout=10))


def test_plain_tasks_run_on_the_witness_nodes_and_the_pins_go_away() -> None:
    state = sized(1, 1, 2)
    run = esl.plan_app(two_quick_tasks, state)
    result = verify(run.plan, state, timeout=30)
    wanted = sorted(result.witness["quick"])
    backend = MemoryBackend(nodes={"n0": {"CPU": 1}, "n1": {"CPU": 1}, "n2": {"CPU": 2}})
    with escher.init(backend):
        with esl.follow(run, result) as guide:
            assert sorted(two_quick_tasks()) == wanted
            assert guide.tasks == {"quick": tuple(result.witness["quick"])}
        labels = {label for n in backend.get_cluster_state().nodes.values() for label in n.total}
        assert not any(label.startswith("follow") for label in labels), labels


def one_quick_task() -> None:
    escher.launch(quick, resources={"CPU": 1}, name="quick")


def _pinned(ref: object) -> bool:
    return any(label.startswith("follow") for label in ref.spec.resources)  # type: ignore[attr-defined]


def test_follow_steers_its_own_thread_not_another_one_launching_meanwhile() -> None:
    state = sized(1, 1)
    run = esl.plan_app(one_quick_task, state)
    witness = {"quick": ["n1"]}
    backend = MemoryBackend(nodes={"n0": {"CPU": 1}, "n1": {"CPU": 1}})
    inside, outside_done = threading.Event(), threading.Event()
    outside: list[TaskRef] = []

    def other_thread() -> None:
        assert inside.wait(timeout=10)
        outside.append(escher.launch(quick, resources={"CPU": 1}, name="quick"))
        outside_done.set()

    with escher.init(backend):
        thread = threading.Thread(target=other_thread)
        thread.start()
        with esl.follow(run, witness):
            inside.set()
            assert outside_done.wait(timeout=10)  # launched while this thread is inside
            mine = escher.launch(quick, resources={"CPU": 1}, name="quick")
        thread.join(timeout=10)
        assert escher.get(mine, timeout=10) == "n1"
        assert _pinned(mine)
        assert outside and not _pinned(outside[0])  # first fit, as without a guide
        assert escher.get(outside[0], timeout=10) == "n0"


def test_a_timer_the_block_starts_is_steered_and_one_firing_after_it_is_not() -> None:
    state = sized(1, 1)
    run = esl.plan_app(one_quick_task, state)
    backend = MemoryBackend(nodes={"n0": {"CPU": 1}, "n1": {"CPU": 1}})
    launched: list[TaskRef] = []
    fired = [threading.Event(), threading.Event()]

    def launch_from_timer(i: int) -> None:
        launched.append(escher.launch(quick, resources={"CPU": 1}, name="quick"))
        fired[i].set()

    with escher.init(backend):
        release = threading.Event()
        with esl.follow(run, {"quick": ["n1"]}):
            backend.clock.call_later(0.0, functools.partial(launch_from_timer, 0))
            assert fired[0].wait(timeout=10)  # on the clock's thread, in the block's context
            backend.clock.call_later(0.0, lambda: release.wait(10) and launch_from_timer(1))
        release.set()
        assert fired[1].wait(timeout=10)
        first, late = launched
        assert _pinned(first) and escher.get(first, timeout=10) == "n1"
        assert not _pinned(late)  # the block had ended: placed as without a guide
