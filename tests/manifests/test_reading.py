"""Reading manifests and cluster listings: files, folders, YAML/JSON, Lists, requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from escher.manifests import (
    ManifestError,
    cluster_from_objects,
    load_cluster,
    load_manifests,
    workloads_from_objects,
)
from escher.manifests._requests import pod_requests
from tests.manifests.kube_objects import container, deployment, node, pod


def test_requests_sum_containers_max_init_plus_overhead() -> None:
    spec = {
        "containers": [container("500m", "1Gi"), container("1", "512Mi", **{"nvidia.com/gpu": 1})],
        "initContainers": [container("2", "1Gi"), container("100m", "3Gi")],
        "overhead": {"cpu": "250m"},
    }
    got = pod_requests(spec)
    assert got["cpu"] == pytest.approx(2.25)  # max(1.5, 2) + 0.25
    assert got["memory"] == 3 * 2**30  # max(1.5Gi, 3Gi)
    assert got["nvidia.com/gpu"] == 1


def test_limits_stand_in_for_missing_requests() -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"cpu": "2", "memory": "1G"}}}]}
    assert pod_requests(spec) == {"cpu": 2.0, "memory": 1e9}


def test_bad_quantity_names_field() -> None:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}
    with pytest.raises(ManifestError, match=r"containers\[0\]\.resources\.requests\.cpu"):
        pod_requests(spec)


def test_multi_document_yaml_lists_json_and_folders(tmp_path: Path) -> None:
    app = tmp_path / "app"
    (app / "sub").mkdir(parents=True)
    (app / "web.yaml").write_text(
        yaml.safe_dump_all(
            [
                deployment("web", 3),
                {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"}},
                None,
            ]
        )
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"parallelism": 4, "completions": 2, "template": {"spec": {"containers": []}}},
    }
    (app / "sub" / "list.json").write_text(json.dumps({"kind": "List", "items": [job]}))
    (app / "notes.txt").write_text("not a manifest")
    w = load_manifests([app])
    assert [x.key for x in w.items] == ["Job/ml/train", "Deployment/default/web"]
    assert w.items[0].replicas == 2  # parallelism capped by completions
    assert w.skipped and w.skipped[0].startswith("Service web")


def test_job_without_completions_runs_parallelism_pods() -> None:
    job = {
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"parallelism": 5, "template": {"spec": {"containers": []}}},
    }
    assert workloads_from_objects([job]).items[0].replicas == 5


def test_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: Pod\nmetadata: [oops\n")
    with pytest.raises(ManifestError, match=r"bad\.yaml: not valid YAML at line"):
        load_manifests([bad])
    with pytest.raises(ManifestError, match="no such file or folder"):
        load_manifests([tmp_path / "missing.yaml"])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ManifestError, match="no manifest files"):
        load_manifests([empty])


def test_duplicate_object_is_an_error() -> None:
    with pytest.raises(ManifestError, match="also defined"):
        workloads_from_objects([deployment("web"), deployment("web")])


def test_object_without_name() -> None:
    with pytest.raises(ManifestError, match=r"metadata\.name"):
        workloads_from_objects([{"kind": "Pod", "metadata": {}, "spec": {}}])


def test_cluster_free_capacity_counts_bound_unfinished_pods() -> None:
    objs = [
        node("n1", cpu="4", pods="3"),
        pod("p1", node_name="n1", cpu="1500m"),
        pod("p2", node_name="n1", cpu="1", phase="Succeeded"),
        pod("p3", cpu="1"),  # pending: not bound
    ]
    kube = cluster_from_objects(objs)
    state = kube.to_state()
    n1 = state.nodes["n1"]
    assert n1.total["CPU"] == 4
    assert n1.available["CPU"] == pytest.approx(2.5)
    assert n1.available["pods"] == 2
    assert kube.pending == 1
    assert [p.name for p in kube.pods] == ["p1"]


def test_load_cluster_kubectl_json_and_yaml(tmp_path: Path) -> None:
    listing = {"apiVersion": "v1", "kind": "List", "items": [node("n1"), pod("p", node_name="n1")]}
    as_json = tmp_path / "c.json"
    as_json.write_text(json.dumps(listing))
    as_yaml = tmp_path / "c.yaml"
    as_yaml.write_text(yaml.safe_dump(listing))
    for path in (as_json, as_yaml):
        kube = load_cluster(path)
        assert list(kube.nodes) == ["n1"] and len(kube.pods) == 1
    no_nodes = tmp_path / "none.json"
    no_nodes.write_text(json.dumps({"kind": "List", "items": []}))
    with pytest.raises(ManifestError, match="kubectl get nodes,pods"):
        load_cluster(no_nodes)


def test_node_list_items_without_kind(tmp_path: Path) -> None:
    """`kubectl get nodes -o json` alone writes a NodeList whose items carry their kind;
    API lists do not: both read."""
    raw = node("n1")
    del raw["kind"]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"kind": "NodeList", "items": [raw]}))
    assert list(load_cluster(path).nodes) == ["n1"]


def test_extended_and_gpu_names_map_to_escher_names() -> None:
    kube = cluster_from_objects([node("g", extra={"nvidia.com/gpu": "8", "escher.io/slot": "2"})])
    total = kube.to_state().nodes["g"].total
    assert total["GPU"] == 8 and total["slot"] == 2 and total["CPU"] == 4
