"""Reading the cluster from Ray: node totals, availability, labels, and a cache of them."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.core.resources import Resources

#: Resources Ray defines on every node; escher never creates, resizes or deletes these.
RAY_PREDEFINED = frozenset({"CPU", "GPU", "memory", "object_store_memory"})
_PREDEFINED_PREFIXES = ("node:", "accelerator_type:")


def ray_up() -> bool:
    """True while this process is connected to Ray (background threads stop otherwise)."""
    import ray

    return bool(ray.is_initialized())


def wait_for(object_ref: Any, timeout: float) -> Any:
    """The value of `object_ref`, waiting at most `timeout` seconds.

    Waits on a future rather than with `ray.get`: inside a task, `ray.get` tells the raylet
    the worker is blocked, so Ray lends the task's CPUs to other tasks meanwhile (a ghost
    task that holds resources would stop holding them) and starts extra worker processes.

    Raises:
        TimeoutError: not ready in time.
        Exception: what the remote call raised.
    """
    return object_ref.future().result(timeout=timeout)


def is_ray_internal(name: str) -> bool:
    """True for per-node marker resources (node:<ip>, node:__internal_head__)."""
    return name.startswith("node:")


def is_node_defined(name: str) -> bool:
    """True for resources Ray or the node's start options define."""
    return name in RAY_PREDEFINED or name.startswith(_PREDEFINED_PREFIXES)


@dataclass
class RawView:
    """One read of Ray's per-node totals and availability (alive nodes only)."""

    total: dict[str, dict[str, float]]
    available: dict[str, dict[str, float]]
    taken_at: float = field(default_factory=time.monotonic)


def read_raw() -> RawView:
    """Ask the GCS for every alive node's totals and available resources."""
    import ray._private.state as ray_state

    total = ray_state.total_resources_per_node()  # type: ignore[no-untyped-call]
    available = ray_state.available_resources_per_node()  # type: ignore[no-untyped-call]
    return RawView(total=total, available={n: available.get(n, {}) for n in total})


class NodeCache:
    """What rarely changes: each node's labels and node-defined resources (TTL-refreshed)."""

    def __init__(self, prefix: str, ttl: float = 2.0) -> None:
        self._prefix = prefix
        self._ttl = ttl
        self._lock = threading.Lock()
        self._labels: dict[str, dict[str, str]] = {}
        self._physical: dict[str, Resources] = {}
        self._at = -1e9

    def physical(self, *, fresh: bool = False) -> dict[str, Resources]:
        """Alive node -> its node-defined resources (no ephemeral ones, no node: markers)."""
        if fresh or time.monotonic() - self._at > self._ttl:
            self.refresh()
        return self._physical

    def labels(self, node_ids: set[str] | None = None) -> dict[str, dict[str, str]]:
        """Node -> labels; refreshes when a node of `node_ids` is not known yet."""
        if node_ids is not None and not node_ids <= set(self._labels):
            self.refresh()
        return self._labels

    def app_names(self) -> frozenset[str]:
        """Names of application-defined custom resources on any node."""
        return frozenset(
            name for res in self.physical().values() for name in res if name not in RAY_PREDEFINED
        )

    def refresh(self, raw: RawView | None = None) -> None:
        """Re-read labels (ray.nodes) and totals."""
        import ray

        raw = raw or read_raw()
        labels = {
            n["NodeID"]: {
                k: v for k, v in (n.get("Labels") or {}).items() if not k.startswith("ray.io/")
            }
            for n in ray.nodes()  # type: ignore[no-untyped-call]
            if n.get("Alive")
        }
        physical = {node: self.physical_part(totals) for node, totals in raw.total.items()}
        with self._lock:
            self._labels, self._physical, self._at = labels, physical, time.monotonic()

    def physical_part(self, totals: Mapping[str, float]) -> Resources:
        """The node-defined part of a raw totals mapping."""
        return Resources._trusted(
            {
                k: float(v)
                for k, v in totals.items()
                if not k.startswith(self._prefix) and not is_ray_internal(k) and v > 0
            }
        )
