"""docs/tutorials/why-pending.md on the local control plane, with the same ESL code as in memory."""

from __future__ import annotations

import json

import pytest

from tests.backends.kubernetes.conftest import IMAGE, POOL_LABEL, K8sCluster
from tests.explain.tutorial import run_tutorial


def test_why_tutorial_runs_on_kubernetes(
    k8s_cluster: K8sCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ESCHER_KUBERNETES_KUBECONFIG", k8s_cluster.kubeconfig)
    monkeypatch.setenv("ESCHER_KUBERNETES_NAMESPACE", "default")
    monkeypatch.setenv("ESCHER_KUBERNETES_IMAGE", IMAGE)
    monkeypatch.setenv("ESCHER_KUBERNETES_NODE_SELECTOR", json.dumps({POOL_LABEL: "conformance"}))
    run_tutorial("k8s")
