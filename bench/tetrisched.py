"""Deadlines and plan-ahead (TetriSched): SLO attainment and utilisation under mis-estimates.

Cluster: 2 GPU nodes (8 CPUs, 2 GPUs) and 4 CPU nodes (16 CPUs), in virtual time. Jobs arrive
at random; each prefers 1 GPU (+1 CPU) on a GPU node and can fall back to 4 CPUs on a CPU node,
where it runs 3x longer. The schedulers see runtime *estimates* that are off by up to +-50%
(uniform); deadlines are set from the true GPU runtime times a random slack. Compared:

* plan-ahead (`PlanAhead`): re-plans every second; waits for a busy GPU when that still meets
  the deadline, else falls back;
* greedy (`Greedy`): the most preferred option that fits now, never waits;
* soft constraints (`FirstOf`) with a fixed timeout: ask for a GPU; if not started within
  the timeout, fall back to CPUs (10 s and 30 s).

Usage: python bench/tetrisched.py [--quick] [--plot PATH] [--json PATH]
       python bench/tetrisched.py --replot docs/img/deadlines.json   # redraw the plot, no run
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import escher
from escher.backends.memory import MemoryBackend
from escher.core.resources import MAX_CAPACITY
from escher.esl import FirstOf
from escher.esl.deadline import DeadlineJob, Greedy, Option, PlanAhead

NODES: dict[str, Any] = {
    **{f"gpu{i}": {"resources": {"CPU": 8, "GPU": 2}, "labels": {"type": "gpu"}} for i in range(2)},
    **{f"cpu{i}": {"resources": {"CPU": 16}, "labels": {"type": "cpu"}} for i in range(4)},
}
CAPACITY = {"GPU": 4.0, "CPU": 80.0}
SLOWDOWN = 3.0
POLICIES = ("plan-ahead", "greedy", "soft-10s", "soft-30s")


@dataclass(frozen=True)
class Spec:
    name: str
    arrival: float
    gpu_true: float
    gpu_estimate: float
    deadline: float


def jobs(seed: int, count: int, load: float, error: float) -> list[Spec]:
    """`count` jobs; `load` = offered GPU work / GPU capacity; estimates off by +-`error`."""
    rng = random.Random(seed)
    mean_runtime = 40.0
    gap = mean_runtime / (CAPACITY["GPU"] * load)
    t = 0.0
    out = []
    for i in range(count):
        t += rng.expovariate(1.0 / gap)
        true = rng.uniform(20.0, 60.0)
        estimate = true * (1.0 + rng.uniform(-error, error))
        slack = rng.uniform(1.5, 4.5)
        out.append(
            Spec(
                f"j{i}", round(t, 3), round(true, 3), round(estimate, 3), round(t + slack * true, 3)
            )
        )
    return out


def run(specs: list[Spec], policy_name: str) -> dict[str, float]:
    backend = MemoryBackend(nodes=NODES, virtual_clock=True)
    escher.init(backend)
    intervals: list[tuple[float, float, bool]] = []  # start, end, on GPU
    finished: dict[str, float] = {}
    starts: dict[str, tuple[float, bool]] = {}

    def work(name: str, gpu_true: float) -> None:
        on_gpu = escher.node_id().startswith("gpu")
        starts[name] = (backend.clock.now(), on_gpu)
        backend.add_duration(gpu_true if on_gpu else gpu_true * SLOWDOWN)

    def ended(name: str) -> None:
        finished[name] = backend.clock.now()
        start, on_gpu = starts[name]
        intervals.append((start, finished[name], on_gpu))

    policy: Any
    if policy_name == "plan-ahead":
        policy = PlanAhead(backend, period=1.0)
    elif policy_name == "greedy":
        policy = Greedy(backend, period=1.0)
    else:
        backend.set_resource("cpunode", MAX_CAPACITY, {"CPU": 16})
        timeout = float(policy_name.split("-")[1].rstrip("s"))
        policy = FirstOf(
            {"GPU": 1, "CPU": 1}, {"CPU": 4, "cpunode": 1}, timeout=timeout, backend=backend
        )

    def arrive(spec: Spec) -> None:
        if isinstance(policy, FirstOf):
            ref = policy.launch(work, spec.name, spec.gpu_true, name=spec.name)
            ref.add_done_callback(lambda _r: ended(spec.name))
            return
        options = (
            Option({"GPU": 1, "CPU": 1}, spec.gpu_estimate, {"type": "gpu"}),
            Option({"CPU": 4}, spec.gpu_estimate * SLOWDOWN, {"type": "cpu"}),
        )
        handle = policy.submit(
            DeadlineJob(spec.name, spec.deadline, options), work, spec.name, spec.gpu_true
        )

        def watch() -> None:  # attach the end callback once the job has a task
            if handle.ref is None:
                backend.clock.call_later(0.5, watch)
            else:
                handle.ref.add_done_callback(lambda _r: ended(spec.name))

        watch()

    for spec in specs:
        backend.clock.call_later(spec.arrival, lambda spec=spec: arrive(spec))
    backend.run()
    if hasattr(policy, "close"):
        policy.close()
    escher.shutdown()
    assert len(finished) == len(specs), f"{policy_name}: {len(finished)}/{len(specs)} done"
    horizon = max(finished.values())
    gpu_time = sum(e - s for s, e, g in intervals if g)
    cpu_time = sum((e - s) * (1 if g else 4) for s, e, g in intervals)
    met = sum(finished[s.name] <= s.deadline + 1e-6 for s in specs)
    return {
        "slo": met / len(specs),
        "gpu_util": gpu_time / (CAPACITY["GPU"] * horizon),
        "cpu_util": cpu_time / (CAPACITY["CPU"] * horizon),
        "on_gpu": sum(g for _, _, g in intervals) / len(specs),
        "makespan": horizon,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer jobs and seeds")
    parser.add_argument("--plot", default="docs/img/deadlines.png", help="PNG ('' = none)")
    parser.add_argument("--json", default="", help="write the results as JSON here")
    parser.add_argument("--replot", default="", help="draw --plot from this JSON; no run")
    args = parser.parse_args()
    if args.replot:
        _plot(json.loads(Path(args.replot).read_text()), args.plot)
        return
    count = 80 if args.quick else 200
    seeds = (1, 2) if args.quick else (1, 2, 3, 4, 5)
    loads = (1.0,) if args.quick else (0.8, 1.0, 1.2)
    errors = (0.0, 0.5)
    started = time.perf_counter()
    table: dict[str, dict[str, dict[str, float]]] = {}
    for load in loads:
        for error in errors:
            key = f"load {load:.1f}, err +-{int(error * 100)}%"
            per: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
            for seed in seeds:
                specs = jobs(seed, count, load, error)
                for p in POLICIES:
                    per[p].append(run(specs, p))
            table[key] = {
                p: {m: statistics.fmean(r[m] for r in rs) for m in rs[0]} for p, rs in per.items()
            }
    elapsed = time.perf_counter() - started
    print(
        f"{count} jobs x {len(seeds)} seeds per row; ratio = SLO attainment / greedy's "
        "in the same run\n"
    )
    print(
        f"{'setting':<24} {'policy':<11} {'SLO met':>8} {'ratio':>6} {'GPU util':>9} "
        f"{'CPU util':>9} {'on GPU':>7}"
    )
    for key, rows in table.items():
        base = rows["greedy"]["slo"]
        for p, r in rows.items():
            print(
                f"{key:<24} {p:<11} {r['slo']:>8.1%} {r['slo'] / base:>6.2f} "
                f"{r['gpu_util']:>9.1%} {r['cpu_util']:>9.1%} {r['on_gpu']:>7.1%}"
            )
    print(f"\n{elapsed:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(table, indent=1))
    if args.plot:
        _plot(table, args.plot)


def figure(table: dict[str, dict[str, dict[str, float]]]) -> Any:
    """SLO attainment and GPU utilisation per setting, one bar per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(table)
    hatches = ("", "..", "//", "xx")
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    width = 0.2
    for k, p in enumerate(POLICIES):
        xs = [i + (k - 1.5) * width for i in range(len(keys))]
        for ax, metric in ((axes[0], "slo"), (axes[1], "gpu_util")):
            values = [table[key][p][metric] * 100 for key in keys]
            ax.bar(xs, values, width, label=p, hatch=hatches[k % len(hatches)])
    axes[0].set_ylabel("jobs meeting their deadline (%)")
    axes[1].set_ylabel("GPU utilisation (%)")
    for ax in axes:
        ax.set_xticks(range(len(keys)), keys, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, 100)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=4, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.93))
    fig.suptitle("Deadline jobs preferring a GPU (else 3x longer on CPUs)")
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


def _plot(table: dict[str, dict[str, dict[str, float]]], path: str) -> None:
    fig = figure(table)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
