"""Priorities, weighted fair queuing, hierarchical fair sharing, signals, queues, locality."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import (
    AntiAffinity,
    Barrier,
    DataLocality,
    FairShare,
    FirstOf,
    Priority,
    Signals,
    SoftTaskRef,
    TaskQueue,
    WeightedFairQueue,
)
from escher.esl._fair import split

from .conftest import WAIT, Tracker, ephemeral_labels, wait_until


def test_split_follows_weights() -> None:
    assert split(4, {"a": 3, "b": 1}) == {"a": 3, "b": 1}
    assert split(4, {"a": 1, "b": 1, "c": 1}) == {"a": 2, "b": 1, "c": 1}
    assert split(5, {"a": 0, "b": 2}) == {"a": 0, "b": 5}
    assert sum(split(7, {"a": 1.5, "b": 2.5, "c": 3}).values()) == 7


def test_priority_low_never_shares_a_node_with_high(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with Priority(levels=10) as prio:
        highs = [
            prio.high.launch(tracker.body, "high", "low", resources={"CPU": 1}) for _ in range(8)
        ]  # fill n0 and n1
        lows = [prio.low.launch(tracker.body, "low", "high") for _ in range(4)]
        assert wait_until(lambda: tracker.running() == 10)
        assert {r.node_id for r in highs} == {"n0", "n1"}
        assert sorted(r.node_id for r in lows if r.started()) == ["n2", "n3"]  # idle nodes
        more = prio.high.launch(tracker.body, "high", "low", resources={"CPU": 1})
        assert not more.started()  # n0, n1 have no CPU left; the lows hold n2, n3 whole
        tracker.gate.set()
        highs.append(more)
        escher.get(highs + lows, timeout=WAIT)
    assert tracker.overlaps == []
    assert max(v for (g, _), v in tracker.peak.items() if g == "low") == 1


def test_weighted_fair_queue_capacities_follow_weights(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with WeightedFairQueue({"gold": 3, "bronze": 1}, slots_per_node=4) as wfq:
        assert wfq.shares() == {
            "gold": {f"n{i}": 3 for i in range(4)},
            "bronze": {f"n{i}": 1 for i in range(4)},
        }
        refs = [wfq.queue(q).launch(tracker.body, q) for q in ["gold", "bronze"] * 20]
        assert wait_until(lambda: tracker.running() == 16)
        running = Counter(g for (g, _), v in tracker.now.items() for _ in range(v))
        assert running == {"gold": 12, "bronze": 4}
        wfq.set_weight("bronze", 3)
        assert wfq.shares()["bronze"]["n0"] == 2
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
        with pytest.raises(ValidationError):
            wfq.queue("silver")
    with pytest.raises(ValidationError):
        WeightedFairQueue({"a": -1})


def test_fair_share_follows_users_arriving_and_leaving(backend: MemoryBackend) -> None:
    with FairShare(slots_per_node=4) as fair:
        fair.create_user("alice", 1)
        assert fair.shares()["alice"]["n0"] == 4
        fair.create_user("bob", 3)
        assert (fair.shares()["alice"]["n0"], fair.shares()["bob"]["n0"]) == (1, 3)
        fair.remove_user("bob")
        assert fair.shares() == {"alice": {f"n{i}": 4 for i in range(4)}}
        assert all(
            fair.labels["alice"] in n.total for n in escher.get_cluster_state().nodes.values()
        )


def test_hierarchical_children_stay_inside_their_grant(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with FairShare(slots_per_node={"n0": 4, "n1": 4}, nodes=["n0", "n1"]) as root:
        root.create_user("team-a", 1)
        root.create_user("team-b", 1)
        team_a = root.child("team-a")
        assert team_a.nodes == ("n0", "n1") and team_a.slots == {"n0": 2, "n1": 2}
        ann = team_a.create_user("ann", 1)
        refs = [ann.launch(tracker.body, "ann") for _ in range(10)]
        assert wait_until(lambda: tracker.running() == 4)  # team-a's 2 units on 2 nodes
        assert {r.node_id for r in refs if r.started()} == {"n0", "n1"}
        root.create_user("team-c", 2)  # team-a shrinks to 1 per node; its child follows
        assert team_a.slots == {"n0": 1, "n1": 1}
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
    assert ephemeral_labels(backend) == set()


def test_fair_share_and_anti_affinity_falling_back_to_fair_share(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with FairShare(slots_per_node=4) as fair, AntiAffinity() as aa:
        alice = fair.create_user("alice")
        policy = FirstOf(alice & aa, alice, timeout=0.05)
        refs = [policy.launch(tracker.body, "alice") for _ in range(6)]
        assert wait_until(lambda: tracker.running() == 6)
        alts = Counter(r.alternative for r in refs if isinstance(r, SoftTaskRef))
        assert alts == {0: 4, 1: 2}  # four spread, two fell back
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)


def test_signal_releases_waiters(backend: MemoryBackend) -> None:
    order: list[str] = []
    lock = threading.Lock()

    def note(what: str) -> str:
        with lock:
            order.append(what)
        return what

    with Signals() as sig:
        loaded = sig.event("loaded")
        waiters = [loaded.waiter.launch(note, "train") for _ in range(3)]
        assert not any(w.started() for w in waiters) and not loaded.is_set()
        escher.get(loaded.setter.launch(note, "load"), timeout=WAIT)
        escher.get(waiters, timeout=WAIT)
        assert order[0] == "load" and order.count("train") == 3
        assert loaded.is_set()
        loaded.clear()
        late = loaded.waiter.launch(note, "late")
        assert not late.started()
        loaded.set()
        assert escher.get(late, timeout=WAIT) == "late"
    assert ephemeral_labels(backend) == set()


def test_barrier_waits_for_every_party(backend: MemoryBackend) -> None:
    gate = threading.Event()
    with Barrier(3) as barrier:
        parties = [barrier.launch(gate.wait, WAIT) for _ in range(2)]
        after = barrier.after.launch(escher.node_id)
        last = barrier.launch(lambda: True)
        escher.get(last, timeout=WAIT)
        assert not after.started() and not barrier.passed()
        gate.set()
        escher.get(parties, timeout=WAIT)
        assert escher.get(after, timeout=WAIT) in {"n0", "n1", "n2", "n3"}
        assert barrier.passed()
        with pytest.raises(ValidationError):
            barrier.launch(lambda: None)


def test_queue_drain_rate(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with TaskQueue(nodes=["n0", "n1"]) as queue:
        refs = [queue.launch(tracker.body, "q") for _ in range(8)]
        assert not any(r.started() for r in refs)  # paused
        queue.set_rate(1)
        assert wait_until(lambda: tracker.running() == 2)
        queue.set_rate(3)
        assert wait_until(lambda: tracker.running() == 6)
        assert max(tracker.peak.values()) == 3
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)


def test_data_locality_invalidate_and_refresh(backend: MemoryBackend) -> None:
    with DataLocality() as loc:
        loc.add("shard", ["n1", "n2"])
        placed = escher.get(
            [loc.near("shard").launch(escher.node_id) for _ in range(20)], timeout=WAIT
        )
        assert set(placed) <= {"n1", "n2"}
        loc.invalidate("shard", ["n1"])
        assert loc.locations("shard") == ["n2"]
        loc.refresh("shard", ["n3"])
        assert loc.locations("shard") == ["n3"]
        assert escher.get(loc.near("shard").launch(escher.node_id), timeout=WAIT) == "n3"
        backend.remove_node("n3")
        report = loc.recover()
        assert report.lost and "refresh" in report.lost[0][2]
