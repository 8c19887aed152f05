"""Anti-affinity (plain and ghost), static and dynamic load balancing, bin-packing."""

from __future__ import annotations

import math
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl import AntiAffinity, BinPacking, LoadBalance
from escher.verify import Verdict, verify

from .conftest import WAIT, Tracker, ephemeral_labels, wait_until


def test_anti_affinity_one_per_node_under_concurrency(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with AntiAffinity() as aa, ThreadPoolExecutor(4) as pool:
        refs = list(pool.map(lambda _: aa.launch(tracker.body, "aa"), range(10)))
        assert wait_until(lambda: tracker.running() == 4)
        assert sum(not r.started() for r in refs) == 6
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
    assert max(tracker.peak.values()) == 1


def test_anti_affinity_per_node_and_node_subset(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with AntiAffinity(per_node=2, nodes=["n1", "n2"]) as aa:
        refs = [aa.launch(tracker.body, "aa") for _ in range(6)]
        assert wait_until(lambda: tracker.running() == 4)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
    assert {node for _, node in tracker.peak} == {"n1", "n2"}
    assert max(tracker.peak.values()) == 2


def test_ghost_anti_affinity_for_long_tasks(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with AntiAffinity(ghost=True) as aa:
        refs = [aa.launch(tracker.body, "long", resources={"CPU": 1}) for _ in range(6)]
        assert wait_until(lambda: tracker.running() == 4)
        running = [r for r in refs if r.started()]
        assert len({r.node_id for r in running}) == 4
        # while the long tasks run, no node holds a unit
        assert not any(aa.unit in n.total for n in escher.get_cluster_state().nodes.values())
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
        assert wait_until(
            lambda: all(
                n.total.get(aa.unit) == 1 for n in escher.get_cluster_state().nodes.values()
            )
        )
    assert max(tracker.peak.values()) == 1
    assert ephemeral_labels(backend) == set()


def test_ghost_needs_per_node_one(backend: MemoryBackend) -> None:
    with pytest.raises(ValidationError):
        AntiAffinity(per_node=2, ghost=True)


@pytest.mark.parametrize("tasks", [4, 7, 9])
def test_static_load_balance_caps_tasks_per_node(backend: MemoryBackend, tasks: int) -> None:
    tracker = Tracker()
    with LoadBalance(tasks=tasks) as lb:
        assert lb.per_node == math.ceil(tasks / 4)
        refs = [lb.launch(tracker.body, "lb") for _ in range(tasks)]
        assert wait_until(lambda: tracker.running() == tasks)
        per_node = Counter(r.node_id for r in refs)
        assert max(per_node.values()) <= math.ceil(tasks / 4)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)


def test_load_balance_input_errors(backend: MemoryBackend) -> None:
    with pytest.raises(ValidationError):
        LoadBalance()
    with pytest.raises(ValidationError):
        LoadBalance(tasks=2, per_node=1)
    with pytest.raises(ValidationError):
        LoadBalance(per_node=0)


def test_dynamic_load_balance_raises_then_lowers_in_virtual_time(
    vbackend: MemoryBackend,
) -> None:
    with LoadBalance(dynamic=True, interval=1.0) as lb:
        assert lb.per_node == 1
        refs = [lb.launch(escher.node_id, duration=10.0) for _ in range(12)]
        escher.get(refs, timeout=1000)
        # 12 ten-second tasks on 4 nodes: raised one by one to 3 per node while tasks
        # waited, lowered again as the first ones finished (all 3 per node left free units)
        assert lb.history == [(0.0, 1), (1.0, 2), (2.0, 3), (10.0, 2), (11.0, 1)]
        assert Counter(r.node_id for r in refs) == {"n0": 3, "n1": 3, "n2": 3, "n3": 3}


def test_dynamic_monitor_stops_when_idle(vbackend: MemoryBackend) -> None:
    with LoadBalance(dynamic=True, interval=1.0) as lb:
        escher.get([lb.launch(escher.node_id, duration=1.0) for _ in range(3)], timeout=100)
        vbackend.run()  # returns: no perpetual monitor events
        assert not lb._armed


def test_bin_packing_grows_only_when_needed(backend: MemoryBackend) -> None:
    tracker = Tracker()
    with BinPacking() as pack:
        refs = [pack.launch(tracker.body, "p", resources={"CPU": 1}) for _ in range(6)]
        assert wait_until(lambda: tracker.running() == 6)
        assert pack.pack_nodes == ["n0", "n1"]
        assert Counter(r.node_id for r in refs) == {"n0": 4, "n1": 2}
        big = pack.launch(tracker.body, "big", resources={"CPU": 3})
        assert wait_until(lambda: tracker.running() == 7)
        assert big.node_id == "n2" and pack.pack_nodes == ["n0", "n1", "n2"]
        tracker.gate.set()
        escher.get([*refs, big], timeout=WAIT)


def test_bin_packing_plan_declares_the_nodes_it_would_add(vbackend: MemoryBackend) -> None:
    cpu1 = {"CPU": 1}
    with BinPacking() as pack:
        plan = pack.declare(None, "p", count=6, resources=cpu1)
        assert [r.node_spec.node_id for r in plan.resources] == ["n0", "n1"]
        result = verify(plan, vbackend.get_cluster_state(), timeout=60)
        assert result.status is Verdict.FEASIBLE, result
        assert result.witness is not None and set(result.witness["p"]) == {"n0", "n1"}
        over = pack.declare(None, "q", count=17, resources=cpu1)  # 16 CPUs in the cluster
        assert verify(over, vbackend.get_cluster_state(), timeout=60).status is Verdict.INFEASIBLE
        # what launching really does matches the plan
        refs = [pack.launch(escher.node_id, resources=cpu1, duration=1.0) for _ in range(6)]
        assert pack.pack_nodes == ["n0", "n1"]
        assert Counter(escher.get(refs)) == {"n0": 4, "n1": 2}
        # later plans start from the current set (idle again now) and add what they need
        more = pack.declare(None, "r", count=7, resources={"CPU": 2})
        assert [r.node_spec.node_id for r in more.resources] == ["n0", "n1", "n2", "n3"]
        assert verify(more, vbackend.get_cluster_state(), timeout=60).feasible


def test_bin_packing_concurrent_launches_stay_on_pack_nodes(backend: MemoryBackend) -> None:
    tracker = Tracker()
    lock = threading.Lock()
    with BinPacking() as pack, ThreadPoolExecutor(4) as pool:

        def go(_: int) -> escher.TaskRef:
            with lock:
                return pack.launch(tracker.body, "p", resources={"CPU": 2})

        refs = list(pool.map(go, range(8)))
        assert wait_until(lambda: tracker.running() == 8)
        tracker.gate.set()
        escher.get(refs, timeout=WAIT)
        assert {r.node_id for r in refs} <= set(pack.pack_nodes)
        assert len(pack.pack_nodes) == 4
