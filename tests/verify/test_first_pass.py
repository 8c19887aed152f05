"""The in-process first pass before the race (`_first_dive`): an easy plan that the greedy
orders miss is placed by a short dive with no process started; a plan the dive does not
place still goes to the race, and choosing its lanes loads no engine's numerical library."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from escher.core.cluster import ClusterState
from escher.verify.engines import _engine, _portfolio, decide
from escher.verify.model import build
from tests.verify._bench import bench

ROOT = Path(__file__).resolve().parents[2]


def _no_race(*_: Any, **__: Any) -> Any:
    raise AssertionError("the race started for a plan the first pass places")


@pytest.mark.parametrize(
    ("n", "seed", "grouped"), [(100, 7, True), (100, 7, False), (100, 3, True), (1000, 8, True)]
)
def test_easy_plans_are_placed_without_a_process(
    monkeypatch: pytest.MonkeyPatch, n: int, seed: int, grouped: bool
) -> None:
    plan, cluster, feasible = bench().family(n, "a", seed, grouped=grouped)
    assert feasible
    monkeypatch.setattr(_portfolio, "race", _no_race)
    # the budget is wall time; a loaded machine must not decide what this test sees
    monkeypatch.setattr(_engine, "FIRST_DIVE_MIN", 30.0)
    monkeypatch.setattr(_engine, "FIRST_DIVE_MAX", 30.0)
    d = decide(plan, ClusterState.from_dict(cluster), deadline=time.monotonic() + 60)
    assert d.status == "feasible", d.method
    assert d.method.startswith(("greedy", "packing search (dive)")), d.method


def test_the_dive_budget_follows_the_greedy_time() -> None:
    plan, cluster, _ = bench().tight(100, 7)
    state = ClusterState.from_dict(cluster)
    deadline = time.monotonic() + 60
    run = _engine._Run(build(plan, state, deadline=deadline), deadline, None)
    run.times["greedy"] = 10.0  # a slow greedy pass: the dive still stops at the cap
    t0 = time.monotonic()
    _engine._first_dive(run)
    assert time.monotonic() - t0 < _engine.FIRST_DIVE_MAX + 1.0  # slack for a loaded machine


def test_a_hard_plan_still_races_and_decides() -> None:
    plan, cluster, feasible = bench().tight_variant(bench().tight(20, 7), "short", 7)
    d = decide(plan, ClusterState.from_dict(cluster), deadline=time.monotonic() + 60)
    assert d.status == ("feasible" if feasible else "infeasible"), d.method


def test_choosing_lanes_loads_no_numpy() -> None:
    """The parent picks the lanes of a tight packing without importing numpy or scipy
    (the neighbourhood search imports them in its own process)."""
    code = (
        "import json, sys, time\n"
        "from tests.verify._bench import bench\n"
        "from escher.core.cluster import ClusterState\n"
        "from escher.verify.engines import _engine\n"
        "from escher.verify.model import build\n"
        "plan, cluster, _ = bench().tight(100, 7)\n"
        "dl = time.monotonic() + 60\n"
        "run = _engine._Run(build(plan, ClusterState.from_dict(cluster), deadline=dl), dl, None)\n"
        "lanes = sorted(_engine._lanes(run))\n"
        "print(json.dumps([lanes, [m for m in ('numpy', 'scipy') if m in sys.modules]]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr
    lanes, loaded = json.loads(out.stdout.splitlines()[-1])
    assert "lns" in lanes and loaded == []


def test_a_first_dive_out_of_time_leaves_the_plan_to_the_race(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The dive's own budget running out (building its table raises `Timeout`) is not the
    run's deadline: the race still decides (at 10,000 nodes the table alone takes longer
    than the first pass's budget)."""
    monkeypatch.setattr(_engine, "FIRST_DIVE_MIN", 0.0)
    monkeypatch.setattr(_engine, "FIRST_DIVE_MAX", 0.0)
    plan, cluster, _ = bench().family(100, "a", 7)
    d = decide(plan, ClusterState.from_dict(cluster), deadline=time.monotonic() + 60)
    assert d.status == "feasible", d.reason
