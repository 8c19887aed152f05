"""RayBackend against raw Ray, same run, on a local cluster (head + 4 workers x 2 CPUs).

1. set_resource through the backend vs the raw resize call (target: overhead < 20%).
2. Gang latency, 4 members x {CPU: 2} on 4 nodes: a raw placement group (the framework path,
   create + ready + one task per bundle + remove) vs escher's native gang (launch_gang) vs the
   gang ESL through ephemeral resources (ghost reservations). Target: ESL within 1.5x native.
3. Throughput of the same no-op tasks through escher vs raw Ray: plain ({CPU: 0.5} both) and
   steered to nodes (an escher label vs a Ray custom resource made by the same resize call; in
   ledger mode vs NodeAffinitySchedulingStrategy). Target: escher >= 0.8x raw Ray for both.
4. Setup of many labels on every node: one set_resource per (label, node) vs one
   set_resources call (one write per node, nodes concurrently).

Usage: python bench/ray_backend.py [--quick] [--only throughput] [--rounds R]
(from the repository root: the driver imports escher from this checkout, and Ray's workers
from the driver's working directory)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any

import _setup  # this checkout first on sys.path; the Ray environment

os.environ.update(_setup.RAY_ENV)

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


def bench_throughput(
    backend: RayBackend, nodes: list[str], n: int, rounds: int
) -> dict[str, list[float]]:
    """Tasks/s of the same no-op body with the same resources: escher vs raw Ray, per round
    (the four runs of a round back to back, every other round in reverse order; the first
    round only warms workers up).

    Plain: {CPU: 0.5} both. Label-steered: escher's ephemeral label vs the raw-Ray way of
    steering with the same mechanism (resize mode: a Ray custom resource made with the same
    resize call; ledger mode: NodeAffinitySchedulingStrategy round robin over the nodes).
    """
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    resize = ray._private.worker.global_worker.gcs_client.resize_raylet_resource_instances
    backend.set_resources({"bench-slot": 10_000}, {"CPU": 0.001})
    if backend.mode == "resize":
        for node in nodes:
            resize(node, {"bench_raw": 10_000})

    # Raw Ray at its fastest: options bound once per run, not per call (both kinds alike).
    def raw_plain() -> list[Any]:
        plain = raw_noop.options(num_cpus=0.5)
        return [plain.remote() for _ in range(n)]

    def raw_steered() -> list[Any]:
        if backend.mode == "resize":
            steer = raw_noop.options(num_cpus=0.5, resources={"bench_raw": 1})
            return [steer.remote() for _ in range(n)]
        pinned = [
            raw_noop.options(
                num_cpus=0.5, scheduling_strategy=NodeAffinitySchedulingStrategy(node, False)
            )
            for node in nodes
        ]
        return [pinned[i % len(pinned)].remote() for i in range(n)]

    runs: dict[str, Any] = {
        "raw Ray, plain": raw_plain,
        "escher, plain": lambda: [
            backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5}))) for _ in range(n)
        ],
        "raw Ray, steered": raw_steered,
        "escher, label-steered": lambda: [
            backend.launch(TaskSpec(noop, resources=Resources({"CPU": 0.5, "bench-slot": 1})))
            for _ in range(n)
        ],
    }
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for i in range(rounds + 1):  # the first round warms workers up; the others count
        # Every other round in reverse order, so that no kind always runs right after the
        # same other one (whose trailing work, e.g. escher's start reports, it would share).
        order = list(runs.items()) if i % 2 == 0 else list(runs.items())[::-1]
        for name, submit in order:
            t = time.perf_counter()
            refs = submit()
            if name.startswith("raw"):
                ray.get(refs, timeout=WAIT)
            else:
                escher.get(refs, timeout=WAIT)
            rates[name].append(n / (time.perf_counter() - t))
    backend.set_resources({"bench-slot": 0}, {"CPU": 0.001})
    if backend.mode == "resize":
        for node in nodes:
            resize(node, {"bench_raw": 0})
    return {name: values[1:] for name, values in rates.items()}


def bench_bulk(backend: RayBackend, nodes: list[str], labels: int, reps: int) -> dict[str, float]:
    """Setup of `labels` labels on every node: one set_resource per (label, node) vs one
    set_resources call (one write per node, nodes concurrently)."""
    names = [f"bulk-{i}" for i in range(labels)]
    one: list[float] = []
    bulk: list[float] = []
    for rep in range(reps):
        value = float(1 + rep % 3)
        t = time.perf_counter()
        for node in nodes:
            for name in names:
                backend.set_resource(name, value, node)
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        backend.set_resources({name: value + 1 for name in names}, {"CPU": 0.001})
        bulk.append(time.perf_counter() - t)
    backend.set_resources(dict.fromkeys(names, 0), {"CPU": 0.001})
    return {"one by one": statistics.median(one), "set_resources": statistics.median(bulk)}


def report_throughput(backend: RayBackend, nodes: list[str], n_tasks: int, rounds: int) -> None:
    r = bench_throughput(backend, nodes, n_tasks, rounds)
    print(f"3. throughput, {n_tasks} no-op tasks, {{CPU: 0.5}} (tasks/s, median of {rounds})")
    for name, rates in r.items():
        print(f"   {name:28s} {statistics.median(rates):8.1f}")
    print("   ratio: median of the rounds' ratios (lowest-highest)")
    for what, mine, raw in (
        ("escher plain / raw Ray plain:          ", "escher, plain", "raw Ray, plain"),
        ("escher label-steered / raw Ray steered:", "escher, label-steered", "raw Ray, steered"),
    ):
        ratios = [a / b for a, b in zip(r[mine], r[raw], strict=True)]
        print(
            f"   {what} {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}x-{max(ratios):.2f}x)  target >= 0.80x"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--mode", default="resize", choices=["resize", "ledger"])
    parser.add_argument(
        "--only", default="all", choices=["all", "throughput"], help="run one part only"
    )
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds that count")
    args = parser.parse_args()
    n_set, reps, n_tasks, n_labels = (200, 5, 300, 10) if args.quick else (1000, 15, 1000, 20)

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

        if args.only == "throughput":
            report_throughput(backend, nodes, n_tasks, args.rounds)
            return
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

        report_throughput(backend, nodes, n_tasks, args.rounds)

        b = bench_bulk(backend, nodes, n_labels, 5)
        print(f"4. setup of {n_labels} labels on {len(nodes)} nodes (median of 5, ms)")
        print(f"   {'one set_resource per label and node':40s} {b['one by one'] * 1e3:8.1f}")
        print(
            f"   {'one set_resources call':40s} {b['set_resources'] * 1e3:8.1f}   "
            f"{b['one by one'] / b['set_resources']:.1f}x faster"
        )
    finally:
        escher.shutdown()
        ray.shutdown()
        cluster.shutdown()
        print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
