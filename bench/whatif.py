"""What-if replay speed: 1,000 nodes x 100,000 tasks, against the plain simulator.

    python bench/whatif.py [--nodes 1000] [--tasks 100000] [--policy drf] [--repeat 1]

Workload: 100 task classes of tasks/100 replicas each (1 or 2 CPUs, 2 GiB; 1-3 simulated
seconds; each class's replicas arrive 0.04 s apart, classes 0.01 s apart, five users), replayed
by `escher.explain.whatif.what_if` from a snapshot of `nodes` nodes of 8 CPUs and 32 GiB.

Baseline, same run: the plain simulator, i.e. the virtual-clock memory backend launching the
same replicas at the same arrival times with no what-if bookkeeping (no snapshot replay, no
outcomes, no report). The target is under 30 s of wall time at 1,000 x 100,000; the ratio says
what the what-if layer costs on top of the simulator. Medians over `--repeat` runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from escher.backends.memory import MemoryBackend
from escher.core.cluster import ClusterState, Node
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from escher.explain import Workload
from escher.explain.whatif import what_if

CLASSES = 100
TARGET_S = 30.0


def workload(tasks: int) -> Workload:
    """`tasks` replicas in `CLASSES` classes (see the module doc)."""
    per = tasks // CLASSES
    return Workload.from_dict(
        {
            "plan": {
                "tasks": [
                    {
                        "name": f"c{k}",
                        "resources": {"CPU": 1 + k % 2, "memory": 2 * 2**30},
                        "count": per,
                    }
                    for k in range(CLASSES)
                ]
            },
            "tasks": {
                f"c{k}": {
                    "duration": 1 + k % 3,
                    "arrival": k * 0.01,
                    "interval": 0.04,
                    "user": f"u{k % 5}",
                }
                for k in range(CLASSES)
            },
        }
    )


def snapshot(nodes: int) -> ClusterState:
    """`nodes` idle nodes of 8 CPUs and 32 GiB."""
    total = Resources({"CPU": 8, "memory": 32 * 2**30})
    return ClusterState({f"n{i:04d}": Node(f"n{i:04d}", total, total) for i in range(nodes)})


def _noop() -> None:
    return None


def baseline(load: Workload, state: ClusterState) -> tuple[float, float]:
    """The plain simulator on the same replicas: (wall seconds, makespan)."""
    start = time.perf_counter()
    backend = MemoryBackend(
        {nid: n.total.to_dict() for nid, n in state.nodes.items()}, virtual_clock=True
    )
    rows = sorted(
        (arrival, duration, t.task.resources, t.task.name)
        for t in load.timings
        for arrival, duration in zip(t.arrivals, t.durations, strict=True)
    )
    clock = backend.clock
    for arrival, duration, request, name in rows:
        spec = TaskSpec(fn=_noop, resources=request, name=name, duration=duration)
        clock.call_later(arrival, lambda spec=spec: backend.launch(spec))
    backend.run()
    makespan = clock.now()
    backend.close()
    return time.perf_counter() - start, makespan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--policy", action="append", default=[], help="also replay under these")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    load, state = workload(args.tasks), snapshot(args.nodes)
    print(f"what-if: {args.nodes:,} nodes x {load.size:,} tasks (median of {args.repeat})")
    base = [baseline(load, state) for _ in range(args.repeat)]
    base_wall = statistics.median(w for w, _ in base)
    print(f"  baseline (plain simulator): {base_wall:6.2f} s wall, makespan {base[0][1]:.2f} s")
    for policy in ["backend", *args.policy]:
        walls, report = [], None
        for _ in range(args.repeat):
            start = time.perf_counter()
            (report,) = what_if(load, state, [policy])
            walls.append(time.perf_counter() - start)
        assert report is not None
        wall = statistics.median(walls)
        s = report.summary()
        verdict = "meets" if wall < TARGET_S else "misses"
        print(
            f"  what-if --policy {policy:8s}: {wall:6.2f} s wall ({wall / base_wall:.2f}x "
            f"baseline; {verdict} the {TARGET_S:g} s target), makespan {s['makespan']:.2f} s, "
            f"mean JCT {s['mean_jct']:.2f} s, P95 JCT {s['p95_jct']:.2f} s, "
            f"started {s['started']:,}/{s['tasks']:,}, {report.events:,} events"
        )


if __name__ == "__main__":
    main()
