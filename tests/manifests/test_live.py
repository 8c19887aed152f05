"""`read_cluster`: nodes and pods read from a live API server (the project's control plane)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escher.core.errors import BackendUnavailableError, EscherError
from escher.manifests import read_cluster
from tests.support.k8s_control_plane import FAKE_NODE_LABEL, add_fake_node

ZONE = "topology.kubernetes.io/zone"

#: Tests of the reader's own answers need the client (the k8s extra); without it every call
#: says what to install (tested below).
needs_client = pytest.mark.skipif(
    importlib.util.find_spec("kubernetes") is None, reason="needs pip install 'escher-sched[k8s]'"
)


def _kubeconfig(tmp_path: Path, server: str, contexts: tuple[str, ...] = ("one",)) -> str:
    """A kubeconfig whose contexts all point at `server` (token auth, no CA check)."""
    lines = [
        "apiVersion: v1",
        "kind: Config",
        f"current-context: {contexts[0]}",
        "clusters:",
        f"- name: c\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true",
        "users:",
        "- name: u\n  user:\n    token: nothing",
        "contexts:",
        *(f"- name: {c}\n  context:\n    cluster: c\n    user: u" for c in contexts),
    ]
    path = tmp_path / "kubeconfig"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@needs_client
def test_a_missing_kubeconfig_says_what_to_pass(tmp_path: Path) -> None:
    with pytest.raises(BackendUnavailableError, match=r"kubeconfig .*nowhere.*--kubeconfig PATH"):
        read_cluster(str(tmp_path / "nowhere"))


@needs_client
def test_an_unknown_context_lists_the_contexts(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path, "https://127.0.0.1:1", ("prod", "staging"))
    with pytest.raises(BackendUnavailableError, match=r"'dev'.*Its contexts: prod, staging"):
        read_cluster(kubeconfig, context="dev")


@needs_client
def test_an_unreachable_server_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    kubeconfig = _kubeconfig(tmp_path, f"https://127.0.0.1:{_closed_port()}")
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailableError, match=r"cannot reach the API server at https://"):
        read_cluster(kubeconfig, request_timeout=5)
    assert time.monotonic() - t0 < 30


def test_without_the_client_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes -> ImportError
    with pytest.raises(EscherError, match=r"pip install 'escher-sched\[k8s\]'"):
        read_cluster(_kubeconfig(tmp_path, "https://127.0.0.1:1"))


@pytest.fixture
def zoned(k8s_cluster: Any) -> Iterator[dict[str, Any]]:
    """Three nodes of their own (one tainted, one cordoned) and pods on them."""
    api = k8s_cluster.api
    tag = uuid.uuid4().hex[:6]
    nodes = [f"live-{tag}-{i}" for i in range(3)]
    add_fake_node(api, nodes[0], {"cpu": "4", "memory": "8Gi"}, labels={ZONE: "a"})
    add_fake_node(
        api,
        nodes[1],
        {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"},
        labels={ZONE: "b"},
        taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}],
    )
    add_fake_node(api, nodes[2], {"cpu": "2", "memory": "4Gi"}, labels={ZONE: "b"})
    api.patch_node(nodes[2], {"spec": {"unschedulable": True}})
    for node in nodes:  # not the fixture's exec kubelet's: it would run (and finish) the pods
        api.patch_node(node, {"metadata": {"labels": {FAKE_NODE_LABEL: None}}})
    namespace = k8s_cluster.namespace
    pods = [f"live-{tag}-p{i}" for i in range(5)]
    for i, name in enumerate(pods):
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": f"live-{tag}"}},
            "spec": {
                "nodeName": nodes[i % 2],
                "containers": [
                    {"name": "c", "image": "x",
                     "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}
                ],
            },
        }  # fmt: skip
        api.create_namespaced_pod(namespace, body)
    try:
        yield {"nodes": nodes, "pods": pods, "namespace": namespace}
    finally:
        for name in pods:
            api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        for node in nodes:
            api.delete_node(node)


@pytest.mark.k8s
def test_read_cluster_reads_nodes_and_the_pods_on_them(
    k8s_cluster: Any, zoned: dict[str, Any]
) -> None:
    kubeconfig = str(k8s_cluster.cp.kubeconfig_path)
    whole = read_cluster(kubeconfig)
    a, gpu, cordoned = (whole.nodes[n] for n in zoned["nodes"])
    assert a.labels[ZONE] == "a" and a.allocatable["cpu"] == 4
    assert gpu.allocatable["nvidia.com/gpu"] == 2
    assert [t["key"] for t in gpu.taints] == ["dedicated"]
    assert cordoned.unschedulable and not a.unschedulable
    ours = [p for p in whole.pods if p.name in zoned["pods"]]
    assert sorted(p.node for p in ours) == sorted([a.name] * 3 + [gpu.name] * 2)
    assert all(p.namespace == zoned["namespace"] and p.requests["cpu"] == 0.5 for p in ours)
    assert whole.used()[a.name]["cpu"] == pytest.approx(1.5)
    assert zoned["namespace"] in whole.namespaces


@pytest.mark.k8s
def test_small_pages_read_the_same_cluster(k8s_cluster: Any, zoned: dict[str, Any]) -> None:
    kubeconfig = str(k8s_cluster.cp.kubeconfig_path)
    paged = read_cluster(k8s_cluster.cp.kubeconfig_path, page_size=2)  # a Path works too
    assert len(paged.nodes) > 2 and len(paged.pods) > 2
    assert paged == read_cluster(kubeconfig)


@pytest.mark.k8s
def test_finished_pods_are_not_read(k8s_cluster: Any, zoned: dict[str, Any]) -> None:
    api, namespace = k8s_cluster.api, zoned["namespace"]
    done = zoned["pods"][0]
    api.patch_namespaced_pod_status(done, namespace, {"status": {"phase": "Succeeded"}})
    cluster = read_cluster(str(k8s_cluster.cp.kubeconfig_path))
    names = {p.name for p in cluster.pods}
    assert done not in names and set(zoned["pods"][1:]) <= names


def _escher(*args: str, kubeconfig: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig} if kubeconfig else None
    return subprocess.run(
        [sys.executable, "-m", "escher.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def _gpu_deployment(tmp_path: Path, replicas: int) -> str:
    """A Deployment whose pods each need a GPU and tolerate the GPU node's taint."""
    spec = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    doc = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "t"}},
                                                    "spec": spec}},
    }  # fmt: skip
    path = tmp_path / f"train-{replicas}.json"
    path.write_text(json.dumps(doc))
    return str(path)


@pytest.mark.k8s
def test_escher_verify_reads_the_cluster_with_kubeconfig(
    k8s_cluster: Any, zoned: dict[str, Any], tmp_path: Path
) -> None:
    kubeconfig = str(k8s_cluster.cp.kubeconfig_path)
    gpu_node = zoned["nodes"][1]
    fits = _escher("verify", "-f", _gpu_deployment(tmp_path, 2), "--kubeconfig", kubeconfig,
                   "--format", "json")  # fmt: skip
    assert fits.returncode == 0, fits.stdout + fits.stderr
    assert json.loads(fits.stdout)["witness"] == {"Deployment/ml/train": [gpu_node, gpu_node]}
    too_many = _escher("verify", "-f", _gpu_deployment(tmp_path, 3), "--kubeconfig", kubeconfig)
    assert too_many.returncode == 1, too_many.stdout + too_many.stderr
    assert "GPU" in too_many.stdout
    # --kubeconfig without a path: $KUBECONFIG, as kubectl reads it
    default = _escher("verify", "-f", _gpu_deployment(tmp_path, 2), "--kubeconfig",
                      kubeconfig=kubeconfig)  # fmt: skip
    assert default.returncode == 0, default.stdout + default.stderr


@needs_client
def test_escher_verify_with_a_bad_kubeconfig_says_so_without_a_traceback(tmp_path: Path) -> None:
    out = _escher("verify", "-f", _gpu_deployment(tmp_path, 1), "--kubeconfig",
                  str(tmp_path / "missing"))  # fmt: skip
    assert out.returncode not in (0, 1, 2), out
    assert "--kubeconfig PATH" in out.stderr + out.stdout
    assert "Traceback" not in out.stderr + out.stdout
