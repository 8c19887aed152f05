"""Client CPU of the Kubernetes calls escher makes once per pod, against the generated client.

escher's `KubeApi` sends its per-pod calls (create, delete) and its node reads and status
patches as JSON it encodes itself through the official client's connection pool; the
generated `CoreV1Api` methods validate their arguments and sanitise the body first. This
measures the client CPU (this process, `time.process_time`) of creating `--pods` pods from
8 threads both ways, in alternating rounds on one control plane (no scheduler: nothing
else runs), and prints the ratio of each round (escher's path / the generated client).

Usage:
    python bench/k8s_client_cost.py                 # 1,000 pods, 4 rounds
    python bench/k8s_client_cost.py --pods 2000 --rounds 6
Needs scripts/provision-k8s.sh (binaries) and pip install 'escher-sched[k8s]'.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _setup

from escher.backends.kubernetes._kube import KubeApi, connect
from tests.support.k8s_control_plane import ControlPlane, binaries_available

#: Threads creating pods (escher's backend keeps `creates_in_flight=8` creates going).
THREADS = 8
#: scheduler_perf's pod-with-pod-anti-affinity.yaml, as the other Kubernetes benchmarks use.
TEMPLATE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {},
    "spec": {
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"color": "green"}},
             "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [{
            "image": "k8s.gcr.io/pause:3.2", "name": "pause",
            "resources": {"limits": {"cpu": "100m", "memory": "500Mi"},
                          "requests": {"cpu": "100m", "memory": "500Mi"}}}],
    },
}  # fmt: skip


def create_all(pods: int, create: Callable[[int], None]) -> float:
    """Client CPU seconds to create pods 0..pods-1 from `THREADS` threads."""
    cpu0 = time.process_time()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(lambda k: [create(i) for i in range(k, pods, THREADS)], range(THREADS)))
    return time.process_time() - cpu0


def generated_create(kube: KubeApi, namespace: str, body: dict[str, Any]) -> None:
    """A create through the generated method (raw answer read, as the harnesses do)."""
    response = kube.core.create_namespaced_pod(namespace, body, _preload_content=False)
    response.read()
    response.release_conn()


def escher_create(kube: KubeApi, namespace: str, body: dict[str, Any]) -> None:
    """A create as escher's backend sends it (the answer parsed for the pod's uid)."""
    kube.create_pod(namespace, body)


WAYS = {"generated": generated_create, "escher": escher_create}


def one_round(cp: ControlPlane, kube: KubeApi, pods: int) -> dict[str, float]:
    """CPU of `pods` creates through the generated client and through escher's path."""
    used: dict[str, float] = {}
    for way, send in WAYS.items():
        namespace = f"cc-{way}-{uuid.uuid4().hex[:6]}"
        cp.create_namespace(namespace)
        bodies = [_setup.anti_affinity_pod(TEMPLATE, i, 10, namespace) for i in range(pods)]
        used[way] = create_all(pods, lambda i, ns=namespace, b=bodies, f=send: f(kube, ns, b[i]))
        kube.core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    return used


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if not binaries_available():
        print("Kubernetes binaries missing: run scripts/provision-k8s.sh first.")
        return 2
    with ControlPlane(scheduler=False) as cp:
        kube = KubeApi(connect(str(cp.kubeconfig_path), None, False))
        one_round(cp, kube, 50)  # warm up: connections, the generated client's validators
        print(f"client CPU of {args.pods} pod creates from {THREADS} threads (ms per pod)")
        print(f"{'round':>5}{'generated':>11}{'escher':>9}{'ratio':>8}")
        ratios = []
        for r in range(args.rounds):
            used = one_round(cp, kube, args.pods)
            ratios.append(used["escher"] / used["generated"])
            per_pod = {way: used[way] / args.pods * 1e3 for way in WAYS}
            print(f"{r + 1:>5}{per_pod['generated']:11.3f}{per_pod['escher']:9.3f}"
                  f"{ratios[-1]:7.2f}x", flush=True)  # fmt: skip
        print(f"median ratio escher / generated: {statistics.median(ratios):.2f}x")
        kube.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
