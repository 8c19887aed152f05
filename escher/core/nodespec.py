"""`NodeSpec`: which nodes a `set_resource` call applies to."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeAlias

from escher.core.cluster import ClusterState, Node
from escher.core.errors import InvalidNodeSpecError, NotInTaskError, ValidationError, short_repr
from escher.core.resources import Resources


@dataclass(frozen=True)
class NodeSpec:
    """Where a resource is set. Build one with a classmethod or let `NodeSpec.parse` coerce.

    Exactly one of the selectors is used:

    * `node_id`: that node.
    * `having`: every alive node whose *available* resources contain the vector
      (at most `num_nodes` of them, in node-id order, when set).
    * `labels`: every alive node carrying all these labels (optionally at most `num_nodes`).
    * none of them (`NodeSpec.local()`): the node the calling task runs on.
    """

    node_id: str | None = None
    having: Resources | None = None
    labels: Mapping[str, str] | None = field(default=None, hash=False)
    num_nodes: int | None = None

    def __post_init__(self) -> None:
        node_id, having, labels = self.node_id, self.having, self.labels
        if node_id is not None and (type(node_id) is not str or not node_id):
            raise InvalidNodeSpecError(
                f"node_id must be a non-empty string (a node's id), got {short_repr(node_id)}."
            )
        if having is not None and type(having) is not Resources:
            try:
                object.__setattr__(self, "having", Resources.of(having))
            except ValidationError as exc:
                raise InvalidNodeSpecError(f"having: {exc}") from None
        if labels is not None:
            object.__setattr__(self, "labels", _check_labels(labels))
        chosen = [
            n
            for n, v in (("node_id", node_id), ("having", having), ("labels", labels))
            if v is not None
        ]
        if len(chosen) > 1:
            raise InvalidNodeSpecError(
                f"a NodeSpec selects by one of node_id, having or labels; got {', '.join(chosen)}."
            )
        if self.num_nodes is not None:
            _check_num_nodes(self.num_nodes)
            if having is None and labels is None:
                where = f"node id {node_id!r}" if node_id is not None else "the caller's own node"
                raise InvalidNodeSpecError(
                    f"num_nodes limits a resource-vector or label selector; {where} is one node. "
                    "Drop num_nodes, or select by a vector or labels."
                )

    @classmethod
    def node(cls, node_id: str) -> NodeSpec:
        """The node with this id."""
        return cls.parse(node_id)

    @classmethod
    def with_available(
        cls, resources: Mapping[str, float], num_nodes: int | None = None
    ) -> NodeSpec:
        """Nodes whose available resources contain `resources`."""
        return cls.parse(resources, num_nodes=num_nodes)

    @classmethod
    def with_labels(cls, labels: Mapping[str, str], num_nodes: int | None = None) -> NodeSpec:
        """Nodes carrying all of `labels`."""
        return cls(labels=_check_labels(labels), num_nodes=_check_num_nodes(num_nodes))

    @classmethod
    def local(cls) -> NodeSpec:
        """The node where the calling task runs."""
        return cls()

    @property
    def is_local(self) -> bool:
        """True for the caller's-own-node spec."""
        return self.node_id is None and self.having is None and self.labels is None

    @classmethod
    def parse(cls, spec: NodeSpecLike, num_nodes: int | None = None) -> NodeSpec:
        """Coerce a node id, resource vector, `NodeSpec` or None into a `NodeSpec`.

        Raises:
            InvalidNodeSpecError: `spec` is of another type, or `num_nodes` is not a positive int.
        """
        num_nodes = _check_num_nodes(num_nodes)
        if isinstance(spec, NodeSpec):
            if num_nodes is None:
                return spec
            return cls(spec.node_id, spec.having, spec.labels, num_nodes)
        if spec is None:
            return cls(num_nodes=num_nodes)
        if isinstance(spec, str):
            if not spec:
                raise InvalidNodeSpecError("node_spec is an empty node id.")
            if num_nodes is None and cls is NodeSpec:
                return _by_node_id(spec)
            return cls(node_id=spec, num_nodes=num_nodes)
        if isinstance(spec, Mapping):
            try:
                return cls(having=Resources.of(spec), num_nodes=num_nodes)
            except ValidationError as exc:
                raise InvalidNodeSpecError(f"node_spec resource vector: {exc}") from None
        raise InvalidNodeSpecError(
            f"node_spec must be a node id (str), a resource vector (dict), a NodeSpec or None; "
            f"got {type(spec).__name__} {short_repr(spec)}."
        )

    def select(self, state: ClusterState, caller_node: str | None = None) -> list[str]:
        """Ids of the nodes of `state` this spec picks, in id order.

        A node id that is not in `state` yields no nodes; the caller decides if that is an error.

        Raises:
            NotInTaskError: a local spec and no `caller_node`.
        """
        if self.is_local:
            if caller_node is None:
                raise NotInTaskError(
                    "node_spec=None means 'the node this task runs on', but the caller is not a "
                    "task. Pass a node id or a resource vector instead."
                )
            node = state.nodes.get(caller_node)
            return [caller_node] if node is not None and node.alive else []
        if self.node_id is not None:
            node = state.nodes.get(self.node_id)
            return [self.node_id] if node is not None and node.alive else []
        chosen = [nid for nid in sorted(state.nodes) if self.matches(state.nodes[nid])]
        return chosen if self.num_nodes is None else chosen[: self.num_nodes]

    def matches(self, node: Node) -> bool:
        """True if `node` satisfies the vector or label selector (ignores `num_nodes`)."""
        if not node.alive:
            return False
        if self.having is not None:
            return self.having.fits_in(node.available)
        if self.labels is not None:
            return all(node.labels.get(k) == v for k, v in self.labels.items())
        return True

    def describe(self) -> str:
        """A short human description."""
        if self.is_local:
            return "the caller's node"
        if self.node_id is not None:
            return f"node {self.node_id!r}"
        cap = f" (at most {self.num_nodes})" if self.num_nodes else ""
        if self.having is not None:
            return f"nodes with {self.having.to_dict()} available{cap}"
        return f"nodes labelled {dict(self.labels or {})}{cap}"


@functools.lru_cache(maxsize=4096)
def _by_node_id(node_id: str) -> NodeSpec:
    """The (immutable) spec of one node id, built once: `set_resource` by id is hot."""
    return NodeSpec(node_id=node_id)


def _check_num_nodes(num_nodes: object) -> int | None:
    if num_nodes is None:
        return None
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 1:
        raise InvalidNodeSpecError(
            f"num_nodes must be a positive integer or None, got {short_repr(num_nodes)}."
        )
    return num_nodes


def _check_labels(labels: object) -> dict[str, str]:
    """A copy of a label selector: a non-empty mapping of string keys to string values."""
    if not isinstance(labels, Mapping) or not labels:
        raise InvalidNodeSpecError(
            f"a label selector must be a non-empty mapping of node label -> value (e.g. "
            f"{{'zone': 'a'}}), got {short_repr(labels)}."
        )
    bad = {k: v for k, v in labels.items() if type(k) is not str or type(v) is not str or not k}
    if bad:
        raise InvalidNodeSpecError(
            f"node labels and their values are strings; got {short_repr(bad)}. Write the "
            "values as strings (e.g. {'rack': '3'})."
        )
    return dict(labels)


NodeSpecLike: TypeAlias = "NodeSpec | str | Mapping[str, float] | None"
