"""`read_cluster` as a least-privileged account: list calls only, and what a refusal says.

A control plane of its own with ``Node,RBAC`` authorization and an audit log of service
accounts' requests: account ``reader`` may list nodes and pods (not namespaces), account
``blind`` may do nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from escher.core.errors import BackendUnavailableError
from escher.manifests import read_cluster
from tests.support.k8s_control_plane import ControlPlane, add_fake_node, binaries_available
from tests.support.k8s_fixture import SKIP_REASON

pytestmark = pytest.mark.k8s

READER = "system:serviceaccount:default:reader"


def _rbac_objects() -> list[dict[str, Any]]:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "escher-preflight-reader"},
        "rules": [{"apiGroups": [""], "resources": ["nodes", "pods"], "verbs": ["list"]}],
    }
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "escher-preflight-reader"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                           "name": "escher-preflight-reader"},
               "subjects": [{"kind": "ServiceAccount", "name": "reader",
                             "namespace": "default"}]}  # fmt: skip
    accounts = [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": name, "namespace": "default"}}
        for name in ("reader", "blind")
    ]  # fmt: skip
    return [*accounts, role, binding]


@pytest.fixture(scope="module")
def plane() -> Iterator[ControlPlane]:
    if not binaries_available():
        pytest.skip(SKIP_REASON)
    pytest.importorskip("kubernetes", reason="needs pip install 'escher-sched[k8s]'")
    with ControlPlane(authorization="RBAC", audit=True, scheduler=False) as cp:
        cp.apply(_rbac_objects())
        api = cp.core_v1()
        add_fake_node(api, "rbac-n0", {"cpu": "4", "memory": "8Gi"})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
               "spec": {"nodeName": "rbac-n0", "automountServiceAccountToken": False,
                        "containers": [{"name": "c", "image": "x",
                                        "resources": {"requests": {"cpu": "1"}}}]}}  # fmt: skip
        api.create_namespaced_pod("default", pod)
        yield cp


def test_an_account_that_may_list_nodes_and_pods_reads_with_list_calls_only(
    plane: ControlPlane,
) -> None:
    cluster = read_cluster(str(plane.service_account_kubeconfig("default", "reader")))
    assert list(cluster.nodes) == ["rbac-n0"]
    assert [(p.name, p.node, p.requests["cpu"]) for p in cluster.pods] == [("p", "rbac-n0", 1)]
    assert cluster.namespaces == {}  # it may not list namespaces: read without them
    calls = {
        (e["verb"], e["objectRef"]["resource"], e["responseStatus"]["code"])
        for e in plane.audit_events()
        if e["user"]["username"] == READER and e.get("stage") == "ResponseComplete"
    }
    assert calls == {("list", "nodes", 200), ("list", "pods", 200), ("list", "namespaces", 403)}


def test_an_account_that_may_not_list_nodes_is_told_what_it_needs(plane: ControlPlane) -> None:
    kubeconfig = str(plane.service_account_kubeconfig("default", "blind"))
    with pytest.raises(
        BackendUnavailableError, match=r"refused to list nodes \(403 Forbidden\).*list nodes and"
    ):
        read_cluster(kubeconfig)
