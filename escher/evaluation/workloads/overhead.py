"""Scheduling overhead: live ephemeral resources, and tasks requesting many of them.

The paper (50-node Ray): the makespan of 10,000 tasks is unaffected by the number of live
ephemeral resources, and with 1000 resources a placement takes 1.1 ms when a task requests
1 resource vs 1.2 ms when it requests 100.

On the simulator, simulated time has no scheduling cost, so the makespan is the same by
construction; what escher's own scheduler costs is wall time. This workload measures both:

* (a) 10,000 one-second 1-CPU tasks on 50 nodes x 8 CPUs with L unrelated live ephemeral
  resources (L = 0 is the baseline, same run): simulated makespan and wall microseconds per
  task (launch + placement + completion) of the in-memory matcher.
  Each point is the best of 3 repetitions after a warm-up (the machine is shared).
* (b) 1000 live resources on every node; tasks request 1 or 100 of them (+1 CPU): wall
  microseconds per task. This is an in-process matcher, not Ray's RPC path, so the
  absolute numbers are not comparable with the paper's milliseconds; the ratio is.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.evaluation._core import Meter, Result, bars_beside_paper, from_zero, pyplot, style

NAME = "overhead"


@dataclass(frozen=True)
class Params:
    """The workload's parameters."""

    nodes: int = 50
    cpus_per_node: int = 8
    tasks: int = 10_000
    live: tuple[int, ...] = (0, 100, 1000, 10_000)
    labels_b: int = 1000
    tasks_b: int = 2000


def _noop() -> None:
    return None


def _cluster(p: Params) -> dict[str, dict[str, float]]:
    return {f"n{i:02d}": {"CPU": p.cpus_per_node} for i in range(p.nodes)}


def live_resources(p: Params, live: int, meter: Meter) -> dict[str, float]:
    """(a): makespan and wall microseconds per task with `live` unrelated resources."""
    with meter.simulate(_cluster(p)) as backend:
        ids = sorted(_cluster(p))
        for k in range(live):
            backend.set_resource(f"live-{k}", 1, ids[k % len(ids)])
        cpu = Resources({"CPU": 1})
        start = time.perf_counter()
        for _ in range(p.tasks):
            backend.launch(TaskSpec(fn=_noop, resources=cpu, duration=1.0))
        backend.run()
        wall = time.perf_counter() - start
        return {"live": live, "makespan": backend.clock.now(), "us_per_task": 1e6 * wall / p.tasks}


def many_requested(p: Params, requested: int, meter: Meter) -> float:
    """(b): wall microseconds per task requesting `requested` of `p.labels_b` live labels."""
    with meter.simulate(_cluster(p)) as backend:
        for k in range(p.labels_b):
            backend.set_resource(f"r-{k}", 1e6, {"CPU": 1})  # every node
        request = Resources({"CPU": 1, **{f"r-{k}": 1 for k in range(requested)}})
        start = time.perf_counter()
        for _ in range(p.tasks_b):
            backend.launch(TaskSpec(fn=_noop, resources=request, duration=1.0))
        backend.run()
        return 1e6 * (time.perf_counter() - start) / p.tasks_b


def run(quick: bool = False, seed: int = 0) -> Result:
    """Both measurements; the baselines (0 live, 1 requested) come from the same run."""
    p = Params(tasks=2000, live=(0, 100, 1000), tasks_b=500) if quick else Params()
    result = Result(NAME, "Scheduling overhead of ephemeral resources", plot=plot)
    result.params = {**asdict(p), "seed": seed, "note": "wall times depend on the machine"}
    live_resources(p, 0, Meter())  # warm-up, not reported
    points = [
        min(
            (live_resources(p, n, result.meter) for _ in range(3)), key=lambda pt: pt["us_per_task"]
        )
        for n in p.live
    ]
    base = points[0]
    for pt in points:
        result.add(
            f"{pt['live']:,} live: simulated makespan s",
            round(pt["makespan"], 3),
            "unaffected",
            f"wall {pt['us_per_task']:.1f} us/task, "
            f"x{pt['us_per_task'] / base['us_per_task']:.2f} of 0 live",
        )
    one = min(many_requested(p, 1, result.meter) for _ in range(3))
    hundred = min(many_requested(p, 100, result.meter) for _ in range(3))
    result.add(
        "1000 live, request 1: wall us per task",
        round(one, 1),
        "1100",
        "paper: ms on Ray, ours: in-process us",
    )
    result.add("1000 live, request 100: wall us per task", round(hundred, 1), "1200")
    result.add("request 100 / request 1", round(hundred / one, 2), round(1.2 / 1.1, 2), "ratio")
    result.data = {"points": points, "one": one, "hundred": hundred}
    return result


def plot(result: Result) -> Any:
    """Wall cost and makespan vs live resources; 1 vs 100 requested beside the paper."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    points: list[dict[str, Any]] = result.data["points"]
    xs = [max(pt["live"], 1) for pt in points]
    left.plot(xs, [pt["us_per_task"] for pt in points], label="wall us per task", **style(0))
    left.set_xscale("log")
    left.set_xlabel("live ephemeral resources (log scale; 0 plotted at 1)")
    left.set_ylabel("wall microseconds per task")
    from_zero(left)
    twin = left.twinx()
    twin.plot(xs, [pt["makespan"] for pt in points], label="simulated makespan (s)", **style(1))
    twin.set_ylabel("simulated makespan (s)")
    from_zero(twin)
    handles = left.get_legend_handles_labels()
    extra = twin.get_legend_handles_labels()
    left.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="lower left")
    left.set_title("10,000 tasks vs live resources")
    one, hundred = result.data["one"], result.data["hundred"]
    bars_beside_paper(
        right,
        ["1 requested", "100 requested"],
        [1.0, hundred / one],
        [1.0, PAPER_MS[1] / PAPER_MS[0]],
        f"ours ({one:.0f} / {hundred:.0f} us in-process)",
        paper_label=f"paper ({PAPER_MS[0]} / {PAPER_MS[1]} ms on Ray)",
    )
    right.set_ylabel("cost per task, relative to 1 requested")
    right.set_title("1000 live resources")
    right.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    return fig


#: The paper's per-task scheduling cost with 1000 live resources: 1 vs 100 requested (ms).
PAPER_MS = (1.1, 1.2)
