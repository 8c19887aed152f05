"""`what_if`: replays from a snapshot in virtual time, agreeing with the real run."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from escher.backends.memory import MemoryBackend
from escher.core.errors import PlanFormatError, ValidationError
from escher.core.task import TaskSpec
from escher.esl import CoLocation, LoadBalance
from escher.explain import Verdict, Workload
from escher.explain.whatif import Recorder, what_if


def _noop() -> None:
    return None


def _real_run(seed: int) -> tuple[MemoryBackend, object, Recorder]:
    backend = MemoryBackend(
        {"n1": {"CPU": 4}, "n2": {"CPU": 2}, "n3": {"CPU": 3}, "n4": {"CPU": 1}},
        virtual_clock=True,
    )
    lb = LoadBalance(backend, per_node=2, name="lb")
    colo = CoLocation(backend, name="colo")
    backend.set_resource("ssd", 2, "n3")
    snapshot = backend.get_cluster_state()
    recorder = Recorder(backend)
    rng = random.Random(seed)
    for _ in range(80):
        at, duration = rng.uniform(0, 30), rng.uniform(0.5, 6)
        kind = rng.choice(["plain", "lb", "ssd", "leader"])

        def go(kind: str = kind, duration: float = duration) -> None:
            if kind == "lb":
                lb.launch(_noop, resources={"CPU": 1}, duration=duration)
            elif kind == "leader":  # an unknown group: its first member creates the label
                group = colo.unknown_group(f"g{rng.random()}", 1)
                group.launch(_noop, resources={"CPU": 1}, duration=duration)
            else:
                request = {"CPU": 1, "ssd": 1} if kind == "ssd" else {"CPU": rng.choice([1, 2])}
                backend.launch(TaskSpec(fn=_noop, resources=request, duration=duration))

        backend.clock.call_later(at, go)
    backend.run()
    recorder.stop()
    return backend, snapshot, recorder


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_of_a_recorded_workload_agrees_with_the_real_run(seed: int) -> None:
    backend, snapshot, recorder = _real_run(seed)
    workload = recorder.workload(origin=0.0)
    (report,) = what_if(workload, snapshot)  # type: ignore[arg-type]
    real = [(r.node, r.finish) for r in recorder.launches]
    replayed = sorted(report.tasks, key=lambda t: int(t.task.rsplit("-", 1)[1]))
    assert [t.node for t in replayed] == [node for node, _ in real]
    for outcome, (_, finish) in zip(replayed, real, strict=True):
        assert outcome.finish == pytest.approx(finish)
    assert report.makespan == pytest.approx(backend.clock.now())
    # and through the file format
    again = Workload.from_dict(json.loads(json.dumps(workload.to_dict())))
    (report2,) = what_if(again, snapshot)  # type: ignore[arg-type]
    assert [t.node for t in report2.tasks] == [t.node for t in report.tasks]
    backend.close()


def _state(backend: MemoryBackend) -> object:
    return backend.get_cluster_state()


def test_policies_side_by_side_and_what_never_runs() -> None:
    with MemoryBackend({"n1": {"CPU": 2, "memory": 8}, "n2": {"CPU": 2, "memory": 8}}) as live:
        snapshot = live.get_cluster_state()
    workload = Workload.from_dict(
        {
            "plan": {
                "tasks": [
                    {"name": "long", "resources": {"CPU": 1, "memory": 1}, "count": 8},
                    {"name": "short", "resources": {"CPU": 1, "memory": 1}, "count": 4},
                    {"name": "huge", "resources": {"CPU": 8}, "count": 1},
                ]
            },
            "tasks": {
                "long": {"duration": 10, "user": "ann"},
                "short": {"duration": 1, "arrival": 0.5, "user": "bob"},
                "huge": {"duration": 1},
            },
        }
    )
    reports = what_if(workload, snapshot, ["fifo", "drf"])  # type: ignore[arg-type]
    fifo, drf = reports
    assert fifo.policy == "fifo" and drf.policy == "drf"
    assert drf.mean_jct < fifo.mean_jct  # bob's short job need not wait behind ann's
    for report in reports:
        assert [n.task for n in report.never] == ["huge"]
        assert report.never[0].why.verdict is Verdict.NEVER
        assert report.summary()["never_placed"] == 1
        assert set(report.utilisation) == {"n1", "n2"}


def test_in_use_resources_of_the_snapshot_are_held() -> None:
    import threading

    release = threading.Event()
    with MemoryBackend({"n1": {"CPU": 2}}) as live:
        busy = live.launch(TaskSpec(fn=release.wait, args=(10,), resources={"CPU": 1}))
        assert busy.started()
        snapshot = live.get_cluster_state()
        release.set()
    workload = Workload.from_dict(
        {
            "plan": {"tasks": [{"name": "t", "resources": {"CPU": 1}, "count": 2}]},
            "tasks": {"t": {"duration": 5}},
        }
    )
    (held,) = what_if(workload, snapshot)
    assert held.makespan == pytest.approx(10)  # one CPU left: the two run one after the other
    (freed,) = what_if(workload, snapshot, hold=1.0)
    assert freed.makespan == pytest.approx(6)  # the CPU comes back at t=1


def test_bad_workloads_and_policies_are_clear_errors(tmp_path: Path) -> None:
    plan = {"tasks": [{"name": "t", "resources": {"CPU": 1}}]}
    with pytest.raises(PlanFormatError, match="'duration'"):
        Workload.from_dict({"plan": plan, "tasks": {"t": {}}})
    with pytest.raises(PlanFormatError, match="not in the plan"):
        Workload.from_dict({"plan": plan, "tasks": {"t": {"duration": 1}, "x": {}}})
    with pytest.raises(PlanFormatError, match="one per replica"):
        Workload.from_dict({"plan": plan, "tasks": {"t": {"duration": [1, 2]}}})
    path = tmp_path / "w.json"
    path.write_text("{")
    with pytest.raises(PlanFormatError, match="line 1"):
        Workload.load(path)
    workload = Workload.from_dict({"plan": plan, "tasks": {"t": {"duration": 1}}})
    with MemoryBackend({"n1": {"CPU": 1}}) as live:
        state = live.get_cluster_state()
    with pytest.raises(ValidationError, match="unknown policy"):
        what_if(workload, state, ["lifo"])
