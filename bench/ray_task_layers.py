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
def key_only(key: str) -> int:
    return 1


LOCAL_DIR = "/dev/shm/escher-layers"


@ray.remote
def local_claimed(key: str) -> tuple[str, int]:
    node = ray.get_runtime_context().get_node_id()
    os.makedirs(f"{LOCAL_DIR}/{node}", exist_ok=True)
    fd = os.open(f"{LOCAL_DIR}/{node}/{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    return node, 1


_node = ""
_made: set[str] = set()
_flusher: list[threading.Thread] = []


def _cached_node() -> str:
    global _node
    if not _node:
        _node = ray.get_runtime_context().get_node_id()
    return _node


def _local_claim(key: str) -> str:
    node = _cached_node()
    folder = f"{LOCAL_DIR}/{node}"
    if folder not in _made:
        os.makedirs(folder, exist_ok=True)
        _made.add(folder)
    os.close(os.open(f"{folder}/{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return node


_cond: list[threading.Condition] = []  # made in the worker (a lock does not pickle)
_current: list[str] = []  # the key of the body running in this worker, if any


def _report_loop() -> None:
    """Report a start to the control store only for a body still running after 20 ms."""
    from ray.experimental import internal_kv

    client = internal_kv.global_gcs_client
    _running = _cond[0]
    while True:
        with _running:
            while not _current:
                _running.wait()
            key = _current[0]
            _running.wait(0.02)
            still = bool(_current) and _current[0] == key
        if still:
            client.internal_kv_put(
                f"{PREFIX}started:{key}".encode(), b"n", True, b"escher-layers", timeout=WAIT
            )
            with _running:
                while _current and _current[0] == key:
                    _running.wait()


@ray.remote
def cached_keyed(key: str) -> tuple[str, int]:
    return _cached_node(), 1


@ray.remote
def local_claimed_cached(key: str) -> tuple[str, int]:
    return _local_claim(key), 1


@ray.remote
def local_claimed_reported(key: str) -> tuple[str, int]:
    node = _local_claim(key)
    if not _cond:
        _cond.append(threading.Condition())
    _running = _cond[0]
    if not _flusher:
        thread = threading.Thread(target=_report_loop, daemon=True)
        _flusher.append(thread)
        thread.start()
    with _running:
        _current.append(key)
        _running.notify()
    try:
        return node, 1
    finally:
        with _running:
            _current.clear()
            _running.notify()


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


def settle_by_wait(refs: list[Any]) -> None:
    """Wait for every ref through one thread that waits on them in batches."""
    done = threading.Event()

    def drain() -> None:
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(
                pending, num_returns=len(pending), timeout=0.005, fetch_local=False
            )
            if ready:
                ray.get(ready)
        done.set()

    threading.Thread(target=drain, daemon=True).start()
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
        "B0 + key argument only": lambda: ray.get(
            [key_only.options(num_cpus=0.5).remote(k) for k in keys()], timeout=WAIT
        ),
        "C3 B1 + batched waits": lambda: settle_by_wait(
            [cached_keyed.options(num_cpus=0.5).remote(k) for k in keys()]
        ),
        "B1 + key argument, cached node": lambda: ray.get(
            [cached_keyed.options(num_cpus=0.5).remote(k) for k in keys()], timeout=WAIT
        ),
        "F0 cached node, local claim, batched": lambda: settle_by_wait(
            [local_claimed_cached.options(num_cpus=0.5).remote(k) for k in keys()]
        ),
        "F1 F0 + lazy start reports (20 ms)": lambda: settle_by_wait(
            [local_claimed_reported.options(num_cpus=0.5).remote(k) for k in keys()]
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
