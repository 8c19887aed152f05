"""`Backend`: the small abstract base every backend implements.

Public methods validate their input once, here, then call the underscore method a backend
overrides; so every backend rejects the same bad input with the same error, before any state
changes.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

from escher.core.clock import Clock
from escher.core.cluster import ClusterState
from escher.core.errors import InvalidCapacityError, UnsupportedError
from escher.core.nodespec import NodeSpec, NodeSpecLike
from escher.core.resources import Resources, validate_label, validate_quantity
from escher.core.task import TaskRef, TaskSpec


class Capability(enum.Flag):
    """What a backend offers beyond the required API."""

    NONE = 0
    #: Capacities and requests may be fractional (else integers only, as in Kubernetes).
    FRACTIONAL = enum.auto()
    #: `launch_gang` places a set of tasks all together or not at all.
    ATOMIC_GANG = enum.auto()
    #: Time is simulated; `TaskSpec.duration` is honoured.
    VIRTUAL_CLOCK = enum.auto()
    #: Nodes can be added and removed at run time (`add_node` / `remove_node`).
    NODE_MEMBERSHIP = enum.auto()
    #: Runs Python callables.
    PYTHON_TASKS = enum.auto()
    #: Runs container images with a command.
    CONTAINER_TASKS = enum.auto()


class Backend(ABC):
    """A cluster with a resource-matching scheduler and run-time ephemeral resources.

    Subclasses implement the underscore methods; callers use the public ones.
    """

    #: Registry name.
    name: ClassVar[str] = "abstract"
    #: What this backend offers beyond the required API.
    capabilities: ClassVar[Capability] = Capability.NONE

    @property
    @abstractmethod
    def clock(self) -> Clock:
        """The clock policies use for timeouts and monitors."""

    # --- ephemeral resources ------------------------------------------------------------
    def set_resource(
        self,
        label: str,
        capacity: float,
        node_spec: NodeSpecLike = None,
        *,
        num_nodes: int | None = None,
    ) -> tuple[str, ...]:
        """Create, resize or (capacity 0) delete ephemeral resource `label`.

        Args:
            label: The ephemeral resource's name (see `escher.core.resources.validate_label`).
            capacity: Its new total on each selected node; 0 deletes it.
            node_spec: A node id, a resource vector (nodes whose *available* resources contain
                it), a `NodeSpec`, or None for the node the calling task runs on.
            num_nodes: With a vector or label selector: at most this many nodes.

        Returns:
            The ids of the nodes it was applied to, in id order (empty if a selector matched
            none).

        Raises:
            ValidationError: a bad label, capacity or node spec, or an unknown node id.
            NotInTaskError: node_spec None outside a task.
        """
        label = validate_label(label)
        quantity = validate_quantity(capacity, what=f"capacity of {label!r}")
        if Capability.FRACTIONAL not in self.capabilities and not quantity.is_integer():
            raise InvalidCapacityError(
                f"the {self.name} backend only takes whole capacities; got {quantity} for "
                f"{label!r}. Scale the unit (e.g. 1000 milli-units) instead."
            )
        spec = NodeSpec.parse(node_spec, num_nodes)
        return tuple(self._set_resource(label, quantity, spec))

    @abstractmethod
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> Sequence[str]:
        """Apply a validated call. Raise UnknownNodeError / NotInTaskError /
        ReservedResourceError (label is node-defined) before changing anything."""

    @abstractmethod
    def get_cluster_state(self) -> ClusterState:
        """A consistent snapshot of every alive node."""

    # --- tasks --------------------------------------------------------------------------
    def launch(self, spec: TaskSpec) -> TaskRef:
        """Queue a task; it runs once some node's available resources cover its request.

        A request no node could ever fit fails at once: its handle's status is INFEASIBLE
        and `result()` raises `UnschedulableError`.
        """
        self._check_request(spec.resources)
        return self._launch(spec)

    @abstractmethod
    def _launch(self, spec: TaskSpec) -> TaskRef:
        """Queue a validated task and return its handle."""

    def launch_gang(self, specs: Sequence[TaskSpec]) -> list[TaskRef]:
        """Place all of `specs` together or none of them (needs Capability.ATOMIC_GANG).

        Raises:
            UnsupportedError: the backend cannot place gangs atomically.
        """
        if Capability.ATOMIC_GANG not in self.capabilities:
            raise UnsupportedError(
                f"the {self.name} backend has no atomic gang placement; use escher.esl.Gang, "
                "which builds it from ephemeral resources."
            )
        for spec in specs:
            self._check_request(spec.resources)
        return self._launch_gang(list(specs))

    def _launch_gang(self, specs: list[TaskSpec]) -> list[TaskRef]:
        raise UnsupportedError(f"the {self.name} backend has no atomic gang placement.")

    @abstractmethod
    def current_node_id(self) -> str | None:
        """The node the calling code runs on, if it runs inside a task of this backend."""

    # --- membership (Capability.NODE_MEMBERSHIP) ------------------------------------------
    def add_node(
        self,
        node_id: str,
        resources: dict[str, float],
        labels: dict[str, str] | None = None,
    ) -> None:
        """Add a node (simulated backends)."""
        raise UnsupportedError(f"the {self.name} backend cannot add nodes at run time.")

    def remove_node(self, node_id: str) -> None:
        """Remove a node: its ephemeral resources vanish, its tasks fail or are retried."""
        raise UnsupportedError(f"the {self.name} backend cannot remove nodes at run time.")

    # --- lifecycle ----------------------------------------------------------------------
    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the backend holds. Safe to call twice."""

    def __enter__(self) -> Backend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _check_request(self, request: Resources) -> None:
        if Capability.FRACTIONAL not in self.capabilities:
            bad = {n: q for n, q in request.items() if not q.is_integer() and n != "CPU"}
            if bad:
                raise InvalidCapacityError(
                    f"the {self.name} backend only takes whole quantities of extended "
                    f"resources; got {bad}."
                )
