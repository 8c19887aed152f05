"""Repairs of Kubernetes manifests that do not fit: every kind, in the manifests' terms, each
proven on the changed plan, and what a repair names holds on the objects (applied by hand to
the manifests and the cluster, the check is feasible)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from escher.cli import main
from escher.manifests import (
    check_manifests,
    cluster_from_objects,
    manifest_repairs,
    workloads_from_objects,
)
from escher.verify import Verdict
from tests.manifests.kube_objects import HOST, anti, deployment, node

TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


def cluster_objects() -> list[dict[str, Any]]:
    """Four 4-CPU nodes: a1, c1 usable, b1 tainted, c2 cordoned."""
    return [
        node("a1", "a", labels={"pool": "cpu"}),
        node("b1", "b", labels={"pool": "gpu"}, taints=[TAINT]),
        node("c1", "c", labels={"pool": "cpu"}),
        node("c2", "c", labels={"pool": "cpu"}, unschedulable=True),
    ]


def web(replicas: int = 4, **spec: Any) -> dict[str, Any]:
    """A Deployment of 3-CPU pods, one per node."""
    return deployment("web", replicas, cpu="3", affinity=anti("web", HOST), **spec)


def repairs_of(objects: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> list[Any]:
    cluster = cluster_from_objects(objects)
    loaded = workloads_from_objects(workloads)
    result = check_manifests(loaded, cluster)
    assert result.status is Verdict.INFEASIBLE
    return list(manifest_repairs(loaded, cluster, result, timeout=20).repairs)


def fits(objects: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> bool:
    result = check_manifests(workloads_from_objects(workloads), cluster_from_objects(objects))
    return result.status is Verdict.FEASIBLE


def test_a_node_returned_uncordons_and_tolerates() -> None:
    found = repairs_of(cluster_objects(), [web()])
    returned = [r for r in found if any(c.after == "uncordoned" for c in r.changes)]
    assert returned, [r.render() for r in found]
    changes = returned[0].changes
    assert {c.kind for c in changes} == {"node"}
    assert any(c.target == "c2" and c.before == "cordoned (spec.unschedulable)" for c in changes)
    assert any("taint gpu=true:NoSchedule on b1" in str(c.target) for c in changes)
    assert returned[0].witness is not None
    # What it names, done on the objects themselves, fits.
    objects = cluster_objects()
    objects[3]["spec"].pop("unschedulable")
    tolerant = web(tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert fits(objects, [tolerant])


def test_more_nodes_pass_the_label_filters_of_the_workload() -> None:
    """Nodes added like a labelled node are usable by a nodeSelector that admits it (the
    plan lists allowed nodes by name: an added node is listed where its twin is)."""
    workload = web(3, nodeSelector={"pool": "cpu"})
    found = repairs_of(cluster_objects(), [workload])
    nodes = [r for r in found if r.kind == "nodes"]
    assert nodes, [r.render() for r in found]
    assert "pool=cpu" in str(nodes[0].changes[0].target)
    added = nodes[0].changes[0].after - nodes[0].changes[0].before
    objects = cluster_objects() + [
        node(f"new-{k}", "a", labels={"pool": "cpu"}) for k in range(added)
    ]
    assert fits(objects, [workload])


def test_escher_verify_f_repairs_json(tmp_path: Path) -> None:
    (tmp_path / "cluster.json").write_text(
        json.dumps({"apiVersion": "v1", "kind": "List", "items": cluster_objects()})
    )
    (tmp_path / "web.json").write_text(json.dumps(web()))
    runner = CliRunner()
    args = ["verify", "-f", str(tmp_path / "web.json"), "--cluster", str(tmp_path / "cluster.json")]
    result = runner.invoke(main, [*args, "--repairs", "--format", "json"])
    assert result.exit_code == 1, result.output
    data = json.loads(result.stdout)
    kinds = {c["kind"] for r in data["repairs"] for c in r["changes"]}
    assert {"replicas", "nodes", "node"} <= kinds
    for repair in data["repairs"]:
        assert set(repair) >= {"changes", "witness"}
        assert all(set(c) >= {"kind", "target", "from", "to"} for c in repair["changes"])
    text = runner.invoke(main, [*args, "--repairs"])
    assert "uncordoned" in text.stdout and "Deployment/default/web: 4 -> " in text.stdout
    bad = runner.invoke(main, [*args, "--repairs", "--adjustable", "Deployment/default/nope"])
    assert bad.exit_code == 3 and "no workload named" in bad.stderr
