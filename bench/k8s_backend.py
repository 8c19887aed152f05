"""Kubernetes backend benchmark, on a real kube-apiserver + kube-scheduler (no kubelet).

1. set_resource latency vs a raw PATCH of the node status through the official client,
   interleaved in the same run (target: escher's overhead under 20%).
2. A MapReduce-style map phase with data locality on 20 fake nodes: every map task must run
   where its input shard lives. escher places the tasks through `escher.esl.DataLocality`
   (an ephemeral resource on the shard's node, requested by the task); the baseline pins
   the same number of pods with native required node affinity. Metric: time from the first
   pod submitted until kube-scheduler has bound all of them (target: within 5%).

Usage: python bench/k8s_backend.py [--quick]
Needs scripts/provision-k8s.sh (binaries) and pip install 'escher-sched[k8s]'.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from escher.backends.kubernetes import KubernetesBackend  # noqa: E402
from escher.backends.kubernetes._kube import KubeApi  # noqa: E402
from escher.backends.kubernetes._names import Names  # noqa: E402
from escher.backends.kubernetes._payload import TASK_ENV, encode_task  # noqa: E402
from escher.backends.kubernetes._pods import RUNNER_COMMAND, build_pod  # noqa: E402
from escher.core.resources import Resources  # noqa: E402
from escher.core.task import TaskSpec  # noqa: E402
from escher.esl import DataLocality  # noqa: E402
from tests.support.k8s_control_plane import (  # noqa: E402
    ControlPlane,
    add_fake_node,
    binaries_available,
)

IMAGE = "escher-bench:none"  # never pulled: there is no kubelet


def map_shard(shard: int) -> int:
    """The map task (never runs here: the benchmark measures placement)."""
    return shard


# --- 1. set_resource latency ----------------------------------------------------------
def bench_set_resource(cp: ControlPlane, iterations: int) -> dict[str, float]:
    api = cp.core_v1()
    add_fake_node(api, "lat-node", {"cpu": "4"}, labels={"bench": "latency"})
    # The raw PATCHes go to a node of their own: interleaved on one node, each would make
    # escher's cached resourceVersion stale and turn every call into a conflict + retry.
    add_fake_node(api, "raw-node", {"cpu": "4"}, labels={"bench": "raw"})
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path), node_selector={"bench": "latency"}
    )
    resource = "escher.io/raw-lat"
    escher_times: list[float] = []
    raw_times: list[float] = []
    try:
        backend.set_resource("esc-lat", 1, "lat-node")
        api.patch_node_status("raw-node", {"status": {"capacity": {resource: "1"}}})
        for i in range(iterations):
            value = i % 7 + 1
            t0 = time.perf_counter()
            backend.set_resource("esc-lat", value, "lat-node")
            t1 = time.perf_counter()
            body = {
                "status": {
                    "capacity": {resource: str(value)},
                    "allocatable": {resource: str(value)},
                }
            }
            api.patch_node_status("raw-node", body)
            t2 = time.perf_counter()
            escher_times.append(t1 - t0)
            raw_times.append(t2 - t1)
        stale: list[float] = []
        for i in range(max(10, iterations // 10)):  # someone else wrote in between
            api.patch_node_status("lat-node", {"metadata": {"labels": {"touch": str(i)}}})
            t0 = time.perf_counter()
            backend.set_resource("esc-lat", i % 7 + 1, "lat-node")
            stale.append(time.perf_counter() - t0)
        backend.set_resource("esc-lat", 0, "lat-node")
    finally:
        backend.close()
    return {
        "escher_median_ms": statistics.median(escher_times) * 1e3,
        "raw_median_ms": statistics.median(raw_times) * 1e3,
        "escher_p90_ms": sorted(escher_times)[int(0.9 * len(escher_times))] * 1e3,
        "raw_p90_ms": sorted(raw_times)[int(0.9 * len(raw_times))] * 1e3,
        "conflicts": float(backend.conflicts),
        "stale_median_ms": statistics.median(stale) * 1e3,
    }


# --- 2. MapReduce with data locality ----------------------------------------------------
class BindWatcher:
    """Counts pods of a namespace as kube-scheduler binds them (one watch)."""

    def __init__(self, api: KubeApi, namespace: str, expected: int) -> None:
        self.api, self.namespace, self.expected = api, namespace, expected
        self.bound: dict[str, str] = {}
        self.done = threading.Event()
        self.last_bind = 0.0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        _, version = self.api.list_pods(self.namespace)
        self._ready.set()
        while not self.done.is_set():
            for event in self.api.watch_pods(self.namespace, "", version, 60):
                obj = event.get("object") or {}
                version = obj.get("metadata", {}).get("resourceVersion", version)
                node = (obj.get("spec") or {}).get("nodeName")
                name = obj.get("metadata", {}).get("name")
                if node and name not in self.bound:
                    self.bound[name] = node
                    self.last_bind = time.perf_counter()
                    if len(self.bound) >= self.expected:
                        self.done.set()
                        return


def _namespace(api: Any, name: str) -> None:
    api.create_namespace({"metadata": {"name": name}})


def _drain(kube: KubeApi, namespace: str) -> None:
    pods, _ = kube.list_pods(namespace)
    for pod in pods:
        kube.delete_pod(namespace, pod["metadata"]["name"])
    deadline = time.monotonic() + 60
    while kube.list_pods(namespace)[0] and time.monotonic() < deadline:
        time.sleep(0.2)


def native_pod(namespace: str, name: str, node: str, shard: int) -> dict[str, Any]:
    """The pod escher would build for the map task, pinned by node affinity instead."""
    spec = TaskSpec(map_shard, (shard,), resources=Resources({"CPU": 0.1}))
    pod = build_pod(
        name=name, namespace=namespace, spec=spec, names=Names(), session="native",
        task_id=name, image=IMAGE, command=list(RUNNER_COMMAND),
        env={TASK_ENV: encode_task(map_shard, (shard,), {}), "ESCHER_TASK_NAME": "map_shard"},
        node_selector={"bench": "mapreduce"}, service_account=None,
    )  # fmt: skip
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
        ]}]
    }}}  # fmt: skip
    return pod


def run_native(cp: ControlPlane, kube: KubeApi, nodes: list[str], tasks: int) -> dict[str, Any]:
    namespace = f"native-{uuid.uuid4().hex[:6]}"
    _namespace(kube.core, namespace)
    watcher = BindWatcher(kube, namespace, tasks)
    t0 = time.perf_counter()
    for i in range(tasks):
        node = nodes[i % len(nodes)]  # shard i % 20 lives on node i % 20
        kube.create_pod(namespace, native_pod(namespace, f"map-{i}", node, i))
    submitted = time.perf_counter() - t0
    ok = watcher.done.wait(300)
    total = watcher.last_bind - t0
    right = sum(watcher.bound[f"map-{i}"] == nodes[i % len(nodes)] for i in range(tasks))
    _drain(kube, namespace)
    return {"submit_s": submitted, "bind_all_s": total, "ok": ok, "local": right}


def run_escher(cp: ControlPlane, kube: KubeApi, nodes: list[str], tasks: int) -> dict[str, Any]:
    namespace = f"escher-{uuid.uuid4().hex[:6]}"
    _namespace(kube.core, namespace)
    backend = KubernetesBackend(
        kubeconfig=str(cp.kubeconfig_path),
        namespace=namespace,
        image=IMAGE,
        node_selector={"bench": "mapreduce"},
    )
    try:
        with DataLocality(backend, name="mr") as loc:
            t_setup = time.perf_counter()
            for s, node in enumerate(nodes):
                loc.add(f"shard-{s}", [node])
            setup = time.perf_counter() - t_setup
            near = [loc.near(f"shard-{s}") for s in range(len(nodes))]
            watcher = BindWatcher(kube, namespace, tasks)
            t0 = time.perf_counter()
            refs = [
                near[i % len(nodes)].launch(map_shard, i, resources={"CPU": 0.1})
                for i in range(tasks)
            ]
            submitted = time.perf_counter() - t0
            ok = watcher.done.wait(300)
            total = watcher.last_bind - t0
            pods, _ = kube.list_pods(namespace)
            where = {
                p["metadata"]["labels"]["escher.io/task"]: p["spec"].get("nodeName") for p in pods
            }
            right = sum(where.get(r.id) == nodes[i % len(nodes)] for i, r in enumerate(refs))
            for ref in refs:
                ref.cancel()
            _drain(kube, namespace)
    finally:
        backend.close()
    return {
        "submit_s": submitted, "bind_all_s": total, "ok": ok, "local": right, "setup_s": setup,
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer iterations and pods")
    args = parser.parse_args()
    if not binaries_available():
        print("Kubernetes binaries missing: run scripts/provision-k8s.sh first.")
        return 2
    iterations = 100 if args.quick else 400
    tasks = 100 if args.quick else 300
    rounds = 2 if args.quick else 3

    with ControlPlane() as cp:
        lat = bench_set_resource(cp, iterations)
        overhead = lat["escher_median_ms"] / lat["raw_median_ms"] - 1
        print(f"\nset_resource latency ({iterations} interleaved calls, each on its own node)")
        print(f"{'':28}{'median ms':>12}{'p90 ms':>10}")
        print(f"{'raw PATCH (client)':28}{lat['raw_median_ms']:12.2f}{lat['raw_p90_ms']:10.2f}")
        print(
            f"{'escher set_resource':28}{lat['escher_median_ms']:12.2f}{lat['escher_p90_ms']:10.2f}"
        )
        print(f"{'escher, after a foreign write':28}{lat['stale_median_ms']:12.2f}"
              "   (stale resourceVersion: 422, GET, retry)")  # fmt: skip
        print(f"overhead vs raw: {overhead:+.1%} (target < +20%); "
              f"conflicts retried: {lat['conflicts']:.0f}")  # fmt: skip

        api = cp.core_v1()
        nodes = [f"mr-{i:02d}" for i in range(20)]
        for node in nodes:
            add_fake_node(api, node, {"cpu": "16", "memory": "64Gi"},
                          labels={"bench": "mapreduce"})  # fmt: skip
        kube = KubeApi(cp.api_client())
        results: dict[str, list[dict[str, Any]]] = {"native": [], "escher": []}
        for _ in range(rounds):
            results["native"].append(run_native(cp, kube, nodes, tasks))
            time.sleep(1.0)
            results["escher"].append(run_escher(cp, kube, nodes, tasks))
            time.sleep(1.0)
        print(f"\nMapReduce map phase: {tasks} pods, 20 nodes, data locality, {rounds} rounds")
        print(f"{'':34}{'bind all (s)':>14}{'submit (s)':>12}{'local':>8}")
        med: dict[str, float] = {}
        for kind, label in (("native", "native node affinity"), ("escher", "escher DataLocality")):
            runs = results[kind]
            med[kind] = statistics.median(r["bind_all_s"] for r in runs)
            submit = statistics.median(r["submit_s"] for r in runs)
            local = min(r["local"] for r in runs)
            all_ok = all(r["ok"] for r in runs)
            print(
                f"{label:34}{med[kind]:14.3f}{submit:12.3f}{local:>5}/{tasks}"
                + ("" if all_ok else "  (TIMED OUT)")
            )
        setup = statistics.median(r["setup_s"] for r in results["escher"])
        print(f"escher / native bind-all time: {med['escher'] / med['native']:.3f}x "
              f"(target <= 1.05x); DataLocality.add on 20 nodes: {setup * 1e3:.0f} ms")  # fmt: skip
        print("per round (native, escher):", [
            (round(n["bind_all_s"], 3), round(e["bind_all_s"], 3))
            for n, e in zip(results["native"], results["escher"], strict=True)
        ])  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
