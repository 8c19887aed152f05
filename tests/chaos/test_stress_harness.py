"""The stress harness finds what it claims to find: each check fails on a backend built to break it.

Every broken backend here is the in-memory backend with one defect put in on purpose; a
correct backend passes the same run (the first test), so each check can fail and does.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from escher.backends.memory import MemoryBackend
from escher.backends.memory.backend import _Running
from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.resources import Resources
from escher.testing._stress_check import Checker, Timeline
from escher.testing.stress import StressConfig, StressReport, run_stress, stress_body

pytestmark = pytest.mark.chaos

NODES = {f"n{i}": {"CPU": 4} for i in range(3)}
SMALL = StressConfig(threads=4, operations=150, seed=5, drain_timeout=20, op_timeout=20)


def run(backend: MemoryBackend, **overrides: Any) -> StressReport:
    try:
        return run_stress(backend, SMALL, **overrides)
    finally:
        backend.close()


def test_a_correct_backend_passes() -> None:
    report = run(MemoryBackend(nodes=NODES))
    report.assert_ok()
    assert report.operations == 600 and report.tasks > 0 and report.runs >= report.tasks / 2
    assert report.nodes_killed > 0 and report.by_kind["launch"] > 0


def test_file_reports_give_the_same_verdict() -> None:
    """The path process-based backends use: bodies append to files, a monitor reads them."""
    report = run(MemoryBackend(nodes=NODES), report_via="files")
    report.assert_ok()
    assert report.runs > 0


class _Overcommitting(MemoryBackend):
    """Reports half the CPUs it schedules on: runs exceed what the nodes claim to have."""

    def get_cluster_state(self) -> ClusterState:
        state = super().get_cluster_state()
        nodes = {}
        for node_id, node in state.nodes.items():
            half = {**node.total, "CPU": node.total.get("CPU", 0) / 2}
            nodes[node_id] = Node(
                node_id,
                Resources(half),
                Resources({k: min(v, half.get(k, v)) for k, v in node.available.items()}),
                node.labels,
                ephemeral=node.ephemeral,
            )
        return ClusterState(nodes, state.time)


def test_overcommit_is_caught() -> None:
    report = run(_Overcommitting(nodes=NODES), max_hold=0.2, fail_fast=False)
    assert report.over_commits and "CPU in use > capacity" in report.over_commits[0]


class _Doubling(MemoryBackend):
    """Runs every tenth body twice."""

    def _run_real(self, run: _Running) -> None:
        if int(run.ref.id[1:]) % 10 == 0 and run.ref.spec.fn is stress_body:
            self._call(run)
        super()._run_real(run)


def test_doubled_runs_are_caught() -> None:
    report = run(_Doubling(nodes=NODES))
    assert report.doubled and "ran 2 times" in report.doubled[0]


class _Losing(MemoryBackend):
    """Settles every seventh task with its expected value without running its body."""

    def _run_real(self, run: _Running) -> None:
        if int(run.ref.id[1:]) % 7 == 0 and run.ref.spec.fn is stress_body:
            self._complete(run, run.ref.spec.args[1], None)
            return
        super()._run_real(run)


def test_lost_tasks_are_caught() -> None:
    report = run(_Losing(nodes=NODES))
    assert report.lost and "after 0 runs" in report.lost[0]


class _Hanging(MemoryBackend):
    """Never finishes one task in thirteen (it holds its resources forever)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stuck: set[str] = set()  # ids of the tasks it never finishes

    def _run_real(self, run: _Running) -> None:
        if run.ref.spec.fn is not stress_body or int(run.ref.id[1:]) % 13 != 0:
            super()._run_real(run)
            return
        self.stuck.add(run.ref.id)


def test_stuck_handles_are_reported_as_hung() -> None:
    """Every task the backend never finishes is reported, whatever else the short drain
    leaves unfinished or however slow the machine is (no node loss: a stuck task's node
    could be removed and the task failed, which is not a hang)."""
    backend = _Hanging(nodes=NODES)
    report = run(backend, drain_timeout=1.0, node_loss=False)
    assert backend.stuck
    for task_id in backend.stuck:
        assert any(f"({task_id}) still running" in line for line in report.hung), task_id
    assert report.leaked  # the stuck tasks never gave their CPUs back


class _RawErrors(MemoryBackend):
    """set_resource raises a KeyError now and then (a raw error at the API boundary)."""

    _calls = 0
    _lock = threading.Lock()

    def _set_resource(self, label: str, capacity: float, spec: Any) -> list[str]:
        with self._lock:
            type(self)._calls += 1
            if self._calls % 5 == 0:
                raise KeyError(label)
        return super()._set_resource(label, capacity, spec)


def test_raw_errors_are_caught() -> None:
    report = run(_RawErrors(nodes=NODES), node_loss=False)
    assert report.raw_errors and "KeyError" in report.raw_errors[0]


def test_config_is_validated() -> None:
    for bad in ({"threads": 0}, {"operations": -1}, {"max_hold": float("nan")}):
        with pytest.raises(ValidationError):
            StressConfig(**bad)
    with pytest.raises(ValidationError, match="report_via"):
        StressConfig(report_via="carrier pigeon")


def test_timeline_bounds_what_a_label_may_have_been() -> None:
    line = Timeline()
    line.end(line.begin(3.0, 1.0), 2.0)  # 3 from t=1..2
    line.end(line.begin(1.0, 5.0), 6.0)  # shrunk to 1 from t=5..6
    assert line.max_between(7.0, 8.0) == 1.0  # only the shrink is in effect later
    assert line.max_between(3.0, 4.0) == 3.0
    assert line.max_between(4.0, 5.5) == 3.0  # the shrink may not have applied yet
    racing = line.begin(2.0, 6.5)
    assert line.max_between(7.0, 8.0) == 2.0  # in flight: may be applied
    line.end(racing, 9.0)
    assert line.max_between(10.0, 11.0) == 2.0
    assert Timeline().max_between(0.0, 1.0) == 0.0


def test_checker_counts_churn_label_use_held_since_launch() -> None:
    checker = Checker({}, frozenset({"lbl"}))
    checker.add_node("n", 4)
    index = checker.begin_write("n", "lbl", 1.0)
    checker.end_write("n", "lbl", index)
    checker.register("a", Resources({"lbl": 1}), 0.0)
    checker.event("S", "a", "ta", "n")
    checker.register("b", Resources({"lbl": 1}), checker._running["n"]["ta"].start + 1e-6)
    checker.event("S", "b", "tb", "n")  # a held the only unit all along: over-committed
    assert len(checker.violations) == 1 and "task b" in checker.violations[0]
