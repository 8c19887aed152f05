"""Simulator speed: 100 nodes x 100,000 tasks on the virtual clock, events per second.

Every task asks for 1 CPU and lasts a seeded uniform 0.5-1.5 simulated seconds; all are
launched at t=0 on 100 nodes of 8 CPUs and the simulation runs until the last one ends.
The requirement (issue 7) is under 10 s of wall time; the paper has no such number.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from escher.bench._core import Result, pyplot
from escher.core.resources import Resources
from escher.core.task import TaskSpec

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
            f"< {LIMIT_S:g} (issue)" if p["tasks"] == 100_000 else "",
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


def plot(result: Result, path: Path) -> None:
    """Wall time and events/s vs task count."""
    plt = pyplot()
    points = result.data["points"]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [p["tasks"] for p in points]
    ax.plot(xs, [p["wall"] for p in points], "o-", label="wall time (s)")
    ax.axhline(LIMIT_S, color="grey", ls="--", label="issue limit: 10 s")
    ax.set_xscale("log")
    ax.set_xlabel("tasks (100 nodes)")
    ax.set_ylabel("wall seconds")
    ax2 = ax.twinx()
    ax2.plot(
        xs, [p["events"] / p["wall"] / 1000 for p in points], "s:", color="C1", label="k events/s"
    )
    ax2.set_ylabel("thousand events / s")
    fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88), fontsize=8)
    ax.set_title("Simulator speed")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
