"""Virtual-time benchmark outputs pinned byte for byte (golden files).

The simulated workloads are deterministic for a seed: the same code writes the same JSON.
A refactor must keep it so; a deliberate change of a model or a policy regenerates the
files (``python -m tests.evaluation.test_golden``) and says so in CHANGELOG.md.
Wall-clock fields (``wall_seconds``, ``events_per_second``) are left out: they measure the
machine, not the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from escher import evaluation

GOLDEN = Path(__file__).with_name("golden")

#: (workload, seed): quick instances that take well under a second each.
PINNED = [("wordcount", 0), ("wordcount", 1), ("gandiva", 0), ("gandiva", 1)]


def output(name: str, seed: int) -> str:
    """What ``escher bench NAME --quick --seed SEED --no-plot`` writes, minus wall time."""
    result: dict[str, Any] = evaluation.run(name, quick=True, seed=seed).to_dict()
    simulator = result["simulator"]
    del simulator["wall_seconds"], simulator["events_per_second"]
    return json.dumps(result, indent=2, sort_keys=True, default=str) + "\n"


def golden(name: str, seed: int) -> Path:
    return GOLDEN / f"{name}-quick-seed{seed}.json"


@pytest.mark.parametrize(("name", "seed"), PINNED)
def test_virtual_time_output_is_unchanged(name: str, seed: int) -> None:
    assert output(name, seed) == golden(name, seed).read_text()


def test_a_different_seed_gives_a_different_output() -> None:
    assert output("gandiva", 0) != output("gandiva", 1)  # the pin can fail


if __name__ == "__main__":  # regenerate after a deliberate change
    GOLDEN.mkdir(exist_ok=True)
    for name, seed in PINNED:
        golden(name, seed).write_text(output(name, seed))
