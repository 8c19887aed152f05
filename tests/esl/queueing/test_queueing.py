"""Queueing policies: DRF arithmetic, quotas, and that every task runs exactly once."""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl.queueing import (
    DRF,
    FIFO,
    FairMemory,
    FairThreads,
    QueuedTask,
    QueueingPolicy,
    dominant_share,
    drf_allocation,
    plan_quotas,
)

NODES = {f"m{i}": {"CPU": 8, "memory": 16} for i in range(3)}


def test_drf_paper_example() -> None:
    # Ghodsi et al. NSDI'11: <9 CPU, 18 GB>; A <1, 4>, B <3, 1> -> A 3 tasks, B 2 tasks.
    got = drf_allocation(
        {"CPU": 9, "memory": 18}, {"A": {"CPU": 1, "memory": 4}, "B": {"CPU": 3, "memory": 1}}
    )
    assert got == {"A": 3, "B": 2}
    total = {"CPU": 9, "memory": 18}
    assert dominant_share({"CPU": 3, "memory": 12}, total) == pytest.approx(2 / 3)
    assert dominant_share({"CPU": 6, "memory": 2}, total) == pytest.approx(2 / 3)


def test_drf_hand_examples() -> None:
    # Equal tasks, two users: an even split; a bounded user leaves the rest to the other.
    assert drf_allocation({"CPU": 8}, {"a": {"CPU": 1}, "b": {"CPU": 1}}) == {"a": 4, "b": 4}
    assert drf_allocation(
        {"CPU": 8}, {"a": {"CPU": 1}, "b": {"CPU": 1}}, max_tasks={"a": 2, "b": 100}
    ) == {"a": 2, "b": 6}
    # CPU-heavy vs memory-heavy on <10 CPU, 10 GB>: <2,1> and <1,2> -> 3 and 3 (share 0.6).
    got = drf_allocation(
        {"CPU": 10, "memory": 10}, {"c": {"CPU": 2, "memory": 1}, "m": {"CPU": 1, "memory": 2}}
    )
    assert got == {"c": 3, "m": 3}
    with pytest.raises(ValidationError):
        drf_allocation({"CPU": 1}, {"a": {}})


demand = st.fixed_dictionaries({"CPU": st.integers(1, 4), "memory": st.integers(1, 6)})


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcde"), demand, min_size=1, max_size=5),
    st.integers(4, 24),
    st.integers(4, 48),
)
def test_drf_properties(demands: dict, cpus: int, memory: int) -> None:
    capacity = {"CPU": cpus, "memory": memory}
    got = drf_allocation(capacity, demands)
    used = {r: sum(got[u] * d[r] for u, d in demands.items()) for r in capacity}
    assert all(used[r] <= capacity[r] for r in capacity)  # never over-allocates
    left = {r: capacity[r] - used[r] for r in capacity}
    share = {u: dominant_share({r: got[u] * d[r] for r in d}, capacity) for u, d in demands.items()}
    for user, d in demands.items():
        # Pareto: nobody's next task fits in what is left (demand is unbounded).
        assert not all(left[r] >= d[r] for r in d)
        # Progressive filling: when `user` got its last task its share was the smallest of
        # the users still active; a user with a smaller final share had dropped out, so its
        # task did not fit even in what is left plus that last task.
        if got[user]:
            before = share[user] - dominant_share(d, capacity)
            for other, od in demands.items():
                if before > share[other] + 1e-9:
                    assert not all(left[r] + d[r] >= od[r] for r in od)


def _tasks(user: str, n: int, request: dict, start: int = 0) -> list[QueuedTask]:
    return [QueuedTask(user, start + i, dict(request)) for i in range(n)]


def test_plan_quotas_orderings() -> None:
    capacity = {"m0": {"CPU": 8, "memory": 16}}
    tasks = {
        "cpu": _tasks("cpu", 20, {"CPU": 2, "memory": 1}),
        "mem": _tasks("mem", 20, {"CPU": 1, "memory": 4}, start=100),
    }

    def count(ordering: object) -> dict[str, float]:
        quotas = plan_quotas(ordering, capacity, tasks)  # type: ignore[arg-type]
        return {u: q.get("m0", {}).get("CPU", 0.0) for u, q in quotas.items()}

    # By hand, on <8 CPU, 16 GB>, cpu-user tasks <2, 1>, mem-user tasks <1, 4>:
    # FIFO: the older user's tasks only (4 tasks = 8 CPU), the other's are behind them.
    assert count(FIFO) == {"cpu": 8, "mem": 0}
    # DRF: dominant shares 1/4 per task for both; alternate cpu, mem, cpu, mem, cpu -> CPU
    # is full (6 + 2), so cpu gets 3 tasks and mem 2.
    assert count(DRF) == {"cpu": 6, "mem": 2}
    # Threads: cores held 2 vs 1 per task -> cpu, mem, mem, cpu, mem -> 4 and 3 CPUs; a 4th
    # mem task finds 2 GB free, a 3rd cpu task 1 CPU.
    assert count(FairThreads) == {"cpu": 4, "mem": 3}
    # Memory: GB held 1 vs 4 per task -> cpu, mem, cpu, cpu, (cpu: no CPU left), mem.
    assert count(FairMemory) == {"cpu": 6, "mem": 2}


def test_quotas_follow_users_and_everything_runs() -> None:
    with escher.init(MemoryBackend(nodes=NODES, virtual_clock=True)) as backend:
        assert isinstance(backend, MemoryBackend)
        with QueueingPolicy("drf", backend) as drf:
            a = [
                drf.submit(lambda: None, user="a", resources={"CPU": 1, "memory": 1}, duration=10)
                for _ in range(48)
            ]
            backend.run(1)
            assert drf.running_count("a") == 24  # a alone: the whole cluster
            b = [
                drf.submit(lambda: None, user="b", resources={"CPU": 1, "memory": 1}, duration=10)
                for _ in range(48)
            ]
            backend.run(11)
            # a's quota dropped to half: after the first wave, b holds half of the cores.
            assert drf.running_count("b") == 12 and drf.running_count("a") == 12
            cpu = {u: sum(v.get("CPU", 0) for v in q.values()) for u, q in drf.quotas().items()}
            assert cpu == {"a": 12, "b": 12}
            backend.run()
            assert all(r.state is escher.TaskState.FINISHED for r in a + b)
            assert drf.finished == 96
        assert not any(n.ephemeral for n in backend.get_cluster_state().nodes.values())


def test_bad_input_changes_nothing() -> None:
    with escher.init(MemoryBackend(nodes=NODES, virtual_clock=True)) as backend:
        with pytest.raises(ValidationError):
            QueueingPolicy("lifo", backend)
        with QueueingPolicy("fifo", backend) as fifo:
            with pytest.raises(ValidationError):
                fifo.submit(lambda: None, user="", resources={"CPU": 1})
            with pytest.raises(ValidationError):
                fifo.set_ordering("nope")
            assert fifo.ordering is FIFO and fifo.submitted == 0


def test_switching_loses_and_duplicates_nothing_real_time() -> None:
    """Switch orderings many times while tasks of 4 users queue, start and end on threads."""
    runs: Counter[int] = Counter()
    lock = threading.Lock()

    def body(i: int) -> int:
        with lock:
            runs[i] += 1
        return i

    with (
        escher.init(MemoryBackend(nodes=NODES, max_workers=32)) as backend,
        QueueingPolicy("fifo", backend) as policy,
    ):
        refs = []
        names = ["drf", "fair-threads", "fair-memory", "fifo"]
        for i in range(400):
            user = f"u{i % 4}"
            refs.append(
                policy.submit(body, i, user=user, resources={"CPU": 1 + i % 2, "memory": 1 + i % 3})
            )
            if i % 25 == 0:
                policy.set_ordering(names[(i // 25) % 4])
        values = escher.get(refs, timeout=60)
        assert sorted(values) == list(range(400))
        assert set(runs.values()) == {1} and len(runs) == 400
        assert len(policy.switches) > 10
        assert policy.queued_count() == 0
