"""Task bodies for the Kubernetes tests (module level, so the in-pod runner can import them)."""

from __future__ import annotations

import time

import escher


def big_result(n: int) -> bytes:
    """Return `n` incompressible bytes."""
    import os

    return os.urandom(n)


def sleep_then_node(seconds: float) -> str:
    """Sleep, then return the node id."""
    time.sleep(seconds)
    return escher.node_id()


def env_node() -> tuple[str, str]:
    """(escher.node_id(), $NODE_NAME) as the task sees them."""
    import os

    return escher.node_id(), os.environ.get("NODE_NAME", "")


def set_own_label(label: str, capacity: int) -> str:
    """Create `label` on the task's own node (as the pod's ServiceAccount); return the node."""
    escher.set_resource(label, capacity)
    return escher.node_id()


def span(seconds: float) -> tuple[str, float, float]:
    """(node, start, end) of a run that sleeps `seconds` (wall-clock times of this machine)."""
    start = time.time()
    time.sleep(seconds)
    return escher.node_id(), start, time.time()
