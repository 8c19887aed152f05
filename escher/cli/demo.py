"""``escher demo``: the paper's load-balancing + co-location example, on any backend.

Pairs of tasks are co-located (each pair on one node) and the pairs are spread over the
nodes by a load balancer: the composition the ESCHER paper uses for AlphaZero-style actors.
"""

from __future__ import annotations

import math
import sys
from collections import Counter
from dataclasses import dataclass
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from escher.api import init, node_id
from escher.backends.base import Backend
from escher.cli.conventions import backend_option, command, emit
from escher.esl import CoLocation, LoadBalance

#: The cluster `run_demo` builds when it is given no backend: four nodes of 4 CPUs.
DEMO_NODES = {f"node-{i}": {"CPU": 4} for i in range(1, 5)}


def where() -> str:
    """Task body: the node it runs on."""
    return node_id()


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
        per_node = per_node_limit(pairs, len(backend.get_cluster_state().nodes))
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


@dataclass(frozen=True)
class Claim:
    """One thing the demo promises, checked on where the tasks ran.

    Attributes:
        text: The claim, in one line (``pair-0: both tasks on one node``).
        holds: Whether the placements bear it out.
        detail: What was seen (``node-1``; ``node-1 2, node-2 2``).
    """

    text: str
    holds: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        """The claim as JSON-ready data."""
        return {"claim": self.text, "holds": self.holds, "detail": self.detail}


def per_node_limit(pairs: int, nodes: int) -> int:
    """The load balancer's tasks-per-node limit `run_demo` uses: whole pairs, spread evenly."""
    return 2 * math.ceil(pairs / max(nodes, 1))


def check_claims(placements: list[tuple[str, str]], per_node: int) -> list[Claim]:
    """The demo's claims on `placements`: each pair on one node; at most `per_node` tasks
    on any node (the pairs are spread)."""
    pairs: dict[str, list[str]] = {}
    for task, node in placements:
        pairs.setdefault(task.split("/")[0], []).append(node)
    claims = [
        Claim(
            f"{pair}: both tasks on one node", len(set(nodes)) == 1, ", ".join(sorted(set(nodes)))
        )
        for pair, nodes in pairs.items()
    ]
    load = Counter(node for _, node in placements)
    spread = ", ".join(f"{node} {count}" for node, count in sorted(load.items()))
    claims.append(
        Claim(
            f"pairs spread: at most {per_node} tasks on any node",
            max(load.values(), default=0) <= per_node,
            spread,
        )
    )
    return claims


def next_commands() -> list[str]:
    """Commands to try next, on the sample files shipped with escher."""
    from escher.samples import sample_path

    plan, cluster = sample_path("plan.json"), sample_path("cluster.json")
    return [
        f"escher verify {plan} --cluster {cluster}   # prove this plan before launch",
        "escher why --request CPU=4,memory=2Gi   # could such a task start now? why not?",
        "escher state   # the nodes and what is free",
    ]


POLICIES = {
    "CoLocation": "each pair's two tasks run on one node (a group resource per pair)",
    "LoadBalance": "spreads the pairs over the nodes (a limit of tasks per node)",
}


@command(
    "demo",
    examples=[
        "escher demo                       # in memory: four nodes of 4 CPUs",
        "escher demo --backend ray --pairs 8",
        "escher demo --format json | jq '.placements[].node'",
    ],
    exit_codes={1: "a claim did not hold (the placements are printed)"},
)
@backend_option
@click.option(
    "--pairs", default=4, show_default=True, type=click.IntRange(1, 10_000), help="Task pairs."
)
def demo(backend_name: str | None, pairs: int, fmt: str) -> None:
    """Run the paper's load-balancing + co-location example; check and explain where tasks ran.

    Two policies work together: CoLocation keeps each pair of tasks on one node, LoadBalance
    spreads the pairs. The demo prints where every task ran, checks each claim, and names
    the commands to try next.
    """
    with init(backend_name) as backend:
        nodes = len(backend.get_cluster_state().nodes)
        placements = run_demo(backend, pairs=pairs)
    per_node = per_node_limit(pairs, nodes)
    claims = check_claims(placements, per_node)
    steps = next_commands()
    policies = {
        "CoLocation": POLICIES["CoLocation"],
        "LoadBalance": f"spreads the pairs over the nodes: at most {per_node} tasks per node",
    }
    data = {
        "backend": backend.name,
        "policies": policies,
        "placements": [{"task": task, "node": node} for task, node in placements],
        "claims": [claim.to_dict() for claim in claims],
        "next": steps,
    }

    def text(console: Console) -> None:
        console.print(
            f"escher demo: {pairs} pairs of tasks on the {escape(backend.name)} backend "
            f"({nodes} nodes), under two policies:"
        )
        for name, meaning in policies.items():
            console.print(f"  [bold]{name}[/bold]: {escape(meaning)}")
        table = Table(title="where each task ran")
        table.add_column("task")
        table.add_column("node")
        for task_name, node in placements:
            table.add_row(escape(task_name), escape(node))
        console.print(table)
        console.print("checked:")
        for claim in claims:
            mark = "[green]ok[/green]  " if claim.holds else "[red]FAIL[/red]"
            console.print(f"  {mark} {escape(claim.text)} ({escape(claim.detail)})")
        console.print("next:")
        for step in steps:
            console.print(f"  {escape(step)}", soft_wrap=True, highlight=False)

    emit(data, fmt, text)
    if not all(claim.holds for claim in claims):
        sys.exit(1)
