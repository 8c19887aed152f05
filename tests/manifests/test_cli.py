"""`escher verify -f MANIFESTS --cluster LISTING`: output, exit codes, JSON, placement files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from escher.cli import main
from escher.manifests import (
    APPLY_ORDER,
    cluster_from_objects,
    emit_placement,
    load_manifests,
    workloads_from_objects,
)
from escher.manifests._emit import PART_LABEL
from escher.manifests._match import node_affinity_matches
from tests.manifests.kube_objects import anti, container, deployment, node, zones


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "app").mkdir()
    web = deployment("web", 3, affinity=anti("web"))
    web["spec"]["template"]["spec"]["affinity"].update(
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "disk", "operator": "DoesNotExist"}]}
                    ]
                }
            }
        }
    )
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}}
    (tmp_path / "app" / "web.yaml").write_text(yaml.safe_dump_all([web, svc]))
    listing = {"apiVersion": "v1", "kind": "List", "items": zones(3, per_zone=2)}
    (tmp_path / "cluster.json").write_text(json.dumps(listing))
    return tmp_path


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["verify", *args])
    return result.exit_code, result.output


def test_feasible_text_and_placement(files: Path) -> None:
    out_dir = files / "pinned"
    code, out = run(
        "-f", str(files / "app"), "--cluster", str(files / "cluster.json"),
        "--emit-placement", str(out_dir),
    )  # fmt: skip
    assert code == 0, out
    assert "FEASIBLE" in out and "Deployment/default/web" in out
    assert "not checked (kind not supported): Service web" in out
    order = (out_dir / APPLY_ORDER).read_text().split()
    assert order == [f"{i:03d}-deployment-default-web-{i}.yaml" for i in range(3)]
    # one part per witness node: the user's term is kept, the pin ANDed into it
    cluster = cluster_from_objects(zones(3, per_zone=2))
    pinned_to = []
    for name in order:
        part = load_manifests([out_dir / name]).items[0]
        assert part.replicas == 1 and part.labels["app"] == "web"
        terms = part.pod_spec["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["key"] == "disk"
        (allowed,) = [
            n for n, kn in cluster.nodes.items() if node_affinity_matches(terms, kn.labels, n, "t")
        ]
        pinned_to.append(allowed)
    assert len({n[0] for n in pinned_to}) == 3  # one per zone, as the witness


def test_infeasible_json(files: Path) -> None:
    doc = yaml.safe_load_all((files / "app" / "web.yaml").read_text())
    web = next(iter(doc))
    web["spec"]["replicas"] = 4
    (files / "app" / "web.yaml").write_text(yaml.safe_dump(web))
    code, out = run(
        "-f", str(files / "app"), "--cluster", str(files / "cluster.json"), "--format", "json"
    )
    assert code == 1
    data = json.loads(out)
    assert data["status"] == "infeasible" and data["exit_code"] == 1
    assert "4 pods, at most 1 per topology.kubernetes.io/zone" in data["cause"]
    assert data["breakdown"][0].startswith("Deployment default/web: 6/6 nodes")
    assert any("podAntiAffinity" in s["source"] for s in data["explanation"]["statements"])


def test_exclusions_in_json(tmp_path: Path) -> None:
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(deployment("w", 2, cpu="3")))
    cordoned = [node("a"), node("b", unschedulable=True)]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"kind": "List", "items": cordoned}))
    code, out = run("-f", str(tmp_path / "w.yaml"), "--cluster", str(tmp_path / "c.yaml"),
                    "--format", "json")  # fmt: skip
    assert code == 1
    (exclusion,) = json.loads(out)["exclusions"].values()
    assert exclusion["cause"] == "cordon" and exclusion["excluded"] == ["b"]


def test_unknown_under_a_stricter_rule_text_and_json(tmp_path: Path) -> None:
    # kube-scheduler lets the node without a zone take any number of w's pods
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(deployment("w", 4, affinity=anti("w"))))
    nodes = [node("a", "a"), node("b", "b"), node("edge", None)]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"kind": "List", "items": nodes}))
    args = ("-f", str(tmp_path / "w.yaml"), "--cluster", str(tmp_path / "c.yaml"))
    code, out = run(*args)
    assert code == 2
    assert "infeasible under the stricter rule" in out and "approximation: stricter:" in out
    code, out = run(*args, "--format", "json")
    data = json.loads(out)
    assert code == 2 and data["status"] == "unknown" and data["exact"] is False
    assert data["approximations"][0].startswith("stricter: nodes without label")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give a PLAN_FILE, --app APP, or Kubernetes manifests with -f PATH"),
        (["-f", "app"], "with -f, give the cluster"),
        (["plan.json", "-f", "app", "--cluster", "cluster.json"], "not both"),
        (["-f", "app", "--cluster", "cluster.json", "--backend", "memory"], "not both"),
        (["plan.json", "--emit-placement", "out"], "go with -f MANIFESTS"),
        (["-f", "missing", "--cluster", "cluster.json"], "no such file or folder"),
        (["-f", "app", "--cluster", "app/web.yaml"], "has no Node objects"),
    ],
)
def test_bad_input_exits_3_with_a_clear_message(
    files: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(files)
    code, out = run(*args)
    assert code == 3, out
    assert message in out
    assert "Traceback" not in out


def test_emitted_parts_of_a_job_and_a_single_node_workload(tmp_path: Path) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "parallelism": 3,
            "completions": 5,
            "template": {"spec": {"containers": [container("3")]}},
        },
    }
    small = deployment("small", 2, cpu="100m")
    workloads = workloads_from_objects([job, small])
    witness = {"Job/default/train": ["a", "b", "b"], "Deployment/default/small": ["c", "c"]}
    files = emit_placement(workloads, witness, tmp_path)
    parts = [yaml.safe_load(f.read_text()) for f in files]
    assert [p["metadata"]["name"] for p in parts] == ["small", "train-0", "train-1"]
    assert parts[0]["spec"]["replicas"] == 2
    assert [(p["spec"]["parallelism"], p["spec"]["completions"]) for p in parts[1:]] == [
        (1, 3),
        (2, 2),
    ]
    labels = [p["spec"]["template"]["metadata"]["labels"][PART_LABEL] for p in parts[1:]]
    assert labels == ["0", "1"]
