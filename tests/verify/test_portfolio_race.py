"""Engines side by side (`escher.verify.engines._portfolio`): the first accepted answer wins,
the other lanes and their children are stopped at once, the deadline holds."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from escher.core.cluster import ClusterState
from escher.core.plan import Plan, Separated
from escher.verify.engines import _portfolio
from escher.verify.engines._engine import decide

pytestmark = pytest.mark.skipif(not _portfolio.available(), reason="needs fork")


def _sleep(seconds: float, answer: str) -> str:
    time.sleep(seconds)
    return answer


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): read its state
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_first_accepted_answer_wins_and_the_others_stop_at_once() -> None:
    t0 = time.monotonic()
    got = _portfolio.race(
        {"slow": lambda: _sleep(60, "slow"), "fast": lambda: _sleep(0.05, "fast")},
        time.monotonic() + 30,
        lambda name, answer: True,
    )
    assert got.winner == "fast" and got.answer == "fast"
    assert got.silent == ["slow"]
    assert time.monotonic() - t0 < 10


def test_a_rejected_answer_does_not_win() -> None:
    got = _portfolio.race(
        {"wrong": lambda: _sleep(0.0, "bad"), "right": lambda: _sleep(0.3, "good")},
        time.monotonic() + 30,
        lambda name, answer: answer == "good",
    )
    assert got.winner == "right"
    assert got.others == {"wrong": "bad"}


def test_the_deadline_stops_every_lane_and_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    def spawns() -> str:
        child = subprocess.Popen(["sleep", "60"])
        pidfile.write_text(str(child.pid))
        time.sleep(60)
        return "never"

    t0 = time.monotonic()
    got = _portfolio.race({"spawns": spawns}, time.monotonic() + 1.0, lambda n, a: True)
    took = time.monotonic() - t0
    assert got.winner is None and got.silent == ["spawns"]
    assert took < 1.0 + _portfolio.REAP_SECONDS + 1.0
    deadline = time.monotonic() + 5
    pid = int(pidfile.read_text())
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_lane_that_raises_sends_no_answer() -> None:
    def boom() -> str:
        raise RuntimeError("no")

    got = _portfolio.race({"boom": boom}, time.monotonic() + 10, lambda n, a: True)
    assert got.winner is None and got.silent == ["boom"]


def _colouring(tasks: int, nodes: int, clique: int) -> tuple[Plan, ClusterState]:
    plan = Plan()
    for i in range(tasks):
        plan.add_task(f"t{i}", {"CPU": 1})
    for i in range(tasks):  # a cycle of separations, and a clique on the first tasks
        plan.add_intent(Separated((f"t{i}", f"t{(i + 1) % tasks}")))
    for a in range(clique):
        for b in range(a + 1, clique):
            plan.add_intent(Separated((f"t{a}", f"t{b}")))
    cluster = {"nodes": [{"id": f"n{j}", "total": {"CPU": tasks}} for j in range(nodes)]}
    return plan, ClusterState.from_dict(cluster)


@pytest.mark.parametrize(("tasks", "nodes", "clique", "expect"), [(61, 3, 3, "feasible")])
def test_side_by_side_agrees_with_in_turn(tasks: int, nodes: int, clique: int, expect: str) -> None:
    plan, state = _colouring(tasks, nodes, clique)
    for side_by_side in (True, False):
        d = decide(plan, state, deadline=time.monotonic() + 30, side_by_side=side_by_side)
        assert d.status == expect


def _triplets(nodes: int, seed: int, short: bool) -> tuple[Plan, ClusterState]:
    """Zero-slack: each node of capacity 1000 filled exactly by three tasks."""
    import random

    rng = random.Random(seed)
    plan = Plan()
    for i in range(nodes):
        x = rng.randint(250, 500)
        y = rng.randint(max(250, 500 - x), min(500, 750 - x))
        for j, size in enumerate((x, y, 1000 - x - y)):
            plan.add_task(f"t{i}-{j}", {"mem": size})
    kept = nodes - 1 if short else nodes
    cluster = {"nodes": [{"id": f"n{j}", "total": {"mem": 1000}} for j in range(kept)]}
    return plan, ClusterState.from_dict(cluster)


@pytest.mark.parametrize("seed", [3, 4])
def test_the_race_decides_what_greedy_cannot(seed: int) -> None:
    plan, state = _triplets(20, seed, short=False)
    d = decide(plan, state, deadline=time.monotonic() + 60)
    assert d.status == "feasible"
    assert "portfolio" in d.times  # greedy did not find it: a lane did, and was checked
    assert any(k.startswith("lane:") for k in d.times)
