"""Emergent scheduling: FIFO, DRF, naive fair (threads, memory) and the adaptive policy.

15 synthetic workloads (5 coarse, 5 fine, 5 mixed granularity) on 5 machines of 8 cores and
16 GB, in the in-memory backend's virtual time. Each workload runs under every fixed ordering
and under `AdaptivePolicy` (objective: mean job completion time); the table gives makespan and
mean job completion time (JCT) per workload, with the adaptive policy's ratio to the best
fixed policy of the same run. Workload i (from 0) uses seed `--seed-base` + i: the default 100
gives the 15 workloads the policy was tuned on; any other base gives an unseen set to check
that a change to the policy generalises. Usage:
python bench/emergent.py [--quick] [--seed-base N] [--plot PATH] [--json PATH]
python bench/emergent.py --replot docs/img/queueing.json   # redraw the plot, no run
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

from escher.backends.memory import MemoryBackend
from escher.esl.queueing import AdaptivePolicy, QueueingPolicy

NODES = {f"m{i}": {"CPU": 8, "memory": 16} for i in range(5)}  # memory in GB
FIXED = ("fifo", "drf", "fair-threads", "fair-memory")


@dataclass(frozen=True)
class Job:
    user: str
    name: str
    arrival: float
    tasks: int
    cpu: float
    memory: float
    durations: tuple[float, ...]


def _job(
    rng: random.Random,
    user: str,
    name: str,
    arrival: float,
    coarse: bool,
    memory_heavy: bool,
    scale: float,
) -> Job:
    if coarse:
        tasks = rng.randint(3, 12)
        cpu, memory = (
            (2.0, rng.choice((8.0, 10.0)))
            if memory_heavy
            else (rng.choice((3.0, 4.0)), rng.choice((2.0, 3.0)))
        )
        mean = rng.uniform(40.0, 120.0)
    else:
        tasks = max(8, int(rng.randint(40, 240) * scale))
        cpu, memory = (1.0, rng.choice((3.0, 4.0))) if memory_heavy else (1.0, 0.5)
        mean = rng.uniform(0.5, 4.0)
    durations = tuple(round(max(0.1, rng.gauss(mean, mean * 0.3)), 3) for _ in range(tasks))
    return Job(user, name, round(arrival, 3), tasks, cpu, memory, durations)


def workload(kind: str, seed: int, scale: float) -> list[Job]:
    """Jobs of `kind` (coarse | fine | mixed) from 3-5 users, arriving over time."""
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(rng.randint(3, 5))]
    heavy = {u: rng.random() < 0.4 for u in users}
    jobs = []
    per_user = max(2, int(rng.randint(3, 6) * scale))
    span = {"coarse": 300.0, "fine": 60.0, "mixed": 200.0}[kind]
    for user in users:
        # Some users arrive late: the mix of users changes during the run.
        start = rng.choice((0.0, 0.0, span * 0.3, span * 0.6))
        for j in range(per_user):
            coarse = kind == "coarse" or (kind == "mixed" and rng.random() < 0.4)
            arrival = start + rng.uniform(0, span * 0.5)
            jobs.append(_job(rng, user, f"{user}-j{j}", arrival, coarse, heavy[user], scale))
    return sorted(jobs, key=lambda j: (j.arrival, j.name))


def noop() -> None:
    return None


def run(jobs: list[Job], policy_name: str) -> dict[str, float]:
    """Run `jobs` under one policy; makespan, mean JCT and switches."""
    backend = MemoryBackend(nodes=NODES, virtual_clock=True)
    policy: QueueingPolicy
    if policy_name == "adaptive":
        policy = AdaptivePolicy(backend=backend, initial="drf", interval=20.0)
    else:
        policy = QueueingPolicy(policy_name, backend)
    finish: dict[str, float] = {}
    left: dict[str, int] = {job.name: job.tasks for job in jobs}

    def done(job: Job) -> None:
        left[job.name] -= 1
        if left[job.name] == 0:
            finish[job.name] = backend.clock.now()

    def arrive(job: Job) -> None:
        for d in job.durations:
            ref = policy.submit(
                noop,
                user=job.user,
                job=job.name,
                duration=d,
                resources={"CPU": job.cpu, "memory": job.memory},
            )
            ref.add_done_callback(lambda _r, job=job: done(job))

    for job in jobs:
        backend.clock.call_later(job.arrival, lambda job=job: arrive(job))
    backend.run()
    assert len(finish) == len(jobs), "every job finishes"
    switches = len(policy.switches) - 1
    policy.close()
    backend.close()
    return {
        "makespan": max(finish.values()),
        "jct": statistics.fmean(finish[j.name] - j.arrival for j in jobs),
        "switches": switches,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller jobs, 6 workloads")
    parser.add_argument("--plot", default="docs/img/queueing.png", help="PNG path ('' = none)")
    parser.add_argument("--json", default="", help="write the results as JSON here")
    parser.add_argument("--replot", default="", help="draw --plot from this JSON; no run")
    parser.add_argument(
        "--seed-base",
        type=int,
        default=100,
        help="workload i uses seed N + i (default 100: the 15 workloads the policy was tuned on)",
    )
    args = parser.parse_args()
    if args.replot:
        _plot(json.loads(Path(args.replot).read_text()), args.plot)
        return
    scale = 0.4 if args.quick else 1.0
    kinds = [k for k in ("coarse", "fine", "mixed") for _ in range(2 if args.quick else 5)]
    started = time.perf_counter()
    rows = []
    for index, kind in enumerate(kinds):
        jobs = workload(kind, seed=args.seed_base + index, scale=scale)
        result = {p: run(jobs, p) for p in (*FIXED, "adaptive")}
        rows.append(
            {
                "workload": f"{kind}-{index + 1}",
                "jobs": len(jobs),
                "tasks": sum(j.tasks for j in jobs),
                "results": result,
            }
        )
    elapsed = time.perf_counter() - started
    print(f"seeds {args.seed_base}..{args.seed_base + len(kinds) - 1}")
    _print(rows, elapsed)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.plot:
        _plot(rows, args.plot)


def _print(rows: list[dict], elapsed: float) -> None:
    names = (*FIXED, "adaptive")
    for metric, label in (("jct", "mean job completion time (s)"), ("makespan", "makespan (s)")):
        print(f"\n{label}; ratio = adaptive / best fixed policy of the same run")
        print(
            f"{'workload':<10} {'tasks':>6} "
            + " ".join(f"{n:>12}" for n in names)
            + f" {'best fixed':>12} {'ratio':>6} {'switches':>8}"
        )
        wins = 0
        ratios = []
        for row in rows:
            res = row["results"]
            best_name = min(FIXED, key=lambda n: res[n][metric])
            ratio = res["adaptive"][metric] / res[best_name][metric]
            wins += ratio <= 1.01
            ratios.append(ratio)
            print(
                f"{row['workload']:<10} {row['tasks']:>6} "
                + " ".join(f"{res[n][metric]:>12.1f}" for n in names)
                + f" {best_name:>12} {ratio:>6.3f} {res['adaptive']['switches']:>8}"
            )
        print(f"adaptive within 1% of (or better than) the best fixed policy on {wins}/{len(rows)}")
        print(
            f"ratio: geometric mean {statistics.geometric_mean(ratios):.3f}, "
            f"within 5% on {sum(r <= 1.05 for r in ratios)}/{len(rows)}, worst {max(ratios):.3f}"
        )
    print(f"\n{len(rows)} workloads x 5 policies in {elapsed:.1f} s")


def figure(rows: list[dict]) -> Any:
    """Each policy's mean JCT and makespan relative to the best fixed policy, per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = (*FIXED, "adaptive")
    hatches = ("", "..", "//", "xx", "")
    fig, axes = plt.subplots(2, 1, figsize=(11, 7.4), sharex=True)
    width = 0.16
    for ax, metric, title in ((axes[0], "jct", "mean JCT"), (axes[1], "makespan", "makespan")):
        for k, name in enumerate(names):
            values = []
            for row in rows:
                res = row["results"]
                best = min(res[n][metric] for n in FIXED)
                values.append(res[name][metric] / best)
            xs = [i + (k - 2) * width for i in range(len(rows))]
            edge = "black" if name == "adaptive" else None
            ax.bar(xs, values, width, label=name, hatch=hatches[k], edgecolor=edge, lw=0.6)
        ax.axhline(1.0, color="black", linewidth=0.8, label="_best fixed")
        ax.set_ylabel(f"{title} / best fixed policy")
        ax.set_ylim(0, None)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, ncol=5, fontsize=9, loc="upper center", bbox_to_anchor=(0.5, 0.95))
    axes[1].set_xticks(range(len(rows)), [r["workload"] for r in rows], rotation=45)
    fig.suptitle("Queueing policies on 5 x (8 cores, 16 GB): lower is better; 1 = best fixed")
    fig.tight_layout(rect=(0, 0, 1, 0.92))
    return fig


def _plot(rows: list[dict], path: str) -> None:
    fig = figure(rows)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
