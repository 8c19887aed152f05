"""RayBackend against raw Ray, same run, on a local cluster (head + 4 workers x 2 CPUs).

1. set_resource through the backend vs the raw resize call (target: overhead < 20%).
2. Gang latency, 4 members x {CPU: 2} on 4 nodes: a raw placement group (the framework path,
   create + ready + one task per bundle + remove) vs escher's native gang (launch_gang) vs the
   gang ESL through ephemeral resources (ghost reservations). Target: ESL within 1.5x native.
3. Throughput of tasks requesting an ephemeral resource vs plain tasks, both through escher,
   plus raw Ray tasks for reference. Target: within 1.2x.

Usage: python bench/ray_backend.py [--quick]   (from the repository root: the driver imports
escher from this checkout, and Ray's workers from the driver's working directory)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout, not an install

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")

import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group, remove_placement_group

import escher
from escher import esl
from escher.backends.ray import RayBackend
from escher.core.resources import Resources
from escher.core.task import TaskSpec

WAIT = 120.0
ESL_WAIT = 20.0
PAUSE = 0.5


def noop() -> int:
    return 1


@ray.remote
def raw_noop() -> int:
    return 1


def start() -> Cluster:
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "object_store_memory": 80 * 2**20,
            # Keep idle worker processes: a gang's ghosts block one worker per node and its
            # members need a second one; by default Ray trims idle workers after 1 s, and a
            # fresh worker process costs 1-2 s on 2 cores. The same for every path measured.
            "_system_config": {
                "idle_worker_killing_time_threshold_ms": 600_000,
                "num_workers_soft_limit": 8,
            },
        },
    )
    for _ in range(4):
        cluster.add_node(num_cpus=2, object_store_memory=80 * 2**20)
    ray.init(address=cluster.address, namespace="escher-bench", log_to_driver=False)
    cluster.wait_for_nodes(timeout=120)
    return cluster


def bench_set_resource(
    backend: RayBackend, local: RayBackend, node: str, n: int
) -> dict[str, float]:
    resize = ray._private.worker.global_worker.gcs_client.resize_raylet_resource_instances
    raw: list[float] = []
    ours: list[float] = []
    unshared: list[float] = []
    for block in range(12):  # alternating blocks, so all see the same cluster load
        for i in range(n // 12):
            value = float(1 + i % 5)
            t = time.perf_counter()
            if block % 3 == 0:
                resize(node, {"escher_bench-raw": value})
                raw.append(time.perf_counter() - t)
            elif block % 3 == 1:
                backend.set_resource("bench-esc", value, node)
                ours.append(time.perf_counter() - t)
            else:
                local.set_resource("bench-loc", value, node)
                unshared.append(time.perf_counter() - t)
    resize(node, {"escher_bench-raw": 0})
    backend.set_resource("bench-esc", 0, node)
    local.set_resource("bench-loc", 0, node)
    return {
        "raw": statistics.median(raw),
        "escher": statistics.median(ours),
        "unshared": statistics.median(unshared),
        "raw_mean": statistics.mean(raw),
        "escher_mean": statistics.mean(ours),
        "unshared_mean": statistics.mean(unshared),
    }


def raw_gang() -> None:
    pg = placement_group([{"CPU": 2}] * 4, strategy="PACK")
    ray.get(pg.ready(), timeout=WAIT)
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    refs = [
        raw_noop.options(
            num_cpus=2,
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=i
            ),
        ).remote()
        for i in range(4)
    ]
    ray.get(refs, timeout=WAIT)
    remove_placement_group(pg)


def _diagnose(backend: RayBackend, run: Any, exc: Exception) -> str:
    import ray._private.state as ray_state

    state = backend.get_cluster_state()
    raw = ray_state.total_resources_per_node()
    lines = [f"{type(exc).__name__}: {exc}"]
    for ref in run.refs:
        for label in ref.spec.resources:
            lines.append(
                f"  {ref.state.value} wants {label}: escher {state.holding(label)}, "
                f"ray {[n[:6] for n, t in raw.items() if 'escher_' + label in t]}"
            )
    return "\n".join(lines)


def bench_gangs(backend: RayBackend, reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {
        "raw placement group": [],
        "escher launch_gang": [],
        "gang ESL (ephemeral)": [],
    }
    members = [esl.Member(noop, resources={"CPU": 2}) for _ in range(4)]
    stuck: list[str] = []
    times["stuck"] = stuck  # type: ignore[assignment]
    raw_gang()  # warm up: the first placement group costs ~1 s
    with esl.Gang(backend, mode="ephemeral", timeout=5.0, poll=0.02, seed=1) as ghost_gang:
        ghost_gang.run(members).results(WAIT)
        for _ in range(reps):
            # Before each path: let the previous gang's CPUs come back (Ray frees a removed
            # placement group and a finished ghost asynchronously).
            time.sleep(PAUSE)
            t = time.perf_counter()
            raw_gang()
            times["raw placement group"].append(time.perf_counter() - t)
            time.sleep(PAUSE)
            t = time.perf_counter()
            refs = backend.launch_gang([m.spec() for m in members])
            escher.get(refs, timeout=WAIT)
            times["escher launch_gang"].append(time.perf_counter() - t)
            time.sleep(PAUSE)
            t = time.perf_counter()
            run = ghost_gang.run(members)
            try:
                run.results(ESL_WAIT)
            except escher.EscherError as exc:  # reported, not hidden: see the summary line
                stuck.append(_diagnose(backend, run, exc))
                continue
            times["gang ESL (ephemeral)"].append(time.perf_counter() - t)
    return times


def bench_throughput(backend: RayBackend, nodes: list[str], n: int) -> dict[str, float]:
    for node in nodes:
        backend.set_resource("bench-slot", 10_000, node)
    rates: dict[str, float] = {}
    for _ in range(2):  # second round counts (warm workers)
        t = time.perf_counter()
        ray.get([raw_noop.options(num_cpus=0.5).remote() for _ in range(n)], timeout=WAIT)
        rates["raw Ray, {CPU: 0.5}"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        refs = [backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5}))) for _ in range(n)]
        escher.get(refs, timeout=WAIT)
        rates["escher, {CPU: 0.5}"] = n / (time.perf_counter() - t)
        t = time.perf_counter()
        refs = [
            backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5, "bench-slot": 1})))
            for _ in range(n)
        ]
        escher.get(refs, timeout=WAIT)
        rates["escher, {CPU: 0.5, bench-slot: 1}"] = n / (time.perf_counter() - t)
    for node in nodes:
        backend.set_resource("bench-slot", 0, node)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--mode", default="resize", choices=["resize", "ledger"])
    args = parser.parse_args()
    n_set, reps, n_tasks = (200, 5, 300) if args.quick else (1000, 15, 1000)

    t0 = time.perf_counter()
    cluster = start()
    print(f"cluster up in {time.perf_counter() - t0:.1f} s; Ray {ray.__version__}")
    backend = RayBackend(address=cluster.address, mode=args.mode)
    escher.init(backend)
    try:
        nodes = sorted(
            n
            for n, node in backend.get_cluster_state().nodes.items()
            if node.total.get("CPU", 0) >= 2
        )
        print(f"mode={backend.mode}, {len(nodes)} worker nodes\n")

        local = RayBackend(address=cluster.address, mode=args.mode, share_writes=False)
        s = bench_set_resource(backend, local, nodes[0], n_set)
        local.close()
        print(f"1. set_resource, {n_set} calls (median / mean, ms)")
        print(
            f"   {'raw resize call':28s} {s['raw'] * 1e3:7.3f} / {s['raw_mean'] * 1e3:7.3f}   1.00x"
        )
        print(
            f"   {'escher set_resource':28s} {s['escher'] * 1e3:7.3f} / "
            f"{s['escher_mean'] * 1e3:7.3f}   {s['escher'] / s['raw']:.2f}x (median)"
            f"  target < 1.20x"
        )
        print(
            f"   {'  share_writes=False':28s} {s['unshared'] * 1e3:7.3f} / "
            f"{s['unshared_mean'] * 1e3:7.3f}   {s['unshared'] / s['raw']:.2f}x (median)\n"
        )

        g = bench_gangs(backend, reps)
        stuck = g.pop("stuck")
        base = statistics.median(g["raw placement group"])
        print(f"2. gang of 4 x {{CPU: 2}} on 4 nodes, {reps} runs (median ms)")
        for name, values in g.items():
            med = statistics.median(values)
            print(f"   {name:28s} {med * 1e3:8.1f}   {med / base:.2f}x")
        print("   target: gang ESL within 1.50x of the placement group")
        print(f"   gang ESL runs not finished within {ESL_WAIT:g} s: {len(stuck)} of {reps}")
        for text in stuck:
            print("   " + text.replace("\n", "\n   "))
        print()

        r = bench_throughput(backend, nodes, n_tasks)
        plain = r["escher, {CPU: 0.5}"]
        print(f"3. throughput, {n_tasks} no-op tasks (tasks/s)")
        for name, rate in r.items():
            print(f"   {name:36s} {rate:8.1f}   {plain / rate:.2f}x time of escher plain")
        print("   target: ephemeral within 1.20x of plain")
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
