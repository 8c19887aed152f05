"""The paper's evaluation, reproduced on escher's simulator: `escher bench NAME`.

Each workload (one module in `escher.evaluation.workloads`) runs its baselines and the escher
policy in the same run with the same seed, on the in-memory backend's virtual clock, and
returns a `Result`: a table with the paper's number beside ours, every model parameter,
and a plot (matplotlib, the `plot` extra).

Example::

    from escher import evaluation
    result = evaluation.run("wordcount", quick=True, seed=1)
    for row in result.rows:
        print(row.metric, row.paper, row.ours)
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from escher.core.errors import ValidationError, did_you_mean
from escher.evaluation._core import Meter, Result, Row

#: Workload name -> (module, one-line description), in the paper's order.
WORKLOADS: dict[str, tuple[str, str]] = {
    "alphazero": (
        "escher.evaluation.workloads.alphazero",
        "AlphaZero self-play: co-location + load balancing vs locality-unaware",
    ),
    "wordcount": (
        "escher.evaluation.workloads.wordcount",
        "WordCount/MapReduce at 10/50/100 nodes: generic vs native vs data-locality",
    ),
    "gandiva": (
        "escher.evaluation.workloads.gandiva",
        "Gandiva-style GPU packing on a tuning workload (12 GPUs)",
    ),
    "gang": (
        "escher.evaluation.workloads.gang",
        "Gang scheduling latency: native vs gang ESL vs application-level",
    ),
    "gang-ray": (
        "escher.evaluation.workloads.gang_ray",
        "Gang latency on a real local Ray cluster (needs escher-sched[ray]): native vs ESL vs app",
    ),
    "fairshare": (
        "escher.evaluation.workloads.fairshare",
        "Hierarchical fair sharing: two organisations, users arriving over time",
    ),
    "overhead": (
        "escher.evaluation.workloads.overhead",
        "Scheduling overhead vs live ephemeral resources; 1 vs 100 requested",
    ),
    "simulator": (
        "escher.evaluation.workloads.simulator",
        "Simulator speed: 100 nodes x 100,000 tasks, events per second",
    ),
}


def check_name(name: str) -> None:
    """Raise `ValidationError` (with a suggestion) unless `name` is a workload."""
    if name not in WORKLOADS:
        raise ValidationError(
            f"no workload {name!r}; choose one of {sorted(WORKLOADS)}."
            f"{did_you_mean(name, WORKLOADS)}"
        )


def run(name: str, *, quick: bool = False, seed: int = 0) -> Result:
    """Run one workload and return its `Result` (no files written).

    Args:
        name: A key of `WORKLOADS`.
        quick: A smaller instance (seconds instead of minutes).
        seed: Seed of every random choice (durations, arrivals, jitter).

    Raises:
        ValidationError: unknown workload name.
    """
    check_name(name)
    module = importlib.import_module(WORKLOADS[name][0])
    result: Result = module.run(quick=quick, seed=seed)
    return result


def load(path: str | Path) -> Result:
    """Read a result written by `Result.write` (``<name>.json``), with its plot function.

    The JSON holds the plot's series, so ``load(path).figure()`` redraws the figure without
    running the workload again.

    Raises:
        ValidationError: the file names no known workload.
    """
    data = json.loads(Path(path).read_text())
    result = Result.from_dict(data)
    check_name(result.name)
    result.plot = getattr(importlib.import_module(WORKLOADS[result.name][0]), "plot", None)
    return result


__all__ = ["WORKLOADS", "Meter", "Result", "Row", "check_name", "load", "run"]
