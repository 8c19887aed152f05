"""Simulator speed: 100 nodes x 100,000 tasks on the virtual clock, events per second.

Every task asks for 1 CPU and lasts a seeded uniform 0.5-1.5 simulated seconds; all are
launched at t=0 on 100 nodes of 8 CPUs and the simulation runs until the last one ends.
The target is under 10 s of wall time; the paper has no such number.
"""

from __future__ import annotations

import random
import time
from typing import Any

from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.evaluation._core import PAPER_STYLE, Result, from_zero, pyplot, style

NAME = "simulator"
LIMIT_S = 10.0


def _noop() -> None:
    return None


def measure(nodes: int, tasks: int, seed: int, result: Result) -> dict[str, float]:
    """Run `tasks` 1-CPU tasks on `nodes` nodes; wall seconds, events, makespan."""
    rng = random.Random(seed)
    cpu = Resources({"CPU": 1})
    cluster = {f"n{i:03d}": {"CPU": 8} for i in range(nodes)}
    with result.meter.simulate(cluster) as backend:
        start = time.perf_counter()
        refs = [
            backend.launch(TaskSpec(fn=_noop, resources=cpu, duration=rng.uniform(0.5, 1.5)))
            for _ in range(tasks)
        ]
        backend.run()
        wall = time.perf_counter() - start
        events = backend.clock.events_run  # type: ignore[attr-defined]
        makespan = backend.clock.now()
        done = sum(1 for r in refs if r.done() and r.exception(0) is None)
    return {
        "nodes": nodes,
        "tasks": tasks,
        "wall": wall,
        "events": events,
        "makespan": makespan,
        "done": done,
    }


def run(quick: bool = False, seed: int = 0) -> Result:
    """Measure the simulator at several task counts, up to 100 nodes x 100,000 tasks."""
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 30_000, 100_000]
    result = Result(NAME, "Simulator speed (virtual clock, in-memory backend)", plot=plot)
    result.params = {
        "nodes": 100,
        "cpus_per_node": 8,
        "task_cpu": 1,
        "duration_s": "uniform(0.5, 1.5)",
        "seed": seed,
    }
    points = [measure(100, n, seed, result) for n in sizes]
    result.data["points"] = points
    for p in points:
        rate = p["events"] / p["wall"]
        result.add(
            f"{p['tasks']:,} tasks: wall s",
            round(p["wall"], 2),
            f"< {LIMIT_S:g} (target)" if p["tasks"] == 100_000 else "",
            f"{p['events']:,} events, {rate:,.0f} events/s, all done: {p['done'] == p['tasks']}",
        )
    biggest = points[-1]
    result.add("events/s at the largest size", round(biggest["events"] / biggest["wall"]))
    result.add(
        "simulated makespan s (largest)",
        round(biggest["makespan"], 2),
        "",
        "= tasks x mean duration / CPUs (sanity check)",
    )
    return result


def plot(result: Result) -> Any:
    """Wall time vs task count against the 10 s target, and events per second."""
    plt = pyplot()
    points = result.data["points"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    xs = [p["tasks"] for p in points]
    left.plot(xs, [p["wall"] for p in points], label="wall time (s)", **style(0))
    left.axhline(LIMIT_S, label=f"target: {LIMIT_S:g} s for 100,000 tasks", **PAPER_STYLE)
    right.plot(xs, [p["events"] / p["wall"] / 1000 for p in points], label="k events/s", **style(1))
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xlabel("tasks on 100 nodes (log scale)")
        from_zero(ax)
        ax.legend(fontsize=8, loc="lower right")
    left.set_ylabel("wall seconds")
    left.set_title("time to simulate")
    right.set_ylabel("thousand events / s")
    right.set_title("events per second of wall time")
    fig.tight_layout()
    return fig
