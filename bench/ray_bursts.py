"""Bursts of small tasks: escher against raw Ray at its fastest, same run, with CPU per process.

An outside-style harness: a local `ray.cluster_utils.Cluster` (head with 0 CPUs + 4 workers
of 2 CPUs), tasks written as a user writes them (`escher.launch(fn, resources=...)`,
`escher.get(refs)`), raw Ray with its options bound once (its fastest form). Four kinds:

  raw plain       ``f.options(num_cpus=0.5)`` bound once, ``.remote()`` per task
  escher plain    ``escher.launch(f, resources={"CPU": 0.5})``
  raw steered     a Ray custom resource on every worker node (the same resize call escher
                  uses), ``f.options(num_cpus=0.5, resources={res: 1})`` bound once
  escher steered  an escher label on every worker node, ``resources={"CPU": 0.5, label: 1}``

Cells: burst sizes (default 1,000 and 10,000) x bodies (no-op and a 5 ms sleep). In every
cell, each round runs two pairs, plain and steered, each pair raw Ray and escher back to back
(a ratio compares two bursts a second or so apart, not four bursts apart). Within a pair the
order follows ABBA over the rounds (raw first, escher first, escher first, raw first, ...),
and the pairs swap places every other round, so neither side is always first or always runs
after the same other kind; `--warmup` rounds only warm up. A ratio is escher's rate against
raw Ray's of the same kind in the same pair; a cell reports every round's ratio, their median
and quartiles (raw Ray's own rate varies by a factor of two or more from round to round on a
shared machine: many short paired rounds give a median that a few outliers cannot move). The
processes started during the counted rounds are counted per kind (Ray starting worker
processes mid-run costs seconds of CPU each: use `--warmup`).

CPU per process class, per task above the class's idle burn (measured for 2 s before each
cell), for each kind (median of the rounds), read from /proc for
this driver and the processes of this cluster only (descendants of this process): driver,
workers (task worker processes), escher's actors (control actor and start-gate agents), GCS,
raylets, other (Ray's agents and monitors).

Usage: python bench/ray_bursts.py [--sizes 1000,10000] [--bodies noop,5ms] [--rounds R]
       [--warmup W] [--json FILE]
(from the repository root: the driver imports escher from this checkout, and Ray's workers
from the driver's working directory)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _setup  # this checkout first on sys.path; the Ray environment

os.environ.update(_setup.RAY_ENV)

import ray
from ray_backend import start  # the same local cluster, configured alike

import escher

WAIT = 600.0
KINDS = ("raw plain", "escher plain", "raw steered", "escher steered")
CLASSES = ("driver", "workers", "escher actors", "gcs", "raylets", "other")
TICK = os.sysconf("SC_CLK_TCK")
LABEL = "burst-slot"
RAW_RESOURCE = "burst_raw"


def noop() -> int:
    return 1


def sleep_5ms() -> int:
    time.sleep(0.005)
    return 1


BODIES: dict[str, Callable[[], int]] = {"noop": noop, "5ms": sleep_5ms}


# --- CPU per process class, from /proc ------------------------------------------------------
def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of `pid`, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


_classes: dict[int, str] = {}  # pid -> class (a process keeps its class)


def _class_of(pid: int) -> str:
    known = _classes.get(pid)
    if known is not None and known != "workers":
        return known
    cmd = _cmdline(pid)
    if "gcs_server" in cmd:
        kind = "gcs"
    elif "/raylet" in cmd.split(" ", 1)[0] or cmd.startswith("raylet"):
        kind = "raylets"
    elif "ControlActor" in cmd or "NodeGateAgent" in cmd:
        kind = "escher actors"
    elif cmd.startswith("ray::"):
        kind = "workers"  # an idle worker may become an actor later: asked again
    else:
        kind = "other"
    _classes[pid] = kind
    return kind


def cpu_by_class() -> dict[str, float]:
    """CPU seconds so far of this driver and every descendant process, by class (and under
    "pids", the number of descendant processes ever seen so far: new ones show worker
    processes Ray started during a burst, each of which costs seconds of CPU to start)."""
    me = os.getpid()
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _stat(int(name))
            if found is not None:
                parents[int(name)], cpu[int(name)] = found
    totals = dict.fromkeys(CLASSES, 0.0)
    totals["driver"] = time.process_time()
    for pid, seconds in cpu.items():
        up, hops = parents.get(pid, 0), 0
        while up not in (0, 1, me) and hops < 16:
            up, hops = parents.get(up, 0), hops + 1
        if up == me and pid != me:
            totals[_class_of(pid)] += seconds
            _seen.add(pid)
    totals["pids"] = float(len(_seen))
    return totals


_seen: set[int] = set()  # descendant processes ever seen


# --- the kinds ----------------------------------------------------------------------------
def kinds(body: Callable[[], int]) -> dict[str, Callable[[int], float]]:
    """Each kind: run a burst of `n` tasks of `body`, return its wall seconds."""
    remote = ray.remote(body)
    plain = remote.options(num_cpus=0.5)
    steered = remote.options(num_cpus=0.5, resources={RAW_RESOURCE: 1})

    def raw(options: Any) -> Callable[[int], float]:
        def run(n: int) -> float:
            t = time.perf_counter()
            refs = [options.remote() for _ in range(n)]
            ray.get(refs, timeout=WAIT)
            return time.perf_counter() - t

        return run

    def ours(resources: dict[str, float]) -> Callable[[int], float]:
        def run(n: int) -> float:
            t = time.perf_counter()
            refs = [escher.launch(body, resources=resources) for _ in range(n)]
            escher.get(refs, timeout=WAIT)
            return time.perf_counter() - t

        return run

    return {
        "raw plain": raw(plain),
        "escher plain": ours({"CPU": 0.5}),
        "raw steered": raw(steered),
        "escher steered": ours({"CPU": 0.5, LABEL: 1}),
    }


def idle_rates(seconds: float = 2.0) -> dict[str, float]:
    """CPU seconds per second each class burns while no task runs (Ray's own background
    work): subtracted, times the wall time of a burst, from the burst's CPU."""
    before, t = cpu_by_class(), time.perf_counter()
    time.sleep(seconds)
    after, wall = cpu_by_class(), time.perf_counter() - t
    return {c: max(0.0, (after[c] - before[c]) / wall) for c in CLASSES}


def round_order(i: int) -> list[str]:
    """The kinds of round `i`: two pairs (plain, steered), raw Ray and escher back to back in
    each; raw first in rounds 0 and 3 of every four (ABBA), escher first in rounds 1 and 2;
    the plain pair first in even rounds, the steered pair first in odd ones."""
    raw_first = i % 4 in (0, 3)
    pairs = []
    for kind in ("plain", "steered") if i % 2 == 0 else ("steered", "plain"):
        pair = [f"raw {kind}", f"escher {kind}"]
        pairs += pair if raw_first else pair[::-1]
    return pairs


def quartiles(values: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of `values` (both the value itself for one value)."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], q[2]


def run_cell(n: int, body: str, rounds: int, settle: float, warmup: int) -> dict[str, Any]:
    """One cell: `rounds` counted rounds (after `warmup` rounds) of the four kinds."""
    runs = kinds(BODIES[body])
    idle = idle_rates()
    rates: dict[str, list[float]] = {k: [] for k in KINDS}
    started: dict[str, int] = dict.fromkeys(KINDS, 0)
    cpu: dict[str, dict[str, list[float]]] = {k: {c: [] for c in CLASSES} for k in KINDS}
    for i in range(rounds + warmup):
        for kind in round_order(i):
            time.sleep(settle)  # the previous kind's trailing work, off the clock
            before = cpu_by_class()
            seconds = runs[kind](n)
            after = cpu_by_class()
            if i < warmup:
                continue
            started[kind] += int(after["pids"] - before["pids"])
            rates[kind].append(n / seconds)
            for c in CLASSES:
                busy = after[c] - before[c] - idle[c] * seconds  # above Ray's idle burn
                cpu[kind][c].append(busy / n * 1e6)  # us per task
        if i >= warmup:
            print(
                f"    round {i - warmup + 1}: "
                + ", ".join(f"{k} {rates[k][-1]:.0f}/s" for k in KINDS)
                + f"; plain {rates['escher plain'][-1] / rates['raw plain'][-1]:.2f}x"
                + f", steered {rates['escher steered'][-1] / rates['raw steered'][-1]:.2f}x",
                flush=True,
            )
    ratios = {
        "plain": [a / b for a, b in zip(rates["escher plain"], rates["raw plain"], strict=True)],
        "steered": [
            a / b for a, b in zip(rates["escher steered"], rates["raw steered"], strict=True)
        ],
    }
    return {
        "size": n,
        "body": body,
        "rates": rates,
        "ratios": ratios,
        "median": {k: statistics.median(v) for k, v in ratios.items()},
        "quartiles": {k: quartiles(v) for k, v in ratios.items()},
        "idle_cpu_per_s": idle,
        "processes_started": started,
        "cpu_us_per_task": {
            k: {c: statistics.median(v) for c, v in by.items()} for k, by in cpu.items()
        },
    }


def report(cell: dict[str, Any]) -> None:
    print(f"  {cell['size']} tasks, body {cell['body']}:")
    for kind in ("plain", "steered"):
        ratios = " ".join(f"{r:.2f}" for r in cell["ratios"][kind])
        low, high = cell["quartiles"][kind]
        print(
            f"    {kind:8s} median {cell['median'][kind]:.2f}x (quartiles {low:.2f}-{high:.2f})"
            f"  rounds {ratios}"
        )
    for kind in KINDS:
        rates = cell["rates"][kind]
        print(f"    {kind:15s} tasks/s {min(rates):.0f}-{max(rates):.0f}")
    idle = ", ".join(f"{c} {v:.2f}" for c, v in cell["idle_cpu_per_s"].items())
    print(f"    idle CPU s/s (subtracted below): {idle}")
    header = " | ".join(f"{c:>13s}" for c in CLASSES)
    print(f"    CPU us per task above idle (median of rounds): {header}")
    for kind in KINDS:
        row = cell["cpu_us_per_task"][kind]
        print(f"    {kind:46s}" + " | ".join(f"{row[c]:13.0f}" for c in CLASSES))
    started = ", ".join(f"{k} {v}" for k, v in cell["processes_started"].items())
    print(f"    processes started during counted rounds: {started}")
    print(flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000", help="burst sizes, comma-separated")
    parser.add_argument("--bodies", default="noop,5ms", help=f"of {sorted(BODIES)}")
    parser.add_argument("--rounds", type=int, default=10, help="counted rounds per cell")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not counted per cell")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds between kinds")
    parser.add_argument("--mode", default="resize", choices=["resize", "ledger"])
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bodies = args.bodies.split(",")
    for body in bodies:
        if body not in BODIES:
            parser.error(f"unknown body {body!r}; use {sorted(BODIES)}")

    t0 = time.perf_counter()
    cluster = start()
    print(f"cluster up in {time.perf_counter() - t0:.1f} s; Ray {ray.__version__}")
    escher.init("ray", address=cluster.address, mode=args.mode)
    backend = escher.current_backend()
    resize = ray._private.worker.global_worker.gcs_client.resize_raylet_resource_instances
    cells = []
    try:
        workers = sorted(
            n for n, node in escher.get_cluster_state().nodes.items() if node.total.get("CPU")
        )
        print(f"mode={backend.mode}, {len(workers)} worker nodes, rounds {args.rounds}\n")
        escher.set_resources({LABEL: 100_000}, {"CPU": 0.001})
        for node in workers:
            resize(node, {RAW_RESOURCE: 100_000})
        for body in bodies:
            for n in sizes:
                print(f"  cell: {n} tasks, body {body}", flush=True)
                cell = run_cell(n, body, args.rounds, args.settle, args.warmup)
                report(cell)
                cells.append(cell)
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()
    print("summary: escher / raw Ray, median of rounds (target >= 0.90x)")
    for cell in cells:
        print(
            f"  {cell['size']:6d} {cell['body']:5s} plain {cell['median']['plain']:.2f}x"
            f"  steered {cell['median']['steered']:.2f}x"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(cells, indent=1))
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
