"""The cluster as kube-scheduler sees it: nodes (allocatable, labels, taints, cordon) and the
pods bound to them, read from ``kubectl get nodes,pods -A -o json|yaml`` or API objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from escher.core.cluster import ClusterState, Node
from escher.core.errors import InvalidCapacityError, ValidationError
from escher.core.quantity import parse_quantity
from escher.core.resources import Resources
from escher.manifests._files import read_documents
from escher.manifests._requests import pod_requests, to_escher
from escher.manifests._workloads import ManifestError, as_labels, as_list, as_map, flatten

#: Pod phases whose pods no longer hold their node's resources.
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class KubeNode:
    """One node: its name, labels, taints, cordon, and allocatable (Kubernetes names)."""

    name: str
    labels: Mapping[str, str]
    taints: tuple[Mapping[str, Any], ...]
    unschedulable: bool
    allocatable: Mapping[str, float]


@dataclass(frozen=True)
class RunningPod:
    """A pod bound to a node and not finished (it holds its requests there)."""

    namespace: str
    name: str
    node: str
    labels: Mapping[str, str]
    requests: Mapping[str, float]
    affinity: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KubeCluster:
    """Nodes and the pods running on them, what escher needs of ``kubectl get nodes,pods``.

    Attributes:
        nodes: Node name -> node.
        pods: Pods bound to a node and not finished (they hold requests, and count for
            inter-pod affinity, anti-affinity and spreading).
        namespaces: Namespace labels, by name (when Namespace objects were listed too).
        pending: Pods not yet bound to a node (listed, not counted).
    """

    nodes: Mapping[str, KubeNode]
    pods: tuple[RunningPod, ...] = ()
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    pending: int = 0

    def used(self) -> dict[str, dict[str, float]]:
        """Node -> Kubernetes resource -> what its running pods request (with ``pods``)."""
        out: dict[str, dict[str, float]] = {n: {} for n in self.nodes}
        for pod in self.pods:
            held = out.get(pod.node)
            if held is None:
                continue
            for k, v in pod.requests.items():
                held[k] = held.get(k, 0.0) + v
            held["pods"] = held.get("pods", 0.0) + 1
        return out

    def to_state(self) -> ClusterState:
        """An escher `ClusterState`: free = allocatable minus the requests of running pods.

        Cordoned and tainted nodes stay in the state (alive): which pods may use them is up
        to each workload's tolerations, which `check_manifests` turns into statements.
        """
        used = self.used()
        nodes: dict[str, Node] = {}
        for name, node in self.nodes.items():
            total = to_escher(node.allocatable)
            held = to_escher(used[name])
            free = {k: max(0.0, v - held.get(k, 0.0)) for k, v in total.items()}
            nodes[name] = Node(
                id=name,
                total=Resources(total),
                available=Resources(free),
                labels=dict(node.labels),
            )
        return ClusterState(nodes=nodes)


def _node(obj: Mapping[str, Any], where: str) -> KubeNode:
    meta = as_map(obj.get("metadata"), f"{where}: metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ManifestError(f"{where}: Node without metadata.name.")
    where = f"{where}: Node {name}"
    spec = as_map(obj.get("spec"), f"{where}: spec")
    status = as_map(obj.get("status"), f"{where}: status")
    alloc_raw = as_map(
        status.get("allocatable") or status.get("capacity"), f"{where}: status.allocatable"
    )
    allocatable: dict[str, float] = {}
    for k, v in alloc_raw.items():
        try:
            allocatable[str(k)] = parse_quantity(v)
        except InvalidCapacityError as exc:
            raise ManifestError(f"{where}: status.allocatable.{k}: {exc}") from None
    taints = []
    for i, t in enumerate(as_list(spec.get("taints"), f"{where}: spec.taints")):
        taint = as_map(t, f"{where}: spec.taints[{i}]")
        if not isinstance(taint.get("key"), str) or not isinstance(taint.get("effect"), str):
            raise ManifestError(f"{where}: spec.taints[{i}]: a taint has a key and an effect.")
        taints.append(taint)
    labels = as_labels(meta.get("labels"), f"{where}: metadata.labels")
    return KubeNode(name, labels, tuple(taints), spec.get("unschedulable") is True, allocatable)


def _pod(obj: Mapping[str, Any], where: str) -> RunningPod | None:
    meta = as_map(obj.get("metadata"), f"{where}: metadata")
    spec = as_map(obj.get("spec"), f"{where}: spec")
    status = as_map(obj.get("status"), f"{where}: status")
    node = spec.get("nodeName")
    if not node or not isinstance(node, str) or str(status.get("phase")) in FINISHED_PHASES:
        return None
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name"))
    where = f"{where}: Pod {namespace}/{name}"
    return RunningPod(
        namespace=namespace,
        name=name,
        node=node,
        labels=as_labels(meta.get("labels"), f"{where}: metadata.labels"),
        requests=pod_requests(spec, f"{where}: spec"),
        affinity=as_map(spec.get("affinity"), f"{where}: spec.affinity"),
    )


def cluster_from_objects(objects: Iterable[Mapping[str, Any]]) -> KubeCluster:
    """A `KubeCluster` from Node and Pod objects (``kubectl get nodes,pods -A -o json``
    items, ``List`` objects, or what the API server lists); other kinds are ignored.

    Raises:
        ManifestError: a malformed node or pod, or no node at all.
    """
    nodes: dict[str, KubeNode] = {}
    pods: list[RunningPod] = []
    namespaces: dict[str, Mapping[str, str]] = {}
    pending = 0
    for obj, where in flatten(objects, "<cluster>"):
        kind = obj.get("kind")
        if kind == "Node":
            node = _node(obj, where)
            nodes[node.name] = node
        elif kind == "Pod":
            pod = _pod(obj, where)
            if pod is not None:
                pods.append(pod)
            elif not as_map(obj.get("spec"), f"{where}: spec").get("nodeName"):
                pending += 1
        elif kind == "Namespace":
            meta = as_map(obj.get("metadata"), f"{where}: metadata")
            namespaces[str(meta.get("name"))] = as_labels(meta.get("labels"), f"{where}: labels")
    if not nodes:
        raise ManifestError(
            "the cluster listing has no Node objects; write it with "
            "`kubectl get nodes,pods -A -o json > cluster.json`."
        )
    return KubeCluster(nodes, tuple(pods), namespaces, pending)


def _typed(objects: Iterable[Any], kind: str) -> Iterable[Any]:
    """List items read from the API lack their kind; the list's kind names it."""
    for obj in objects:
        if isinstance(obj, Mapping) and "kind" not in obj:
            yield {**obj, "kind": kind}
        else:
            yield obj


def load_cluster(path: str | Path) -> KubeCluster:
    """A `KubeCluster` from a file that ``kubectl get nodes,pods -A -o json`` (or ``-o yaml``)
    wrote.

    Raises:
        ManifestError: an unreadable file or a listing without nodes, naming the file.
    """
    p = Path(path)
    if not p.is_file():
        raise ManifestError(
            f"{p}: no such file; write it with `kubectl get nodes,pods -A -o json`."
        )
    docs = read_documents(p)
    objects: list[Any] = []
    for doc in docs:
        if isinstance(doc, Mapping) and doc.get("kind") in ("NodeList", "PodList"):
            objects.extend(_typed(doc.get("items") or [], str(doc["kind"])[:-4]))
        elif doc is not None:
            objects.append(doc)
    try:
        return cluster_from_objects(objects)
    except ManifestError as exc:
        raise ManifestError(f"{p}: {exc}") from None
    except ValidationError as exc:  # pragma: no cover - defensive: a bad quantity elsewhere
        raise ManifestError(f"{p}: {exc}") from None
