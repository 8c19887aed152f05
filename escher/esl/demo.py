"""The paper's load-balancing + co-location example, as `escher demo` runs it.

Pairs of tasks are co-located (each pair on one node) and the pairs are spread over the
nodes by a load balancer: the composition the ESCHER paper uses for AlphaZero-style actors.
"""

from __future__ import annotations

import math

import escher
from escher.backends.base import Backend
from escher.esl._colocation import CoLocation
from escher.esl._spread import LoadBalance

#: The cluster used when no backend is given: four nodes of 4 CPUs.
DEMO_NODES = {f"node-{i}": {"CPU": 4} for i in range(1, 5)}


def where() -> str:
    """Task body: the node it runs on."""
    return escher.node_id()


def run_demo(backend: Backend | None = None, pairs: int = 4) -> list[tuple[str, str]]:
    """Run `pairs` pairs of co-located tasks, load-balanced over the nodes.

    Args:
        backend: Where to run (default: a fresh in-memory backend with `DEMO_NODES`,
            closed afterwards).
        pairs: How many pairs.

    Returns:
        (task name, node id) for every task, in launch order.
    """
    own = backend is None
    if backend is None:
        from escher.backends.memory import MemoryBackend

        backend = MemoryBackend(nodes=DEMO_NODES)
    try:
        nodes = len(backend.get_cluster_state().nodes)
        per_node = 2 * math.ceil(pairs / nodes)  # whole pairs per node
        with LoadBalance(backend, per_node=per_node) as lb, CoLocation(backend) as colo:
            groups = [
                colo.group(f"pair-{p}", size=2, resources={"CPU": 1}, policy=lb)
                for p in range(pairs)
            ]
            refs = [
                group.launch(where, name=f"{group.name}/task-{i}")
                for group in groups
                for i in range(2)
            ]
            placed = [ref.result(timeout=120) for ref in refs]
        return [(ref.name, node) for ref, node in zip(refs, placed, strict=True)]
    finally:
        if own:
            backend.close()
