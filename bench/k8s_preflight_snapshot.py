"""Reading a live cluster for the manifest check: a 1,000-node snapshot from the API server.

A real kube-apiserver v1.20 on loopback (no scheduler, no kubelet) holds `--nodes` nodes in
4 zones (labels, some taints and cordons, allocatable with an extended resource) and
`--pods-per-node` pods bound to each (requests, labels, some with affinity). Timed, in
alternation, `--rounds` times each:

- escher: `escher.manifests.read_cluster` (list nodes, namespaces and unfinished pods page
  by page, bodies parsed as plain JSON, then the `KubeCluster` built);
- baseline: the plain official client as a script would use it, ``list_node()`` and
  ``list_pod_for_all_namespaces()`` into the client's models (nothing built from them);
- kubectl: ``kubectl get nodes,pods -A -o json`` into a pipe, when kubectl is installed.

Prints the median wall time and the CPU time of this process per read, and the ratio of
escher's median to the baseline's (target: escher under 3 s for 1,000 nodes; wall times
are noisy on a shared machine, the ratio less so). Usage:
python bench/k8s_preflight_snapshot.py [--nodes 1000] [--pods-per-node 3] [--rounds 5]
Needs scripts/provision-k8s.sh (binaries) and pip install 'escher-sched[k8s]'.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _setup  # noqa: F401 - this checkout first on sys.path

from escher.manifests import read_cluster
from tests.support.k8s_control_plane import ControlPlane, binaries_available

ZONES = ("zone-a", "zone-b", "zone-c", "zone-d")
NAMESPACES = ("default", "web", "batch")
WRITERS = 4  # client threads creating the snapshot


def _json(response: Any) -> Any:
    try:
        data = response.data
    finally:
        response.release_conn()
    return json.loads(data) if data else None


def _node(i: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A node object and its status."""
    name = f"node-{i:04d}"
    labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
        "node.kubernetes.io/instance-type": ("m5.2xlarge", "m5.4xlarge", "p3.2xlarge")[i % 3],
        "disktype": ("ssd", "hdd")[i % 2],
    }
    spec: dict[str, Any] = {}
    if i % 10 == 0:
        spec["taints"] = [{"key": "dedicated", "value": "batch", "effect": "NoSchedule"}]
    if i % 50 == 7:
        spec["unschedulable"] = True
    capacity = {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "200Gi", "pods": "110"}
    if i % 3 == 2:
        capacity["nvidia.com/gpu"] = "4"
    allocatable = {**capacity, "cpu": "15800m", "memory": "62Gi"}
    status = {
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
        "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 250}.{i % 250}"}],
    }
    return (
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
         "spec": spec},
        {"status": status},
    )  # fmt: skip


def _pod(i: int, node: str) -> dict[str, Any]:
    app = f"app-{i % 40}"
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": "500m", "memory": "1Gi"},
                              "limits": {"memory": "2Gi"}},
            },
            {"name": "sidecar", "image": "registry.example/proxy:1",
             "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
        ],
    }  # fmt: skip
    if i % 4 == 0:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": app}},
                     "topologyKey": "kubernetes.io/hostname"}
                ]
            }
        }  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-{i:05d}",
            "namespace": NAMESPACES[i % len(NAMESPACES)],
            "labels": {"app": app, "tier": ("front", "back")[i % 2]},
        },
        "spec": spec,
    }


def build_snapshot(cp: ControlPlane, nodes: int, pods_per_node: int) -> None:
    api = cp.core_v1()
    for ns in NAMESPACES[1:]:
        cp.create_namespace(ns)

    def make_node(i: int) -> None:
        node, status = _node(i)
        _json(api.create_node(node, _preload_content=False))
        _json(api.patch_node_status(node["metadata"]["name"], status, _preload_content=False))

    def make_pods(i: int) -> None:
        for k in range(pods_per_node):
            pod = _pod(i * pods_per_node + k, f"node-{i:04d}")
            ns = pod["metadata"]["namespace"]
            _json(api.create_namespaced_pod(ns, pod, _preload_content=False))

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(make_node, range(nodes)))
        list(pool.map(make_pods, range(nodes)))


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--pods-per-node", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not binaries_available():
        print("Kubernetes binaries missing: run scripts/provision-k8s.sh", file=sys.stderr)
        return 2
    from kubernetes import client, config

    with ControlPlane(scheduler=False) as cp:
        t0 = time.perf_counter()
        build_snapshot(cp, args.nodes, args.pods_per_node)
        pods = args.nodes * args.pods_per_node
        print(f"snapshot: {args.nodes} nodes, {pods} pods created in "
              f"{time.perf_counter() - t0:.1f} s")  # fmt: skip
        kubeconfig = str(cp.kubeconfig_path)

        def plain() -> int:
            api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
            try:
                n = api.list_node().items
                p = api.list_pod_for_all_namespaces().items
            finally:
                api.api_client.close()
            return len(n) + len(p)

        kubectl = shutil.which("kubectl")

        def with_kubectl() -> int:
            assert kubectl is not None
            out = subprocess.run(
                [kubectl, "--kubeconfig", kubeconfig, "get", "nodes,pods", "-A", "-o", "json"],
                capture_output=True,
                check=True,
                timeout=120,
            ).stdout
            return len(json.loads(out)["items"])

        runs: dict[str, list[tuple[float, float]]] = {"escher": [], "plain client": []}
        if kubectl:
            runs["kubectl"] = []
        for r in range(args.rounds):
            order = list(runs) if r % 2 == 0 else list(reversed(runs))
            for name in order:
                fn = {"escher": lambda: read_cluster(kubeconfig), "plain client": plain,
                      "kubectl": with_kubectl}[name]  # fmt: skip
                wall, cpu, out = _timed(fn)
                runs[name].append((wall, cpu))
                if name == "escher":
                    assert len(out.nodes) == args.nodes and len(out.pods) == pods, out
        print(f"{'reader':<14}{'median s':>10}{'min s':>8}{'CPU s':>8}  (this process)")
        for name, times in runs.items():
            walls = [w for w, _ in times]
            cpus = [c for _, c in times]
            print(f"{name:<14}{statistics.median(walls):>10.2f}{min(walls):>8.2f}"
                  f"{statistics.median(cpus):>8.2f}")  # fmt: skip
        esc = statistics.median(w for w, _ in runs["escher"])
        base = statistics.median(w for w, _ in runs["plain client"])
        verdict = "met" if esc < 3.0 else "NOT met"
        print(f"escher / plain client: {esc / base:.2f}x wall; escher under 3 s: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
