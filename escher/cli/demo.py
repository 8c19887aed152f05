"""``escher demo``: the paper's load-balancing + co-location example, on any backend.

Pairs of tasks are co-located (each pair on one node) and the pairs are spread over the
nodes by a load balancer: the composition the ESCHER paper uses for AlphaZero-style actors.
"""

from __future__ import annotations

import math

import click
from rich.table import Table

import escher
from escher.backends.base import Backend
from escher.cli.conventions import backend_option, command, emit
from escher.esl import CoLocation, LoadBalance

#: The cluster `run_demo` builds when it is given no backend: four nodes of 4 CPUs.
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


@command(
    "demo",
    examples=[
        "escher demo                       # in memory: four nodes of 4 CPUs",
        "escher demo --backend ray --pairs 8",
        "escher demo --format json | jq '.placements[].node'",
    ],
)
@backend_option
@click.option(
    "--pairs", default=4, show_default=True, type=click.IntRange(1, 10_000), help="Task pairs."
)
def demo(backend_name: str | None, pairs: int, fmt: str) -> None:
    """Run the paper's load-balancing + co-location example and show where tasks ran."""
    with escher.init(backend_name) as backend:
        placements = run_demo(backend, pairs=pairs)
    table = Table(title=f"load balancing + co-location on {backend.name}")
    table.add_column("task")
    table.add_column("node")
    for task_name, node_id in placements:
        table.add_row(task_name, node_id)
    data = {
        "backend": backend.name,
        "placements": [{"task": task, "node": node} for task, node in placements],
    }
    emit(data, fmt, table)
