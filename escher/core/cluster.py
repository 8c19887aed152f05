"""Snapshots of the cluster: `Node` and `ClusterState`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from escher.core.errors import PlanFormatError, UnknownNodeError, ValidationError, did_you_mean
from escher.core.formats import load_json, read_document, save_json
from escher.core.resources import EPSILON, Resources


@dataclass(frozen=True)
class Node:
    """One node as seen at snapshot time.

    Attributes:
        id: The node's id, unique in the cluster.
        total: Capacity of every resource: node-defined ones and ephemeral labels.
        available: What is not held by running tasks (never above `total`).
        labels: Fixed key/value labels of the node.
        alive: False once the node has left the cluster.
        ephemeral: Names in `total` that were created by `set_resource`.
    """

    id: str
    total: Resources
    available: Resources
    labels: Mapping[str, str] = field(default_factory=dict)
    alive: bool = True
    ephemeral: frozenset[str] = frozenset()

    @property
    def physical(self) -> Resources:
        """The node-defined part of `total` (everything but ephemeral labels)."""
        return Resources({k: v for k, v in self.total.items() if k not in self.ephemeral})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description (the cluster file format)."""
        return {
            "id": self.id,
            "total": self.total.to_dict(),
            "available": self.available.to_dict(),
            "labels": dict(self.labels),
            "alive": self.alive,
            "ephemeral": sorted(self.ephemeral),
        }


@dataclass(frozen=True)
class ClusterState:
    """A consistent snapshot of every node, taken at one instant.

    Attributes:
        nodes: Node id -> `Node`, alive nodes only unless the backend reports dead ones.
        time: The backend clock's reading when the snapshot was taken.
    """

    nodes: Mapping[str, Node]
    time: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", MappingProxyType(dict(self.nodes)))

    def node(self, node_id: str) -> Node:
        """The node with this id.

        Raises:
            UnknownNodeError: no such node in the snapshot.
        """
        try:
            return self.nodes[node_id]
        except KeyError:
            raise UnknownNodeError(
                f"no node {node_id!r} in the cluster.{did_you_mean(node_id, self.nodes)}"
            ) from None

    def holding(self, label: str) -> dict[str, float]:
        """Node id -> total capacity of `label`, for nodes that have it."""
        return {nid: n.total[label] for nid, n in self.nodes.items() if label in n.total}

    def to_dict(self) -> dict[str, Any]:
        """The cluster file format (see docs/file-formats.md)."""
        return {"time": self.time, "nodes": [n.to_dict() for n in self.nodes.values()]}

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "<cluster>") -> ClusterState:
        """Parse the cluster file format (validated against ``cluster.schema.json``).

        Nodes may omit `available` (defaults to `total`), `labels`, `alive` and `ephemeral`.
        Beyond the schema: node ids are unique, resource names are valid, and no available
        quantity exceeds the node's total of that resource.

        Raises:
            PlanFormatError: naming `source`, the place and the problem.
        """
        data, _ = read_document(data, "cluster", source=source)  # "16Gi" -> a number
        nodes: dict[str, Node] = {}
        for i, raw in enumerate(data["nodes"]):
            node = _node_from_dict(raw, f"{source}: nodes[{i}]")
            if node.id in nodes:
                raise PlanFormatError(f"{source}: nodes[{i}].id: duplicate node id {node.id!r}.")
            nodes[node.id] = node
        return cls(nodes=nodes, time=float(data.get("time", 0.0)))

    def save(self, path: str | Path) -> Path:
        """Write this snapshot as a cluster file (JSON; `load` reads it back). The same
        snapshot gives the same bytes.

        Raises:
            ValidationError: the file cannot be written.
        """
        return save_json(self.to_dict(), path, "cluster")

    @classmethod
    def load(cls, path: str | Path) -> ClusterState:
        """Read a cluster file (JSON).

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
        """
        return cls.from_dict(load_json(path, "cluster"), source=str(path))


def _node_from_dict(raw: Mapping[str, Any], where: str) -> Node:
    """One node of a schema-valid cluster document; checks the rules the schema cannot."""
    vectors = {}
    for key in ("total", "available"):
        try:
            vectors[key] = Resources(raw.get(key, raw.get("total")) or {})
        except ValidationError as exc:
            raise PlanFormatError(f"{where}.{key}: {exc}") from None
    total, available = vectors["total"], vectors["available"]
    if not available.fits_in(total):
        over = {k: v for k, v in available.items() if v > total.get(k, 0.0) + EPSILON}
        raise PlanFormatError(
            f"{where}.available: {over} exceeds the node's total "
            f"{ {k: total.get(k, 0.0) for k in over} }; available is at most total."
        )
    return Node(
        id=raw["id"],
        total=total,
        available=available,
        labels=dict(raw.get("labels", {})),
        alive=raw.get("alive", True),
        ephemeral=frozenset(raw.get("ephemeral", ())),
    )
