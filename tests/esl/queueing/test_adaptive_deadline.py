"""Adaptive switching keeps every task; plan-ahead keeps jobs on their preferred resource."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.esl.deadline import DeadlineJob, Greedy, Option, PlanAhead
from escher.esl.queueing import (
    DRF,
    FIFO,
    AdaptivePolicy,
    FairThreads,
    QueuedTask,
    QueueingPolicy,
    censored_mean,
    simulate,
)
from escher.verify import Verdict

NODES = {f"m{i}": {"CPU": 8, "memory": 16} for i in range(3)}
TYPED = {
    "gpu": {"resources": {"CPU": 4, "GPU": 1}, "labels": {"type": "gpu"}},
    "cpu": {"resources": {"CPU": 8}, "labels": {"type": "cpu"}},
}


def test_adaptive_switches_without_losing_or_duplicating_tasks() -> None:
    runs: Counter[int] = Counter()

    def body(i: int) -> int:
        runs[i] += 1
        return i

    with escher.init(MemoryBackend(nodes=NODES, virtual_clock=True)) as backend:
        assert isinstance(backend, MemoryBackend)
        # A tiny margin and interval: the policy re-decides (and may switch) very often.
        with AdaptivePolicy(backend=backend, initial="fifo", interval=0.5, margin=0.0) as policy:
            refs = []

            def arrive(user: str, start: int, n: int, request: dict, duration: float) -> None:
                for i in range(start, start + n):
                    refs.append(
                        policy.submit(
                            body,
                            i,
                            user=user,
                            job=f"{user}-{start}",
                            resources=request,
                            duration=duration,
                        )
                    )

            backend.clock.call_later(0, lambda: arrive("big", 0, 30, {"CPU": 4, "memory": 2}, 6))
            for k in range(6):
                backend.clock.call_later(
                    1 + k,
                    lambda k=k: arrive(
                        f"small{k % 2}", 1000 + 100 * k, 40, {"CPU": 1, "memory": 3}, 0.5
                    ),
                )
            policy.set_ordering("fair-memory")  # a manual switch, too
            backend.run()
            assert len(policy.decisions) > 5
            assert len(policy.switches) >= 2  # it did switch during the run
            assert len(refs) == 270 and sorted(escher.get(refs)) == sorted(runs)
            assert set(runs.values()) == {1}  # every task ran exactly once
            assert policy.queued_count() == 0 and policy.running_count() == 0
            assert policy.observe().granularity is not None


def test_simulate_prefers_fair_share_for_small_jobs_behind_a_big_one() -> None:
    capacity = {"m0": {"CPU": 8}}
    tasks = {
        "big": [QueuedTask("big", i, {"CPU": 4}, job="big") for i in range(6)],
        "small": [QueuedTask("small", 10, {"CPU": 1}, job="small")],
    }
    fifo = simulate(FIFO, capacity, tasks, lambda t: 10.0, 0.0)
    drf = simulate(DRF, capacity, tasks, lambda t: 10.0, 0.0)
    # FIFO: two big tasks at a time; small starts after the last big ones (t=30), ends 40,
    # big ends 30. DRF: big (share 1/2), then small (share 0) at t=0; big needs 4 CPUs
    # and 3 are free, so it waits: big runs 1, 2, 2, 1 tasks and ends at 40, small at 10.
    assert fifo.mean_completion == pytest.approx((30 + 40) / 2)
    assert drf.mean_completion == pytest.approx((40 + 10) / 2)
    assert fifo.makespan == drf.makespan == 40.0


def test_simulate_charges_fifo_for_newcomers_that_arrive_later() -> None:
    capacity = {"m0": {"CPU": 8}}
    tasks = {"big": [QueuedTask("big", i, {"CPU": 4}, job="big") for i in range(6)]}
    arrivals = [(1.0, QueuedTask("small", 10, {"CPU": 1}, job="small"))]
    alone = {o.name: simulate(o, capacity, tasks, lambda t: 10.0, 0.0) for o in (FIFO, DRF)}
    assert alone["fifo"] == alone["drf"].__class__("fifo", 30.0, 30.0)
    assert alone["drf"].mean_completion == 30.0
    # The newcomer arrives at t=1 while two big tasks hold all 8 CPUs. FIFO: it starts after
    # the last big ones (t=30), ends at 40. DRF: it starts at t=10 beside one big task; big
    # runs 1, 2, 1 tasks more and ends at 40.
    fifo = simulate(FIFO, capacity, tasks, lambda t: 10.0, 0.0, arrivals)
    drf = simulate(DRF, capacity, tasks, lambda t: 10.0, 0.0, arrivals)
    assert fifo.mean_completion == pytest.approx((30 + 40) / 2)
    assert drf.mean_completion == pytest.approx((40 + 20) / 2)


def test_simulate_reserves_the_pool_as_the_live_policy_does() -> None:
    """A chosen task that fits the pooled free capacity but no node keeps the others out, in
    the live quotas and in the prediction alike (user b waits although a node has a CPU)."""
    nodes = {"m0": {"CPU": 4}, "m1": {"CPU": 4}}
    ends: dict[str, float] = {}
    with escher.init(MemoryBackend(nodes=nodes, virtual_clock=True)) as backend:
        assert isinstance(backend, MemoryBackend)
        with QueueingPolicy("fair-threads", backend) as policy:

            def submit(user: str, cpus: float, duration: float) -> None:
                ref = policy.submit(
                    lambda: None, user=user, job=user, resources={"CPU": cpus}, duration=duration
                )
                ref.add_done_callback(lambda _r: ends.setdefault(user, backend.clock.now()))

            submit("x", 3, 10)
            submit("y", 3, 10)
            backend.run(1)
            snapshot = policy.outstanding()
            assert {t.node for ts in snapshot.values() for t in ts} == {"m0", "m1"}
            submit("a", 2, 5)
            submit("b", 1, 5)
            backend.run(1.5)
            outstanding = policy.outstanding()
            backend.run()
    durations = {"x": 10.0, "y": 10.0, "a": 5.0, "b": 5.0}
    assert ends == {"x": 10.0, "y": 10.0, "a": 15.0, "b": 15.0}
    predicted = simulate(FairThreads, nodes, outstanding, lambda t: durations[t.job], 1.5)
    assert predicted.mean_completion == pytest.approx(sum(ends.values()) / 4)
    assert predicted.makespan == 15.0


def test_censored_mean_counts_running_tasks_as_lower_bounds() -> None:
    assert censored_mean(10.0, 2, [], 1.0) == 5.0  # finished only: their mean
    assert censored_mean(0.0, 0, [], 3.0) == 3.0  # nothing known: the prior
    # One task still running after 20 s: m = (10 + max(20, m)) / 3 -> m = 10.
    assert censored_mean(10.0, 2, [20.0], 1.0) == pytest.approx(10.0)
    # Running tasks shorter than the mean change nothing.
    assert censored_mean(10.0, 2, [1.0, 2.0], 1.0) == pytest.approx(5.0)
    # Nothing finished, one task ran 8 s: at least 8 s, whatever the prior said.
    assert censored_mean(0.0, 0, [8.0], 1.0) == pytest.approx(8.0, rel=1e-3)


def test_adaptive_estimates_runtimes_from_running_tasks_too() -> None:
    """Only the short tasks finished so far; the long ones already ran longer than the short
    ones take, so the estimate for them is not the short tasks' mean."""
    with escher.init(MemoryBackend(nodes=NODES, virtual_clock=True)) as backend:
        assert isinstance(backend, MemoryBackend)
        with AdaptivePolicy(backend=backend, interval=1000.0) as policy:
            for _ in range(4):
                policy.submit(
                    lambda: None,
                    user="a",
                    job="long",
                    duration=60,
                    resources={"CPU": 2, "memory": 8},
                )
            for _ in range(20):
                policy.submit(
                    lambda: None,
                    user="b",
                    job="short",
                    duration=1,
                    resources={"CPU": 1, "memory": 1},
                )
            backend.run(30)
            long = next(t for t in policy.outstanding()["a"])
            assert policy.runtime_estimate(long) >= 29.0
            backend.run()
            assert policy.runtime_estimate(long) == pytest.approx(60.0)


def test_adaptive_rejects_bad_settings() -> None:
    with escher.init(MemoryBackend(nodes=NODES, virtual_clock=True)) as backend:
        with pytest.raises(ValidationError):
            AdaptivePolicy(backend=backend, objective="latency")
        with pytest.raises(ValidationError):
            AdaptivePolicy(backend=backend, interval=0)
        with pytest.raises(ValidationError):
            AdaptivePolicy(["sjf"], backend=backend)
        with pytest.raises(ValidationError):
            AdaptivePolicy(backend=backend, lookback=-1)


def _options() -> tuple[Option, ...]:
    return (Option({"GPU": 1}, 10, {"type": "gpu"}), Option({"CPU": 4}, 30, {"type": "cpu"}))


def _work(backend: MemoryBackend, gpu: float, cpu: float) -> str:
    node = escher.node_id()
    backend.add_duration(gpu if node == "gpu" else cpu)
    return node


@pytest.mark.parametrize("overrun", [0.0, 4.0])
def test_plan_ahead_waits_for_the_preferred_node_when_it_meets_the_deadline(
    overrun: float,
) -> None:
    """The GPU is busy until t=10 (t=14 when the first job overruns); the second job can
    still finish there by t=40, so plan-ahead does not move it; greedy falls back to CPUs."""
    placed = {}
    for cls in (PlanAhead, Greedy):
        with escher.init(MemoryBackend(nodes=TYPED, virtual_clock=True)) as backend:
            assert isinstance(backend, MemoryBackend)
            with cls(backend) as policy:
                first = policy.submit(
                    DeadlineJob("first", 100, _options()), _work, backend, 10 + overrun, 30
                )
                backend.run(1)
                second = policy.submit(
                    DeadlineJob("second", 40, _options()), _work, backend, 10, 30
                )
                backend.run()
                assert first.node == "gpu"
                assert second.ref is not None and second.ref.state is escher.TaskState.FINISHED
                placed[cls.__name__] = (second.node, backend.clock.now())
    assert placed["PlanAhead"] == ("gpu", 20 + overrun)  # waited, met the deadline
    assert placed["Greedy"][0] == "cpu"


def test_plan_ahead_falls_back_when_waiting_would_miss_the_deadline() -> None:
    with escher.init(MemoryBackend(nodes=TYPED, virtual_clock=True)) as backend:
        assert isinstance(backend, MemoryBackend)
        with PlanAhead(backend) as policy:
            # The first job's estimate says 10 s; it really runs 60 s.
            policy.submit(DeadlineJob("first", 100, _options()), _work, backend, 60, 30)
            backend.run(1)
            second = policy.submit(DeadlineJob("second", 62, _options()), _work, backend, 10, 30)
            backend.run(2)
            assert second.ref is None  # at first it waits for the GPU (expected free at 10)
            backend.run()
            # An overdue job is expected to overrun again by as much as it did: at t=31 the
            # GPU plan (end 2t - 10, + 10 s x 1.2) misses 62, and 30 s on CPUs still meets it.
            assert second.node == "cpu" and second.started is not None
            assert second.started > 20 and second.started + 30 <= 62


def test_deadline_feasibility_check() -> None:
    from escher.esl.deadline import Busy, check_deadlines

    with escher.init(MemoryBackend(nodes=TYPED, virtual_clock=True)) as backend:
        state = backend.get_cluster_state()
        ok = check_deadlines([DeadlineJob(f"j{i}", 31, _options()) for i in range(5)], state)
        assert ok.verdict is Verdict.FEASIBLE
        on_gpu = sorted(s for _, n, s in ok.schedule.values() if n == "gpu")
        assert len(on_gpu) == 3 and all(b - a >= 10 - 1e-6 for a, b in itertools.pairwise(on_gpu))
        # Three jobs due at 25: two fit on the GPU (0-10, 10-20), none on CPUs (30 s).
        bad = check_deadlines([DeadlineJob(f"j{i}", 25, _options()) for i in range(3)], state)
        assert bad.verdict is Verdict.INFEASIBLE and set(bad.conflict) == {"j0", "j1", "j2"}
        # A task holds the GPU until 20: a job due at 25 needing the GPU (10 s) cannot make
        # it; due at 30 it can, starting at 20.
        escher.launch(lambda: None, resources={"GPU": 1}, duration=20)
        busy_state = backend.get_cluster_state()
        assert busy_state.nodes["gpu"].available.get("GPU") == 0
        gpu_only = (Option({"GPU": 1}, 10, {"type": "gpu"}),)
        held = [Busy("gpu", {"GPU": 1}, 20)]
        late = check_deadlines([DeadlineJob("x", 25, gpu_only)], busy_state, busy=held)
        assert late.verdict is Verdict.INFEASIBLE
        fine = check_deadlines([DeadlineJob("x", 30, gpu_only)], busy_state, busy=held)
        assert fine.verdict is Verdict.FEASIBLE and fine.schedule["x"][2] == pytest.approx(20)
        hopeless = check_deadlines([DeadlineJob("y", 5, gpu_only)], state)
        assert hopeless.verdict is Verdict.INFEASIBLE and hopeless.conflict == ("y",)
        with pytest.raises(ValidationError):
            check_deadlines([DeadlineJob("z", 5, gpu_only)] * 2, state)


def test_deadline_bad_input() -> None:
    with pytest.raises(ValidationError):
        DeadlineJob("a", 10, ())
    with pytest.raises(ValidationError):
        Option({"GPU": 1}, 0)
    with (
        escher.init(MemoryBackend(nodes=TYPED, virtual_clock=True)) as backend,
        PlanAhead(backend) as policy,
    ):
        with pytest.raises(ValidationError):
            policy.submit(DeadlineJob("tpu", 10, (Option({"TPU": 1}, 1),)), lambda: None)
        assert policy.jobs == []
