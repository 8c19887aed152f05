"""Where an escher task's time goes on Ray: raw Ray with escher's per-task protocol added one
layer at a time, against escher itself, same run, on `ray_backend.py`'s local cluster.

  A  raw Ray, a no-op task without arguments (the baseline)
  B  + the attempt's key as the one argument, and (node, value) as the result
  C  + a completion callback per task, settled on a thread of its own
  D  + the start-gate claim: one add-if-absent in Ray's control store before the body
  E  escher, plain tasks ({CPU: 0.5}, as all the others)

B to D use escher's own pieces (`_completion.on_completed`, `_gate.claim`), so D is the
protocol escher runs with none of escher's bookkeeping around it: E - D is escher's own
overhead, D - C the price of the start gate.

Usage: python bench/ray_task_layers.py [--tasks N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import queue
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an install

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

import ray
from ray_backend import start  # the same local cluster, configured alike

import escher
from escher.backends.ray import RayBackend
from escher.backends.ray._completion import on_completed
from escher.backends.ray._gate import claim
from escher.core.resources import Resources
from escher.core.task import TaskSpec

WAIT = 120.0
PREFIX = "escher-layers-"


def noop() -> int:
    return 1


@ray.remote
def raw_noop() -> int:
    return 1


@ray.remote
def keyed(key: str) -> tuple[str, int]:
    return ray.get_runtime_context().get_node_id(), 1


@ray.remote
def claimed(key: str) -> tuple[str, int]:
    node = ray.get_runtime_context().get_node_id()
    if not claim(PREFIX, key, node, WAIT):
        raise RuntimeError(f"{key} claimed twice")
    return node, 1


def settle_by_callback(refs: list[Any]) -> None:
    """Wait for every ref through one completion callback each, drained by one thread."""
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    done = threading.Event()

    def drain() -> None:
        for _ in refs:
            results.get()
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    for ref in refs:
        on_completed(ref, results.put)
    if not done.wait(WAIT):
        raise TimeoutError("tasks did not finish")


def layers(backend: RayBackend, n: int) -> dict[str, Callable[[], None]]:
    """One callable per layer; each runs `n` tasks to their end."""
    serial = iter(range(10**9))

    def keys() -> list[str]:
        run = next(serial)
        return [f"layers:{run}:{i}.0" for i in range(n)]

    return {
        "A raw Ray": lambda: ray.get(
            [raw_noop.options(num_cpus=0.5).remote() for _ in range(n)], timeout=WAIT
        ),
        "B + key argument, node in result": lambda: ray.get(
            [keyed.options(num_cpus=0.5).remote(k) for k in keys()], timeout=WAIT
        ),
        "C + completion callback": lambda: settle_by_callback(
            [keyed.options(num_cpus=0.5).remote(k) for k in keys()]
        ),
        "D + start-gate claim": lambda: settle_by_callback(
            [claimed.options(num_cpus=0.5).remote(k) for k in keys()]
        ),
        "E escher, plain": lambda: escher.get(
            [backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5}))) for _ in range(n)],
            timeout=WAIT,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=600, help="tasks per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the first warms up)")
    args = parser.parse_args()
    cluster = start()
    backend = RayBackend(address=cluster.address)
    escher.init(backend)
    try:
        runs = layers(backend, args.tasks)
        rates: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):  # interleaved, so load drifts hit every layer alike
            for name, run in runs.items():
                t = time.perf_counter()
                run()
                rates[name].append(args.tasks / (time.perf_counter() - t))
        base = statistics.median(rates["A raw Ray"][1:])
        print(f"Ray {ray.__version__}, {args.tasks} tasks a round, median of {args.rounds - 1}")
        for name, values in rates.items():
            rate = statistics.median(values[1:])
            print(f"  {name:36s} {rate:7.1f} tasks/s  {rate / base:.2f}x")
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
