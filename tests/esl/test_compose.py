"""Composition: AND (merged requests) and OR (ordered fallbacks / soft constraints)."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import escher
from escher import TaskState, ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import AllOf, AntiAffinity, CoLocation, FirstOf, LoadBalance, SoftTaskRef

from .conftest import WAIT, Tracker, wait_until


class Counted:
    """A task body that counts its runs (to prove nothing runs twice)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: Counter[str] = Counter()

    def __call__(self, key: str) -> str:
        with self.lock:
            self.runs[key] += 1
        return escher.node_id()


def test_and_merges_requests(backend: MemoryBackend) -> None:
    with LoadBalance(per_node=2) as lb, AntiAffinity() as aa:
        both = lb & aa
        assert isinstance(both, AllOf)
        assert dict(both.constraint().resources) == {lb.unit: 1, aa.unit: 1}
        assert (both & lb).policies == (lb, aa, lb)
        tracker = Tracker()
        refs = [both.launch(tracker.body, "x") for _ in range(6)]
        assert wait_until(lambda: tracker.running() == 4)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
    assert max(tracker.peak.values()) == 1  # the tighter of the two wins


def test_spread_pairs_of_colocated_tasks(backend: MemoryBackend) -> None:
    """The paper's 'spread pairs of co-located tasks': a pair owns a node."""
    tracker = Tracker()
    with AntiAffinity(per_node=2) as spread, CoLocation() as colo:
        pairs = [colo.group(f"p{i}", 2, {"CPU": 1}, policy=spread) for i in range(4)]
        refs = [p.launch(tracker.body, p.name) for p in pairs for _ in range(2)]
        assert wait_until(lambda: tracker.running() == 8)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
    by_pair = {p.name: {r.node_id for r in refs[2 * i : 2 * i + 2]} for i, p in enumerate(pairs)}
    assert all(len(nodes) == 1 for nodes in by_pair.values())
    assert len({next(iter(n)) for n in by_pair.values()}) == 4


def test_first_of_falls_back_after_timeout_in_virtual_time(vbackend: MemoryBackend) -> None:
    body = Counted()
    vbackend.set_resource("fast", 1, "n3")
    soft = FirstOf({"fast": 1, "CPU": 8}, {"fast": 1}, {"CPU": 1}, timeout=5.0)
    ref = soft.launch(body, "t")
    assert isinstance(ref, SoftTaskRef)
    assert escher.get(ref, timeout=100) == "n3"  # 8 CPUs never fit: skipped at once
    assert ref.alternative == 1 and len(ref.history) == 2
    assert ref.history[0].state is TaskState.FAILED
    assert body.runs == {"t": 1}
    assert vbackend.clock.now() == pytest.approx(0.0)
    # occupy 'fast' for 20 s, so the next task must fall back
    hog = escher.launch(body, "hog", resources={"fast": 1}, duration=20.0)
    ref2 = FirstOf({"fast": 1}, {"CPU": 1}, timeout=5.0).launch(body, "t2")
    assert escher.get(ref2, timeout=100) in {"n0", "n1", "n2", "n3"}
    assert ref2.alternative == 1 and ref2.history[0].state is TaskState.CANCELLED
    assert vbackend.clock.now() == pytest.approx(5.0)
    assert escher.get(hog, timeout=100) == "n3"
    assert body.runs == {"t": 1, "hog": 1, "t2": 1}


def test_first_of_keeps_an_attempt_that_started(backend: MemoryBackend) -> None:
    body = Counted()
    soft = FirstOf({"CPU": 1}, {"CPU": 2}, timeout=0.01)
    refs = [soft.launch(body, str(i)) for i in range(20)]
    escher.get(refs, timeout=WAIT)
    assert all(r.alternative == 0 for r in refs)  # type: ignore[attr-defined]
    assert body.runs == {str(i): 1 for i in range(20)}


def test_soft_constraints_never_run_twice_under_contention(backend: MemoryBackend) -> None:
    """Attempts race their timeouts on a busy cluster; every task runs exactly once."""
    body = Counted()
    backend.set_resource("slot", 1, "n0")
    soft = FirstOf({"slot": 1}, {"CPU": 1}, timeout=0.002)
    refs = [soft.launch(body, str(i)) for i in range(200)]
    escher.get(refs, timeout=WAIT)
    assert body.runs == {str(i): 1 for i in range(200)}
    for ref in refs:
        assert isinstance(ref, SoftTaskRef)
        assert all(a.state is TaskState.CANCELLED for a in ref.history[:-1])
        assert ref.history[-1].state is TaskState.FINISHED


def test_or_of_policies_and_cancel(backend: MemoryBackend) -> None:
    with AntiAffinity(nodes=["n0"]) as only_n0, LoadBalance(per_node=4) as lb:
        gate = threading.Event()
        first = only_n0.launch(gate.wait, WAIT)
        assert wait_until(first.started)
        either = FirstOf(only_n0, lb, timeout=0.05)
        ref = either.launch(escher.node_id)
        assert escher.get(ref, timeout=WAIT) in {"n0", "n1", "n2", "n3"}
        assert isinstance(ref, SoftTaskRef) and ref.alternative == 1
        blocked = FirstOf(only_n0, only_n0, timeout=0.05).launch(escher.node_id)
        assert blocked.cancel() is True
        assert blocked.state is TaskState.CANCELLED and blocked.done()
        gate.set()
        assert first.result(WAIT) is True
        assert isinstance(only_n0 | lb, FirstOf)


def test_bad_compositions(backend: MemoryBackend) -> None:
    other = MemoryBackend(nodes={"x": {"CPU": 1}})
    with LoadBalance(per_node=1) as lb, LoadBalance(other, per_node=1) as lb2:
        with pytest.raises(ValidationError):
            AllOf(lb, lb2)
        with pytest.raises(ValidationError):
            FirstOf()
        with pytest.raises(ValidationError):
            FirstOf(lb, 3)  # type: ignore[arg-type]
    other.close()
