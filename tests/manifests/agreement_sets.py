"""Generated manifest sets over fake nodes, for the agreement test against kube-scheduler.

A `ManifestSet` is what a user would have: a few nodes (zones, labels, taints, cordons,
extended resources), pods already running on them (bound with ``nodeName``), and workload
manifests (Deployment, ReplicaSet, StatefulSet, Job, Pod) with requests, init containers,
``nodeSelector``, required node affinity, tolerations, required pod affinity and anti-affinity
(hostname and zone keys, own or other workloads' labels), ``topologySpreadConstraints``
(``DoNotSchedule`` and ``ScheduleAnyway``) and preferred terms. Only fields kube 1.20 has.

Every pod of a set (running or to place) lives in the set's namespace and carries the set's
group in its ``nodeSelector``, and the set's nodes carry that label: sets of different
groups share one control plane at the same time without touching each other (pod affinity
and spreading count pods of the pod's own namespace only; the nodeSelector keeps the nodes
apart). `pods_of` expands a workload into the pods its controller would create: no
controller runs on the test's control plane.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from typing import Any

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GROUP_LABEL = "escher-test/agreement-group"
WIDGET = "example.com/widget"
KINDS = ("Deployment", "Deployment", "ReplicaSet", "StatefulSet", "Job", "Pod")
IMAGE = "escher-test:none"  # nothing runs: no kubelet serves these nodes
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
#: The share of packing cases (see `_Generator.packed_workloads`).
PACKED = 0.3


@dataclass
class NodeSpec:
    """One fake node: what `add_fake_node` takes, plus a cordon."""

    name: str
    capacity: dict[str, str]
    labels: dict[str, str]
    taints: list[dict[str, str]] = field(default_factory=list)
    unschedulable: bool = False


@dataclass
class ManifestSet:
    """Nodes, running pods and workloads of one generated case."""

    index: int
    seed: int
    namespace: str
    group: str
    nodes: list[NodeSpec]
    running: list[dict[str, Any]]
    workloads: list[dict[str, Any]]

    def pods(self) -> list[dict[str, Any]]:
        """The pods the workloads' controllers would create, in manifest order."""
        return [pod for workload in self.workloads for pod in pods_of(workload)]

    def describe(self) -> str:
        kinds = ", ".join(
            f"{w['kind']} {w['metadata']['name']}x{replicas(w)}" for w in self.workloads
        )
        return f"set {self.index} (seed {self.seed}): {len(self.nodes)} nodes; {kinds}"


def replicas(workload: dict[str, Any]) -> int:
    """How many pods a workload runs at once."""
    kind, spec = workload["kind"], workload.get("spec") or {}
    if kind == "Pod":
        return 1
    if kind == "Job":
        parallelism = int(spec.get("parallelism", 1))
        completions = spec.get("completions")
        return min(parallelism, int(completions)) if completions is not None else parallelism
    return int(spec.get("replicas", 1))


def pods_of(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods a workload's controller would create (names ``<name>-<i>``)."""
    meta = workload["metadata"]
    if workload["kind"] == "Pod":
        return [copy.deepcopy(workload)]
    template = workload["spec"]["template"]
    pods = []
    for i in range(replicas(workload)):
        labels = dict((template.get("metadata") or {}).get("labels") or {})
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{meta['name']}-{i}",
                    "namespace": meta["namespace"],
                    "labels": labels,
                },
                "spec": copy.deepcopy(template["spec"]),
            }
        )
    return pods


class _Generator:
    def __init__(self, index: int, seed: int, group: str, namespace: str) -> None:
        self.rng = random.Random(seed)
        self.index, self.seed, self.group, self.namespace = index, seed, group, namespace
        #: A packing case: small pods then big ones on equal nodes, near full, where
        #: kube-scheduler's spreading can strand the big ones.
        self.packed = self.rng.random() < PACKED

    # ------------------------------------------------------------------ nodes
    def nodes(self) -> list[NodeSpec]:
        rng = self.rng
        zones = ["zone-a", "zone-b", "zone-c"][: rng.choice((2, 3, 3))]
        out = []
        for i in range(rng.randint(4, 8)):
            labels = {GROUP_LABEL: self.group}
            if rng.random() < 0.92:
                labels[ZONE] = zones[i % len(zones)] if rng.random() < 0.7 else rng.choice(zones)
            if rng.random() < 0.6:
                labels["disktype"] = rng.choice(("ssd", "hdd"))
            if rng.random() < 0.7:
                labels["gen"] = str(rng.randint(1, 4))
            if self.packed:
                name = f"{self.group}-s{self.index}-n{i}"
                capacity = {"cpu": "2", "memory": "8Gi", "pods": "110"}
                out.append(NodeSpec(name, capacity, {**labels, HOSTNAME: name}))
                continue
            capacity = {
                "cpu": rng.choice(("1", "2", "2", "4", "4")),
                "memory": rng.choice(("2Gi", "4Gi", "8Gi")),
                "pods": "3" if rng.random() < 0.08 else "110",
            }
            if rng.random() < 0.25:
                capacity[WIDGET] = str(rng.randint(1, 2))
            if rng.random() < 0.6:
                capacity["ephemeral-storage"] = rng.choice(("10Gi", "20Gi"))
            taints = []
            if rng.random() < 0.15:
                taints.append({"key": "dedicated", "value": "batch", "effect": "NoSchedule"})
            if rng.random() < 0.08:
                taints.append({"key": "maintenance", "effect": "NoExecute"})
            if rng.random() < 0.1:
                taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
            name = f"{self.group}-s{self.index}-n{i}"
            labels[HOSTNAME] = name
            out.append(NodeSpec(name, capacity, labels, taints, rng.random() < 0.08))
        return out

    # ------------------------------------------------------------------ pods
    def requests(self) -> dict[str, str]:
        rng = self.rng
        req = {
            "cpu": rng.choice(("100m", "250m", "500m", "500m", "1", "1500m")),
            "memory": rng.choice(("128Mi", "512Mi", "1Gi", "2Gi")),
        }
        if rng.random() < 0.05:
            req[WIDGET] = "1"
        if rng.random() < 0.1:
            req["ephemeral-storage"] = rng.choice(("4Gi", "8Gi"))
        return req

    def container(
        self, name: str, requests: dict[str, str], limits_only: bool = False
    ) -> dict[str, Any]:
        """A container requesting `requests`; with `limits_only` it gives them as limits,
        which the API server copies into the requests."""
        if limits_only:
            return {"name": name, "image": IMAGE, "resources": {"limits": requests}}
        limits = {k: v for k, v in requests.items() if k == WIDGET}  # extended: limit = request
        resources: dict[str, Any] = {"requests": requests}
        if limits:
            resources["limits"] = limits
        return {"name": name, "image": IMAGE, "resources": resources}

    def node_affinity_term(self) -> dict[str, Any]:
        rng = self.rng
        options = [
            lambda: {
                "key": ZONE,
                "operator": "In",
                "values": rng.sample(["zone-a", "zone-b", "zone-c"], rng.randint(1, 2)),
            },
            lambda: {
                "key": ZONE,
                "operator": "NotIn",
                "values": [rng.choice(("zone-a", "zone-c"))],
            },
            lambda: {"key": "disktype", "operator": "Exists"},
            lambda: {"key": "disktype", "operator": "DoesNotExist"},
            lambda: {"key": "disktype", "operator": "In", "values": ["ssd"]},
            lambda: {"key": "gen", "operator": "Gt", "values": [str(rng.randint(1, 2))]},
            lambda: {"key": "gen", "operator": "Lt", "values": [str(rng.randint(2, 4))]},
        ]
        return {"matchExpressions": [rng.choice(options)() for _ in range(rng.randint(1, 2))]}

    def tolerations(self) -> list[dict[str, Any]]:
        rng = self.rng
        return rng.choice(
            (
                [
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "batch",
                        "effect": "NoSchedule",
                    }
                ],
                [{"key": "dedicated", "operator": "Exists"}],
                [{"operator": "Exists"}],
                [{"key": "maintenance", "operator": "Exists", "effect": "NoExecute"}],
                [
                    {
                        "key": "dedicated",
                        "operator": "Equal",
                        "value": "web",
                        "effect": "NoSchedule",
                    }
                ],
            )
        )

    def selector(self, own: str, apps: list[str]) -> dict[str, Any]:
        rng = self.rng
        roll = rng.random()
        if roll < 0.55:
            return {"matchLabels": {"app": own}}
        if roll < 0.8:
            return {"matchLabels": {"app": rng.choice(apps)}}
        if roll < 0.9:
            return {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front"]}]}
        return {
            "matchExpressions": [
                {
                    "key": "app",
                    "operator": "In",
                    "values": sorted(rng.sample(apps, min(2, len(apps)))),
                }
            ]
        }

    def pod_term(self, own: str, apps: list[str], keys: tuple[str, ...]) -> dict[str, Any]:
        term: dict[str, Any] = {
            "labelSelector": self.selector(own, apps),
            "topologyKey": self.rng.choice(keys),
        }
        if self.rng.random() < 0.2:
            term["namespaces"] = [self.namespace]
        return term

    def affinity(self, own: str, apps: list[str]) -> dict[str, Any]:
        rng = self.rng
        affinity: dict[str, Any] = {}
        if rng.random() < 0.2:
            terms = [self.node_affinity_term() for _ in range(rng.choice((1, 1, 2)))]
            affinity["nodeAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        if rng.random() < 0.1:
            affinity.setdefault("nodeAffinity", {})[
                "preferredDuringSchedulingIgnoredDuringExecution"
            ] = [{"weight": 10, "preference": self.node_affinity_term()}]
        if rng.random() < 0.35:
            affinity["podAntiAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    self.pod_term(own, apps, (HOSTNAME, HOSTNAME, ZONE))
                ]
            }
        if rng.random() < 0.2:
            affinity["podAffinity"] = {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    self.pod_term(own, apps, (ZONE, ZONE, HOSTNAME))
                ]
            }
        if rng.random() < 0.08:
            affinity.setdefault("podAffinity", {})[
                "preferredDuringSchedulingIgnoredDuringExecution"
            ] = [{"weight": 5, "podAffinityTerm": self.pod_term(own, apps, (ZONE,))}]
        return affinity

    def spread(self, own: str) -> list[dict[str, Any]]:
        rng = self.rng
        return [
            {
                "maxSkew": rng.choice((1, 1, 2)),
                "topologyKey": rng.choice((ZONE, ZONE, HOSTNAME)),
                "whenUnsatisfiable": "DoNotSchedule" if rng.random() < 0.8 else "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": own}},
            }
        ]

    def pod_spec(self, own: str, apps: list[str]) -> dict[str, Any]:
        rng = self.rng
        spec: dict[str, Any] = {
            "containers": [
                self.container(f"c{i}", self.requests(), limits_only=rng.random() < 0.1)
                for i in range(rng.choice((1, 1, 2)))
            ],
            "nodeSelector": {GROUP_LABEL: self.group},
            "terminationGracePeriodSeconds": 0,
        }
        if rng.random() < 0.15:
            spec["initContainers"] = [self.container("init", {"cpu": "1", "memory": "256Mi"})]
        if rng.random() < 0.12:
            spec["nodeSelector"]["disktype"] = rng.choice(("ssd", "ssd", "hdd"))
        if rng.random() < 0.3:
            spec["tolerations"] = self.tolerations()
        affinity = self.affinity(own, apps)
        if affinity:
            spec["affinity"] = affinity
        if rng.random() < 0.3:
            spec["topologySpreadConstraints"] = self.spread(own)
        return spec

    def workloads(self, nodes: list[NodeSpec]) -> list[dict[str, Any]]:
        rng = self.rng
        if self.packed:
            return self.packed_workloads(len(nodes))
        count = rng.randint(1, 4)
        apps = [f"w{j}" for j in range(count)]
        return [
            self.workload(j, rng.choice(KINDS), self.pod_spec(app, apps), rng.randint(1, 4))
            for j, app in enumerate(apps)
        ]

    def packed_workloads(self, nodes: int) -> list[dict[str, Any]]:
        """Small pods (500m) then big ones (1500m) on `nodes` nodes of 2 CPUs: with one big
        pod per node but `spare` nodes, the small ones fit only 1 per node beside a big one
        and 4 per spare node (exactly, or 1-2 fewer; one more makes it infeasible)."""
        rng = self.rng
        spare = rng.choice((0, 1, 1, 2))
        big = nodes - spare
        small = big + 4 * spare - rng.choice((0, 0, 1, 2, -1))
        out = []
        for j, (replicas, cpu) in enumerate(((small, "500m"), (big, "1500m"))):
            spec: dict[str, Any] = {
                "containers": [self.container("c", {"cpu": cpu, "memory": "256Mi"})],
                "nodeSelector": {GROUP_LABEL: self.group},
                "terminationGracePeriodSeconds": 0,
            }
            if cpu == "1500m" and rng.random() < 0.3:
                term = {"labelSelector": {"matchLabels": {"app": f"w{j}"}}, "topologyKey": HOSTNAME}
                spec["affinity"] = {"podAntiAffinity": {REQUIRED: [term]}}
            kind = rng.choice(("Deployment", "StatefulSet", "ReplicaSet", "Job"))
            out.append(self.workload(j, kind, spec, replicas))
        if rng.random() < 0.25:  # the big ones first: kube-scheduler then packs them well
            out.reverse()
        return out

    def workload(self, j: int, kind: str, spec: dict[str, Any], n: int) -> dict[str, Any]:
        """Workload ``w<j>`` of `kind` running `n` pods of `spec` (a Pod runs one)."""
        app = f"w{j}"
        labels = {"app": app, "tier": self.rng.choice(("front", "back"))}
        meta = {"name": app, "namespace": self.namespace}
        if kind == "Pod":
            return {"apiVersion": "v1", "kind": "Pod", "spec": spec,
                    "metadata": {**meta, "labels": labels}}  # fmt: skip
        body: dict[str, Any] = {"template": {"metadata": {"labels": labels}, "spec": spec}}
        if kind == "Job":
            spec["restartPolicy"] = "Never"
            body.update(parallelism=n, completions=n + self.rng.choice((0, 0, 2)))
            return {"apiVersion": "batch/v1", "kind": kind, "metadata": meta, "spec": body}
        body.update(replicas=n, selector={"matchLabels": {"app": app}})
        if kind == "StatefulSet":
            body["serviceName"] = app
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta, "spec": body}

    def running(self, nodes: list[NodeSpec], apps: list[str]) -> list[dict[str, Any]]:
        """Small pods already bound (by nodeName), labelled like some workloads."""
        rng = self.rng
        out = []
        for i in range(rng.choice((0, 0, 1, 2, 3))):
            node = rng.choice(nodes)
            labels = {"app": rng.choice([*apps, "other"]), "tier": rng.choice(("front", "back"))}
            spec: dict[str, Any] = {
                "nodeName": node.name,
                "containers": [self.container("c", {"cpu": "250m", "memory": "256Mi"})],
                "terminationGracePeriodSeconds": 0,
            }
            if rng.random() < 0.3:  # kube-scheduler keeps new pods away from it (symmetry)
                term = self.pod_term(rng.choice(apps), apps, (HOSTNAME, ZONE))
                spec["affinity"] = {"podAntiAffinity": {REQUIRED: [term]}}
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "spec": spec,
                    "metadata": {
                        "name": f"running-{i}",
                        "namespace": self.namespace,
                        "labels": labels,
                    },
                }
            )
        return out


def generate(index: int, seed: int, group: str) -> ManifestSet:
    """One manifest set: its nodes are named ``<group>-s<index>-n<i>``, its namespace is the
    group's (``agree-<group>``)."""
    namespace = f"agree-{group}"
    gen = _Generator(index, seed, group, namespace)
    nodes = gen.nodes()
    workloads = gen.workloads(nodes)
    apps = [w["metadata"]["name"] for w in workloads]
    running = [] if gen.packed else gen.running(nodes, apps)
    return ManifestSet(index, seed, namespace, group, nodes, running, workloads)
