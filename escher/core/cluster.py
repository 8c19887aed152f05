"""Snapshots of the cluster: `Node` and `ClusterState`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from escher.core.errors import PlanFormatError, UnknownNodeError, ValidationError, did_you_mean
from escher.core.resources import Resources


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
        """Parse the cluster file format.

        Nodes may omit `available` (defaults to `total`) and `ephemeral`.

        Raises:
            PlanFormatError: naming `source` and the place of the problem.
        """
        if not isinstance(data, Mapping) or not isinstance(data.get("nodes"), list):
            raise PlanFormatError(f"{source}: expected an object with a list 'nodes'.")
        nodes: dict[str, Node] = {}
        for i, raw in enumerate(data["nodes"]):
            where = f"{source}: nodes[{i}]"
            if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
                raise PlanFormatError(f"{where}: expected an object with a string 'id'.")
            unknown = set(raw) - {"id", "total", "available", "labels", "alive", "ephemeral"}
            if unknown:
                raise PlanFormatError(f"{where}: unknown field(s) {sorted(unknown)}.")
            try:
                total = Resources(raw.get("total") or {})
                available = Resources(raw.get("available", raw.get("total")) or {})
            except (ValidationError, AttributeError, TypeError) as exc:
                raise PlanFormatError(f"{where}: {exc}") from None
            labels = raw.get("labels") or {}
            if not isinstance(labels, Mapping):
                raise PlanFormatError(f"{where}.labels: expected an object.")
            if raw["id"] in nodes:
                raise PlanFormatError(f"{where}: duplicate node id {raw['id']!r}.")
            nodes[raw["id"]] = Node(
                id=raw["id"],
                total=total,
                available=available,
                labels={str(k): str(v) for k, v in labels.items()},
                alive=bool(raw.get("alive", True)),
                ephemeral=frozenset(raw.get("ephemeral") or ()),
            )
        time = data.get("time", 0.0)
        return cls(nodes=nodes, time=float(time) if isinstance(time, int | float) else 0.0)

    @classmethod
    def load(cls, path: str | Path) -> ClusterState:
        """Read a cluster file (JSON).

        Raises:
            PlanFormatError: unreadable file or bad content, naming the file and place.
        """
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise PlanFormatError(f"{path}: cannot read cluster file: {exc.strerror}.") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PlanFormatError(
                f"{path}: line {exc.lineno} column {exc.colno}: {exc.msg}."
            ) from None
        return cls.from_dict(data, source=str(path))
