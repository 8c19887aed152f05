"""Builders of Kubernetes objects (as kubectl and the API write them) for the manifest tests."""

from __future__ import annotations

from typing import Any

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def node(
    name: str,
    zone: str | None = "a",
    *,
    cpu: str = "4",
    memory: str = "8Gi",
    pods: str = "110",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node object."""
    all_labels = {HOST: name, **(labels or {})}
    if zone is not None:
        all_labels[ZONE] = zone
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods, **(extra or {})}},
    }


def zones(n: int, per_zone: int = 1, **kw: Any) -> list[dict[str, Any]]:
    """`n` zones (a, b, c, ...) of `per_zone` nodes each."""
    return [node(f"{chr(97 + z)}{k}", chr(97 + z), **kw) for z in range(n) for k in range(per_zone)]


def container(cpu: str = "1", memory: str = "1Gi", **more: Any) -> dict[str, Any]:
    """A container requesting `cpu` and `memory` (and `more` resources)."""
    return {
        "name": "c",
        "image": "x",
        "resources": {"requests": {"cpu": cpu, "memory": memory, **more}},
    }


def deployment(
    name: str,
    replicas: int = 1,
    *,
    cpu: str = "1",
    memory: str = "1Gi",
    labels: dict[str, str] | None = None,
    namespace: str | None = None,
    kind: str = "Deployment",
    **spec: Any,
) -> dict[str, Any]:
    """A Deployment (or StatefulSet, ReplicaSet) whose pods carry ``app: name``."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    pod_spec = {"containers": [container(cpu, memory)], **spec}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": {"app": name, **(labels or {})}}, "spec": pod_spec},
        },
    }


def pod(
    name: str,
    *,
    node_name: str | None = None,
    cpu: str = "1",
    labels: dict[str, str] | None = None,
    namespace: str = "default",
    phase: str = "Running",
    **spec: Any,
) -> dict[str, Any]:
    """A Pod (bound to `node_name` when given)."""
    pod_spec: dict[str, Any] = {"containers": [container(cpu)], **spec}
    if node_name:
        pod_spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels or {}},
        "spec": pod_spec,
        "status": {"phase": phase},
    }


def anti(app: str, key: str = ZONE) -> dict[str, Any]:
    """A required pod anti-affinity term against pods labelled ``app``."""
    return {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
            ]
        }
    }


def spread(app: str, key: str = ZONE, skew: int = 1, **more: Any) -> list[dict[str, Any]]:
    """One DoNotSchedule topology spread constraint over pods labelled ``app``."""
    return [
        {
            "maxSkew": skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}},
            **more,
        }
    ]


def affinity_in(key: str, *values: str, op: str = "In") -> dict[str, Any]:
    """Required node affinity: one term with one expression."""
    expr: dict[str, Any] = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [expr]}]
            }
        }
    }
