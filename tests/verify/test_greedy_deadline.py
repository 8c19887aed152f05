"""The greedy stage within its share of the deadline: a pass cut short answers nothing and
leaves the rest of the budget to the engines after it."""

from __future__ import annotations

import random
import time

import pytest

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify.engines import _engine
from escher.verify.engines._greedy import STRATEGIES, _order_nodes, greedy
from escher.verify.model import Problem, Timeout
from escher.verify.model._model import build


def _many_types(n_nodes: int, seed: int) -> Problem:
    """Nodes of three resources, each of a capacity of its own (as many node types as
    nodes, as in a tight packing), and tasks of many shapes that nearly fill them."""
    rng = random.Random(seed)
    plan = Plan()
    nodes = []
    for i in range(n_nodes):
        cap = {"CPU": rng.randint(16, 64), "memory": rng.randint(64, 256), "disk": 500 + i}
        nodes.append({"id": f"n{i:04d}", "total": cap})
        for k in range(3):
            shape = {r: max(1, q // 4 - rng.randint(0, 2)) for r, q in cap.items()}
            plan.add_task(f"t{i}-{k}", shape, source=f"task {i}-{k}")
    return build(plan, ClusterState.from_dict({"nodes": nodes}))


@pytest.fixture(scope="module")
def big() -> Problem:
    p = _many_types(400, 11)
    assert len(p.types) >= 300  # the per-type loops are what must look at the deadline
    return p


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_greedy_pass_past_its_deadline_stops_with_no_answer(big: Problem, strategy: str) -> None:
    with pytest.raises(Timeout):
        greedy(big, deadline=time.monotonic() - 1.0, strategy=strategy)


def test_ordering_the_node_types_looks_at_the_deadline(big: Problem) -> None:
    it = big.items[0]
    assert len(_order_nodes(big, it, "align")) == len(big.node_ids)
    with pytest.raises(Timeout):
        _order_nodes(big, it, "align", deadline=time.monotonic() - 1.0)


def test_a_greedy_pass_stops_inside_a_class_once_its_deadline_passes(
    big: Problem, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clock that passes the deadline after a few reads: the pass stops there, in the
    middle of its first class, not after the classes it was on."""
    reads = 0

    def clock() -> float:
        nonlocal reads
        reads += 1
        return float(reads)

    monkeypatch.setattr("escher.verify.engines._greedy.time.monotonic", clock)
    with pytest.raises(Timeout):
        greedy(big, deadline=3.5, strategy="align")
    assert reads < 10  # a few reads past the deadline, not a whole class


def test_the_greedy_stage_keeps_to_its_share_and_answers_nothing_when_cut() -> None:
    p = _many_types(60, 3)
    run = _engine._Run(p, time.monotonic() + 100.0, None)
    until = _engine.greedy_until(run)
    assert until <= time.monotonic() + 100.0 * _engine.GREEDY_SHARE
    assert _engine.GREEDY_SHARE <= 0.25  # the engines after it keep most of the budget
    late = _engine._Run(p, time.monotonic() - 1.0, None)
    assert _engine.greedy_until(late) <= time.monotonic()
    assert _engine._greedy_stage(late) is None  # no witness, and no Timeout out of it


def test_greedy_within_its_share_still_finds_the_easy_witnesses() -> None:
    """Room to spare: the first order places everything long before its share ends."""
    plan = Plan()
    plan.add_task("a", {"CPU": 2}, count=300, source="a")
    nodes = [{"id": f"n{i}", "total": {"CPU": 8}} for i in range(100)]
    p = build(plan, ClusterState.from_dict({"nodes": nodes}))
    got = _engine._greedy_stage(_engine._Run(p, time.monotonic() + 60.0, None))
    assert got is not None and got.status == "feasible"
