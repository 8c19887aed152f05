"""Where an escher task's time goes on Ray: raw Ray with escher's per-task protocol added one
layer at a time, against escher itself, same run, on `ray_backend.py`'s local cluster.

  A   raw Ray, a no-op task without arguments (the baseline)
  B0  + the attempt's key as the one argument
  B   + (node, value) as the result, the node looked up in every task
  B1  B with the node looked up once per worker process (as escher's runner does)
  C   B1 + a completion callback per task, settled on a thread of its own
  C1  B1 + batched waits (one thread, `ray.wait` over the outstanding refs) instead
  D   C + the start-gate claim: one add-if-absent in Ray's control store before the body
  F0  C1 + a node-local claim instead (an exclusive file create under /dev/shm)
  F1  F0 + start reports in the control store only for bodies still running after 20 ms
      (a thread per worker process, woken at each body's start and end)
  G   F0 without the argument: the claim is keyed by Ray's own task id (which the driver
      reads from the ObjectRef), so the task is sent no key
  H   G + start reports from a thread per worker process that looks every 20 ms (only while
      bodies run) and reports a body it sees running twice; a body costs two assignments
  E   escher, plain tasks ({CPU: 0.5}, as all the others)

D prices a start gate in the control store (escher's `_gate.claim`, which escher now uses
only on a node not armed yet); F0 to H price the pieces of a start gate without a
control-store round trip per task (its cancel side, rare, is not measured). G is the
protocol escher runs now (the driver asks the node agents which tasks started; tasks report
nothing), so E - G is escher's own overhead.

Usage: python bench/ray_task_layers.py [--tasks N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import _setup  # this checkout first on sys.path; the Ray environment

os.environ.update(_setup.RAY_ENV)

import ray
from ray_backend import start  # the same local cluster, configured alike

import escher
from escher.backends.ray import RayBackend
from escher.backends.ray._gate import claim
from escher.core.resources import Resources
from escher.core.task import TaskSpec

WAIT = 120.0
PREFIX = "escher-layers-"
SHM = "/dev/shm"


def noop() -> int:
    return 1


@ray.remote
def raw_noop() -> int:
    return 1


@ray.remote
def key_only(key: str) -> int:
    return 1


@ray.remote
def keyed(key: str) -> tuple[str, int]:
    return ray.get_runtime_context().get_node_id(), 1


# Worker-side state of the layers below (each worker process has its own copy).
_node: list[str] = []
_made: set[str] = set()
_reporter: list[threading.Condition] = []  # made in the worker: a lock does not pickle
_running: list[str] = []  # the key of the body running in this worker process, if any
LOCAL_DIR = ""  # set by main() before the first task


def _cached_node() -> str:
    if not _node:
        _node.append(ray.get_runtime_context().get_node_id())
    return _node[0]


@ray.remote
def cached_keyed(key: str) -> tuple[str, int]:
    return _cached_node(), 1


@ray.remote
def claimed(key: str) -> tuple[str, int]:
    node = _cached_node()
    if not claim(PREFIX, key, node, WAIT):
        raise RuntimeError(f"{key} claimed twice")
    return node, 1


def _local_claim(key: str) -> str:
    node = _cached_node()
    folder = f"{LOCAL_DIR}/{node}"
    if folder not in _made:
        os.makedirs(folder, exist_ok=True)
        _made.add(folder)
    os.close(os.open(f"{folder}/{key}", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    return node


@ray.remote
def local_claimed(key: str) -> tuple[str, int]:
    return _local_claim(key), 1


@ray.remote
def task_id_claimed() -> tuple[str, int]:
    return _local_claim(ray.get_runtime_context().get_task_id() or ""), 1


_now: list[Any] = [None]  # (task id, node) of the body running in this worker process
_poller: list[threading.Event] = []  # set to wake the parked poller (made in the worker)


def _poll_loop(wake: threading.Event) -> None:
    """Every 20 ms while bodies run: report a body seen running at two polls in a row."""
    from ray.experimental import internal_kv

    client = internal_kv.global_gcs_client
    seen, reported, idle = None, None, 0
    while True:
        time.sleep(0.02)
        now = _now[0]
        if now is None:
            idle += 1
            if idle > 50:  # a second without a body: park until the next one starts
                wake.clear()
                if _now[0] is None:
                    wake.wait()
                idle = 0
            seen = None
            continue
        idle = 0
        if now is seen and now is not reported:
            client.internal_kv_put(
                f"{PREFIX}started:{now[0]}".encode(), b"n", True, b"escher-layers", timeout=WAIT
            )
            reported = now
        seen = now


@ray.remote
def task_id_polled() -> tuple[str, int]:
    task = ray.get_runtime_context().get_task_id() or ""
    node = _local_claim(task)
    if not _poller:
        _poller.append(threading.Event())
        threading.Thread(target=_poll_loop, args=(_poller[0],), daemon=True).start()
    _now[0] = (task, node)
    if not _poller[0].is_set():
        _poller[0].set()
    try:
        return node, 1
    finally:
        _now[0] = None


def _report_loop(cond: threading.Condition) -> None:
    """Report a start to the control store only for a body still running after 20 ms."""
    from ray.experimental import internal_kv

    client = internal_kv.global_gcs_client
    while True:
        with cond:
            while not _running:
                cond.wait()
            key = _running[0]
            cond.wait(0.02)
            still = bool(_running) and _running[0] == key
        if still:
            client.internal_kv_put(
                f"{PREFIX}started:{key}".encode(), b"n", True, b"escher-layers", timeout=WAIT
            )
            with cond:
                while _running and _running[0] == key:
                    cond.wait()


@ray.remote
def local_claimed_reported(key: str) -> tuple[str, int]:
    node = _local_claim(key)
    if not _reporter:
        _reporter.append(threading.Condition())
        threading.Thread(target=_report_loop, args=(_reporter[0],), daemon=True).start()
    cond = _reporter[0]
    with cond:
        _running.append(key)
        cond.notify()
    try:
        return node, 1
    finally:
        with cond:
            _running.clear()
            cond.notify()


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
        ref.future().add_done_callback(results.put)
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


def layers(backend: RayBackend, n: int) -> dict[str, Callable[[], object]]:
    """One callable per layer; each runs `n` tasks to their end."""
    serial = iter(range(10**9))

    def keys() -> list[str]:
        run = next(serial)
        return [f"layers:{run}:{i}.0" for i in range(n)]

    def submit(fn: Any) -> list[Any]:
        return [fn.options(num_cpus=0.5).remote(k) for k in keys()]

    return {
        "A   raw Ray": lambda: ray.get(
            [raw_noop.options(num_cpus=0.5).remote() for _ in range(n)], timeout=WAIT
        ),
        "B0  + key argument": lambda: ray.get(submit(key_only), timeout=WAIT),
        "B   + node in result, looked up": lambda: ray.get(submit(keyed), timeout=WAIT),
        "B1  + node in result, cached": lambda: ray.get(submit(cached_keyed), timeout=WAIT),
        "C   B1 + callback per task": lambda: settle_by_callback(submit(cached_keyed)),
        "C1  B1 + batched waits": lambda: settle_by_wait(submit(cached_keyed)),
        "D   C + control-store claim": lambda: settle_by_callback(submit(claimed)),
        "F0  C1 + node-local claim": lambda: settle_by_wait(submit(local_claimed)),
        "F1  F0 + lazy start reports": lambda: settle_by_wait(submit(local_claimed_reported)),
        "G   F0 keyed by Ray's task id, no argument": lambda: settle_by_wait(
            [task_id_claimed.options(num_cpus=0.5).remote() for _ in range(n)]
        ),
        "H   G + polled start reports": lambda: settle_by_wait(
            [task_id_polled.options(num_cpus=0.5).remote() for _ in range(n)]
        ),
        "E   escher, plain": lambda: escher.get(
            [backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5}))) for _ in range(n)],
            timeout=WAIT,
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=600, help="tasks per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the first warms up)")
    args = parser.parse_args()
    global LOCAL_DIR
    LOCAL_DIR = tempfile.mkdtemp(prefix="escher-layers-", dir=SHM if os.path.isdir(SHM) else None)
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
        base = statistics.median(rates["A   raw Ray"][1:])
        print(f"Ray {ray.__version__}, {args.tasks} tasks a round, median of {args.rounds - 1}")
        for name, values in rates.items():
            rate = statistics.median(values[1:])
            print(f"  {name:44s} {rate:7.1f} tasks/s  {rate / base:.2f}x")
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()
        shutil.rmtree(LOCAL_DIR, ignore_errors=True)


if __name__ == "__main__":
    main()
