"""Node records and the cluster snapshot: allocatable minus requests of bound pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.backends.kubernetes._names import Names
from escher.core.cluster import ClusterState, Node
from escher.core.errors import ValidationError
from escher.core.quantity import parse_quantity
from escher.core.resources import Resources, validate_name


@dataclass
class NodeRecord:
    """What escher remembers of one Node object (from a GET, a LIST or a PATCH response)."""

    name: str
    resource_version: str
    labels: dict[str, str]
    annotations: dict[str, str]
    has_annotations: bool
    capacity: dict[str, str]
    allocatable: dict[str, str]
    alive: bool
    #: False once the node's Ready condition is False or Unknown (its kubelet is gone).
    ready: bool = True
    #: `allocatable` parsed, by the `Names` it was parsed with (a launch checks it).
    _parsed: tuple[Names, dict[str, float]] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @classmethod
    def parse(cls, obj: Mapping[str, Any]) -> NodeRecord:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        spec = obj.get("spec") or {}
        conditions = status.get("conditions") or []
        ready = next((c.get("status") for c in conditions if c.get("type") == "Ready"), None)
        return cls(
            name=meta["name"],
            resource_version=str(meta.get("resourceVersion", "")),
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            has_annotations=meta.get("annotations") is not None,
            capacity=dict(status.get("capacity") or {}),
            allocatable=dict(status.get("allocatable") or {}),
            # A node without a Ready condition (no kubelet yet) is not counted as dead.
            alive=not spec.get("unschedulable", False) and ready in (None, "True"),
            ready=ready in (None, "True"),
        )

    def newer_than(self, other: NodeRecord) -> bool:
        """True if this record is at least as recent as `other` (etcd revisions are ints)."""
        try:
            return int(self.resource_version) >= int(other.resource_version)
        except ValueError:
            return True

    def matches(self, selector: Mapping[str, str]) -> bool:
        return all(self.labels.get(k) == v for k, v in selector.items())

    def allocatable_vector(self, names: Names) -> dict[str, float]:
        """`allocatable` in escher's names and numbers (parsed once per record)."""
        parsed = self._parsed
        if parsed is None or parsed[0] is not names:
            parsed = self._parsed = (names, _vector(self.allocatable, names))
        return parsed[1]


def _vector(quantities: Mapping[str, Any], names: Names) -> dict[str, float]:
    out: dict[str, float] = {}
    for k8s_name, text in quantities.items():
        try:
            value = parse_quantity(text)
        except ValidationError:
            continue
        name = names.from_k8s(k8s_name)
        try:
            validate_name(name)
        except ValidationError:
            continue
        if value > 0:
            out[name] = out.get(name, 0.0) + value
    return out


def pod_requests(pod: Mapping[str, Any]) -> dict[str, str | float]:
    """Effective requests of a pod: sum over containers, at least the largest init container."""
    spec = pod.get("spec") or {}
    total: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, text in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0.0) + parse_quantity(text)
    for container in spec.get("initContainers") or []:
        for name, text in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, 0.0), parse_quantity(text))
    for name, text in (spec.get("overhead") or {}).items():
        total[name] = total.get(name, 0.0) + parse_quantity(text)
    return dict(total)


@dataclass
class Usage:
    """Requests held on each node by the pods bound to it."""

    by_node: dict[str, dict[str, float]] = field(default_factory=dict)

    @classmethod
    def of(cls, pods: Iterable[Mapping[str, Any]]) -> Usage:
        usage = cls()
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node:
                continue
            held = usage.by_node.setdefault(node, {})
            for name, value in pod_requests(pod).items():
                held[name] = held.get(name, 0.0) + float(value)
            held["pods"] = held.get("pods", 0.0) + 1
        return usage


def build_state(
    records: Iterable[NodeRecord], usage: Usage, names: Names, now: float
) -> ClusterState:
    """The `ClusterState` of `records` with what bound pods hold subtracted."""
    nodes: dict[str, Node] = {}
    for rec in records:
        total = Resources(rec.allocatable_vector(names))
        held = Resources(_vector(usage.by_node.get(rec.name, {}), names))
        ephemeral = frozenset(names.from_k8s(k) for k in rec.allocatable if names.is_ephemeral(k))
        nodes[rec.name] = Node(
            id=rec.name,
            total=total,
            available=total - held,
            labels=dict(rec.labels),
            alive=rec.alive,
            ephemeral=ephemeral & set(total),
        )
    return ClusterState(nodes=nodes, time=now)


def physical_fits(
    records: Iterable[NodeRecord], request: Mapping[str, float], names: Names
) -> tuple[str, Resources] | None:
    """Some alive node whose allocatable covers the physical part of `request`, with that
    part (in escher's names); None if no node does. An empty part fits anywhere (``""``)."""
    physical = Resources(
        {
            names.from_k8s(names.to_k8s(k)): v
            for k, v in request.items()
            if names.is_physical_request(k)
        }
    )
    if not physical:
        return "", physical
    for rec in records:
        if rec.alive and physical.fits_in(rec.allocatable_vector(names)):
            return rec.name, physical
    return None
