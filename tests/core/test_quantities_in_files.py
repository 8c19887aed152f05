"""Quantities in plan, cluster and workload files: numbers, or Kubernetes quantities ("2Gi")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from escher.core.cluster import ClusterState
from escher.core.errors import PlanFormatError
from escher.core.plan import Plan
from escher.explain import Workload

GI = 2**30


def test_a_plan_takes_quantities_with_suffixes() -> None:
    data = {
        "resources": [{"label": "grp", "capacity": "2", "node_spec": {"node": "n1"}}],
        "tasks": [{"name": "t", "resources": {"CPU": "500m", "memory": "2Gi", "grp": 1}}],
    }
    plan = Plan.from_dict(data)
    assert dict(plan.tasks[0].resources) == {"CPU": 0.5, "memory": 2 * GI, "grp": 1}
    assert plan.resources[0].capacity == 2
    assert data["tasks"][0]["resources"]["memory"] == "2Gi"  # the caller's dict is untouched


def test_a_cluster_takes_quantities_with_suffixes() -> None:
    state = ClusterState.from_dict(
        {
            "nodes": [
                {
                    "id": "n1",
                    "total": {"cpu": "4", "memory": "16Gi"},
                    "available": {"cpu": "3500m", "memory": "15.5Gi"},
                }
            ]
        }
    )
    node = state.nodes["n1"]
    assert node.total["memory"] == 16 * GI and node.available["cpu"] == 3.5
    assert node.available["memory"] == 15.5 * GI


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"tasks": [{"name": "t", "resources": {"memory": "2Gx"}}]}, "tasks[0].resources.memory"),
        ({"tasks": [{"name": "t", "resources": {"memory": "-1Gi"}}]}, "tasks[0].resources.memory"),
        ({"tasks": [{"name": "t", "resources": {"CPU": 1}, "count": "2"}]}, "tasks[0].count"),
    ],
)
def test_what_is_not_a_quantity_is_named_with_its_place(
    data: dict[str, object], fragment: str
) -> None:
    with pytest.raises(PlanFormatError, match=rf"plan.json: {fragment.replace('[', '.')}"):
        Plan.from_dict(data, source="plan.json")


def test_a_workload_file_and_the_command_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from escher.cli import main

    workload = {
        "workload": 1,
        "plan": {"tasks": [{"name": "etl", "resources": {"CPU": 1, "memory": "2Gi"}, "count": 4}]},
        "tasks": {"etl": {"duration": 10}},
    }
    (tmp_path / "w.json").write_text(json.dumps(workload))
    loaded = Workload.load(tmp_path / "w.json")
    assert loaded.plan.tasks[0].resources["memory"] == 2 * GI
    cluster = {"nodes": [{"id": "n1", "total": {"CPU": 4, "memory": "8Gi"}}]}
    (tmp_path / "c.json").write_text(json.dumps(cluster))
    args = ["what-if", str(tmp_path / "w.json"), "--cluster", str(tmp_path / "c.json"), "-o"]
    result = CliRunner().invoke(main, [*args, "json"])
    assert result.exit_code == 0, result.output
    (report,) = json.loads(result.stdout)["reports"]
    assert report["mean_utilisation"]["memory"] == pytest.approx(1.0)
