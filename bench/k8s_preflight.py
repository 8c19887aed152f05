"""Pre-flight of Kubernetes manifests at scale: `check_manifests` on 1,000 nodes x 10,000 pods.

The cluster: 1,000 nodes in 4 zones (general nodes, SSD nodes labelled ``disk=ssd``, GPU
nodes tainted ``nvidia.com/gpu=present:NoSchedule``, a few cordoned, a few partly used by
running pods). The manifests: 200 Deployments, StatefulSets and Jobs with 10,000 pods in
all and mixed constraints (plain, nodeSelector, required node affinity on zones, zone
spread, hostname anti-affinity, GPU jobs with tolerations, hostname spread, preferred
anti-affinity with ScheduleAnyway). Each instance is checked from the objects (reading
included) as `escher verify -f` does, three ways in the same run:

  constrained   the manifests as generated (expected FEASIBLE)
  infeasible    the same plus one GPU job asking for more GPUs than the cluster has free
                (expected INFEASIBLE, with the explanation shrunk)
  baseline      the same pods with every constraint removed (requests only)

and prints seconds (wall and CPU of the whole check; wall of the verdict, of meeting more
preferences, at most 2 s, and of shrinking the explanation), the verdicts, and the ratios to
the baseline. The issue's bar: the constrained set decided in under 5 s on this machine.
Wall times grow with the machine's load; the CPU times and the ratios are steadier.

    python bench/k8s_preflight.py [--seed N] [--nodes N] [--pods N] [--workloads N]
"""

from __future__ import annotations

import argparse
import copy
import random
import time
from typing import Any

from escher.manifests import check_manifests, cluster_from_objects, workloads_from_objects

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def cluster_objects(rng: random.Random, nodes: int, zones: int = 4) -> list[dict[str, Any]]:
    """Node objects (and a few running pods) as ``kubectl get nodes,pods -A -o json`` lists."""
    out: list[dict[str, Any]] = []
    for i in range(nodes):
        name = f"node-{i:04d}"
        labels = {ZONE: f"zone-{i % zones}", HOST: name}
        spec: dict[str, Any] = {}
        alloc = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        kind = i % 10
        if kind in (1, 2):
            labels["disk"] = "ssd"
            alloc.update(cpu="32", memory="128Gi")
        elif kind in (3, 4):
            labels["accelerator"] = "a100"
            alloc["nvidia.com/gpu"] = "8"
            spec["taints"] = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
        if i % 200 == 7:
            spec["unschedulable"] = True
        out.append(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": {"allocatable": alloc},
            }
        )
    for j in range(nodes // 10):  # running pods on every 10th node
        node = f"node-{rng.randrange(nodes):04d}"
        out.append(
            {
                "kind": "Pod",
                "metadata": {"name": f"running-{j}", "namespace": "kube-system"},
                "spec": {
                    "nodeName": node,
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}],
                },
                "status": {"phase": "Running"},
            }
        )
    return out


def _container(cpu: str, memory: str, gpu: int = 0) -> dict[str, Any]:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpu:
        requests["nvidia.com/gpu"] = gpu
    return {"name": "main", "image": "app", "resources": {"requests": requests}}


def _spec(rng: random.Random, shape: int, app: str, replicas: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [_container(rng.choice(["250m", "500m", "1", "1500m"]), "1Gi")]
    }
    selector = {"matchLabels": {"app": app}}
    if shape == 1:
        spec["nodeSelector"] = {"disk": "ssd"}
    elif shape == 2:
        zones = ["zone-0", "zone-1"] if rng.random() < 0.5 else ["zone-2", "zone-3"]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": ZONE, "operator": "In", "values": zones}]}
                    ]
                }
            }
        }
    elif shape == 3:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]
    elif shape == 4:
        spec["affinity"] = {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": selector, "topologyKey": HOST}
                ]
            }
        }
    elif shape == 5:
        spec["containers"] = [_container("2", "8Gi", gpu=1)]
        spec["nodeSelector"] = {"accelerator": "a100"}
        spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
    elif shape == 6:
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 2,
                "topologyKey": HOST,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": selector,
            }
        ]
    elif shape == 7:
        spec["affinity"] = {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 50,
                        "podAffinityTerm": {"labelSelector": selector, "topologyKey": ZONE},
                    }
                ]
            }
        }
        spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": ZONE,
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": selector,
            }
        ]
    return spec


def workload_objects(rng: random.Random, pods: int, workloads: int) -> list[dict[str, Any]]:
    """`workloads` objects with `pods` pods in all, shapes cycled over the constraint kinds."""
    base, extra = divmod(pods, workloads)
    out: list[dict[str, Any]] = []
    for k in range(workloads):
        replicas = base + (1 if k < extra else 0)
        app = f"app-{k:03d}"
        shape = k % 8
        spec = _spec(rng, shape, app, replicas)
        template = {"metadata": {"labels": {"app": app}}, "spec": spec}
        if shape == 5:
            obj = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": app, "namespace": "batch"},
                "spec": {"parallelism": replicas, "completions": replicas, "template": template},
            }
        else:
            kind = "StatefulSet" if k % 3 == 0 else "Deployment"
            obj = {
                "apiVersion": "apps/v1",
                "kind": kind,
                "metadata": {"name": app, "namespace": "apps"},
                "spec": {"replicas": replicas, "template": template},
            }
        out.append(obj)
    return out


def plain(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same objects with every constraint removed (requests only)."""
    out = copy.deepcopy(objects)
    for obj in out:
        spec = obj["spec"]["template"]["spec"]
        for field in ("nodeSelector", "affinity", "topologySpreadConstraints", "tolerations"):
            spec.pop(field, None)
        for c in spec["containers"]:
            c["resources"]["requests"].pop("nvidia.com/gpu", None)
    return out


def _run(
    label: str, nodes: list[dict[str, Any]], objects: list[dict[str, Any]]
) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    result = check_manifests(
        workloads_from_objects(objects), cluster_from_objects(nodes), timeout=60
    )
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    seconds = result.stats.get("seconds", {})
    verdict = seconds.get("verdict", 0.0)
    pods = sum(len(v) for v in (result.witness or {}).values())
    extra = f"{pods} pods placed" if result.witness else result.cause
    print(
        f"{label:<12} {result.status.value:<10} {wall:6.2f} s wall {cpu:6.2f} s cpu "
        f"(verdict {verdict:5.2f} s, preferences {seconds.get('preferences', 0.0):4.2f} s, "
        f"explanation {seconds.get('explain', 0.0):4.2f} s)  {extra}"
    )
    return wall, verdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--workloads", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nodes = cluster_objects(rng, args.nodes)
    objects = workload_objects(rng, args.pods, args.workloads)
    gpus = sum(
        8 for n in nodes if n["kind"] == "Node" and "nvidia.com/gpu" in n["status"]["allocatable"]
    )
    greedy = copy.deepcopy(objects[5])
    greedy["metadata"]["name"] = "too-many-gpus"
    greedy["spec"]["parallelism"] = greedy["spec"]["completions"] = gpus + 1
    print(f"{args.nodes} nodes, {args.workloads} workloads, {args.pods} pods (seed {args.seed})")
    base, _ = _run("baseline", nodes, plain(objects))
    full, verdict = _run("constrained", nodes, objects)
    bad, _ = _run("infeasible", nodes, [*objects, greedy])
    print(f"constrained / baseline: {full / base:.2f}x   infeasible / baseline: {bad / base:.2f}x")
    print(
        f"bar: constrained decided in under 5 s: {'met' if verdict < 5 else 'NOT met'} "
        f"(verdict {verdict:.2f} s; whole check {full:.2f} s wall)"
    )


if __name__ == "__main__":
    main()
