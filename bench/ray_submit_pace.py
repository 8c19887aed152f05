"""Bursts of raw Ray at full speed, raw Ray paced like escher's launches, and escher.

How much of a burst's cost follows from how fast the driver submits: raw Ray at full speed,
raw Ray with a fixed pause after every `.remote()`, and escher, with CPU per process class.

Raw Ray's owner keeps a worker lease for as long as tasks of the same shape are queued; a
driver that submits more slowly than the workers finish drains that queue, hands leases back
and asks for new ones, so the raylets (and workers) spend more per task. escher's launch costs
the driver more Python per task than a bare `.remote()`, so part of escher's extra in other
processes is this effect, not work escher asks for. The paced kind busy-waits `--pause` µs
after each `.remote()` (about what `escher.launch` costs above a bare `.remote()`): what raw
Ray costs other processes when it is submitted as slowly as escher submits.

Same cluster and CPU accounting as `bench/ray_bursts.py` (head with 0 CPUs + 4 workers of 2
CPUs; CPU per task above each class's idle burn; kinds in alternating order per round).

Usage: python bench/ray_submit_pace.py [--size 1000] [--rounds 5] [--pause 80]
(from the repository root)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an install

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

import ray
from ray_backend import start as start_cluster  # the same local cluster, configured alike
from ray_bursts import CLASSES, cpu_by_class, idle_rates

import escher

WAIT = 600.0


def noop() -> int:
    return 1


def kinds(pause_us: float) -> dict[str, Callable[[int], None]]:
    """Each kind: run a burst of `n` no-op tasks of half a CPU and wait for all of them."""
    plain = ray.remote(noop).options(num_cpus=0.5)

    def raw(n: int) -> None:
        ray.get([plain.remote() for _ in range(n)], timeout=WAIT)

    def paced(n: int) -> None:
        refs = []
        for _ in range(n):
            refs.append(plain.remote())
            end = time.perf_counter() + pause_us * 1e-6
            while time.perf_counter() < end:
                pass
        ray.get(refs, timeout=WAIT)

    def ours(n: int) -> None:
        escher.get([escher.launch(noop, resources={"CPU": 0.5}) for _ in range(n)], timeout=WAIT)

    return {"raw": raw, f"raw +{pause_us:.0f} us/submit": paced, "escher": ours}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1000, help="tasks per burst")
    parser.add_argument("--rounds", type=int, default=5, help="counted rounds")
    parser.add_argument("--pause", type=float, default=80.0, help="µs after each .remote()")
    args = parser.parse_args()
    cluster = start_cluster()
    escher.init("ray", address=cluster.address)
    try:
        runs = kinds(args.pause)
        for run in runs.values():  # warm-up: every worker process started
            run(args.size)
        idle = idle_rates()
        rates: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, dict[str, list[float]]] = {k: {c: [] for c in CLASSES} for k in runs}
        for i in range(args.rounds):
            for kind in list(runs) if i % 2 == 0 else list(runs)[::-1]:
                time.sleep(0.3)
                before, t = cpu_by_class(), time.perf_counter()
                runs[kind](args.size)
                seconds, after = time.perf_counter() - t, cpu_by_class()
                rates[kind].append(args.size / seconds)
                for c in CLASSES:
                    busy = after[c] - before[c] - idle[c] * seconds
                    cpu[kind][c].append(busy / args.size * 1e6)
        print(f"{args.size} tasks, {args.rounds} rounds; CPU µs per task above idle (median)")
        print(f"{'kind':22s} {'tasks/s':>8s} " + " ".join(f"{c:>13s}" for c in CLASSES))
        for kind in runs:
            row = {c: statistics.median(v) for c, v in cpu[kind].items()}
            rate = statistics.median(rates[kind])
            print(f"{kind:22s} {rate:8.0f} " + " ".join(f"{row[c]:13.0f}" for c in CLASSES))
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
