"""The demo as an app: four pairs of co-located tasks, spread two tasks to a node.

Try it with ``escher plan app.py:main --cluster cluster.json`` (nothing runs: the plan is
recorded) or ``escher verify --app app.py:main --cluster cluster.json``.
"""

from __future__ import annotations

import escher
from escher.esl import CoLocation, LoadBalance


def where() -> str:
    """The id of the node the task runs on."""
    return escher.node_id()


def main() -> None:
    """Launch four pairs of tasks: each pair on one node, at most two tasks per node."""
    balance = LoadBalance(per_node=2, name="spread")
    pairs = CoLocation(name="pairs")
    groups = [
        pairs.group(f"pair-{p}", size=2, resources={"CPU": 1}, policy=balance) for p in range(4)
    ]
    for group in groups:
        for i in range(2):
            group.launch(where, name=f"{group.name}/task-{i}")
