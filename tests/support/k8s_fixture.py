"""The `k8s_cluster` fixture: one real control plane for every test that needs it.

A pytest plugin (registered in tests/conftest.py), so the backend's tests and the chaos
suite share one control plane per run: etcd + kube-apiserver + kube-scheduler, started once
(about 5 s), with fake nodes in two pools and an `ExecKubelet` that runs the pods' commands
as local processes. It skips, with the reason, when the binaries of scripts/provision-k8s.sh
or the Kubernetes client are missing.

The manifests of the deploy section of docs/kubernetes.md (Namespace, ServiceAccount, RBAC)
are applied as written. With ``ESCHER_K8S_AUTH=rbac`` the plane runs ``Node,RBAC``
authorization and escher (the backends the tests build, and their task pods) runs as that
ServiceAccount, in its namespace; by default it runs ``AlwaysAllow`` as the admin in
namespace ``default``. ``ESCHER_K8S_BIN`` picks other Kubernetes binaries.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.deploy_docs import ESCHER_ACCOUNT, ESCHER_NAMESPACE, deploy_manifests
from tests.support.k8s_control_plane import ControlPlane, add_fake_node, binaries_available

REPO = Path(__file__).resolve().parents[2]
POOL_LABEL = "escher-test/pool"
#: Pools of fake nodes: name -> node ids (4 CPUs, 8 GiB each).
POOLS = {
    "conformance": ["k8s-a", "k8s-b", "k8s-c"],
    "extra": ["k8s-x1", "k8s-x2"],
}
IMAGE = "escher-test-runner:local"  # ignored by the exec kubelet
#: Environment variable: "rbac" runs the plane with Node,RBAC and escher as its ServiceAccount.
AUTH_ENV = "ESCHER_K8S_AUTH"


def rbac_mode() -> bool:
    """True when the k8s tests run with RBAC, as escher's ServiceAccount."""
    return os.environ.get(AUTH_ENV, "").strip().lower() == "rbac"


SKIP_REASON = (
    "Kubernetes control-plane binaries missing: run scripts/provision-k8s.sh "
    "(etcd + kube-apiserver/kube-scheduler v1.20.2 into ~/.cache/escher-k8s)"
)


@dataclass
class K8sCluster:
    """The running control plane and how to build backends on it."""

    cp: ControlPlane
    api: Any
    kubelet: Any
    made: list[Any] = field(default_factory=list)
    #: Namespace of escher's pods.
    namespace: str = "default"
    #: The kubeconfig escher uses: the admin's, or (RBAC) its ServiceAccount's.
    escher_kubeconfig: str = ""

    @property
    def kubeconfig(self) -> str:
        return self.escher_kubeconfig or str(self.cp.kubeconfig_path)

    @property
    def rbac(self) -> bool:
        return self.cp.authorization == "RBAC"

    def backend(self, pool: str = "conformance", **options: Any) -> Any:
        from escher.backends.kubernetes import KubernetesBackend

        opts: dict[str, Any] = {
            "kubeconfig": self.kubeconfig,
            "namespace": self.namespace,
            "image": IMAGE,
            "node_selector": {POOL_LABEL: pool},
            "service_account": ESCHER_ACCOUNT,
        }
        opts.update(options)
        return KubernetesBackend(**opts)

    def add_node(self, pool: str, cpu: str = "2", prefix: str = "k8s-spare") -> str:
        """Add a fake node to `pool` (the exec kubelet serves it); return its name."""
        node = f"{prefix}-{uuid.uuid4().hex[:6]}"
        add_fake_node(self.api, node, {"cpu": cpu, "memory": "4Gi"}, labels={POOL_LABEL: pool})
        return node

    def kill_node(self, node: str, timeout: float = 60.0) -> None:
        """The node's machine is gone: its Node object is deleted (as a cloud provider does).

        Nothing else is done for escher: no pod garbage collector runs on this plane, so the
        backend must notice the loss itself. The node dies only once the commands of its
        pods really started (as on a real node that ran them).
        """
        pods = self.api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        names = {pod.metadata.name for pod in pods}
        deadline = time.monotonic() + timeout
        while not names <= set(self.kubelet.executed) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.api.delete_node(node)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    """Control plane + fake nodes + exec kubelet, shared by every k8s test."""
    if not binaries_available():
        pytest.skip(SKIP_REASON)
    pytest.importorskip("kubernetes", reason="needs pip install 'escher-sched[k8s]'")
    from tests.support.exec_kubelet import ExecKubelet

    rbac = rbac_mode()
    with ControlPlane(authorization="RBAC" if rbac else "AlwaysAllow", audit=rbac) as cp:
        cp.apply(deploy_manifests("namespace.yaml", "rbac.yaml"))
        namespace, escher_kubeconfig = "default", ""
        if rbac:
            namespace = ESCHER_NAMESPACE
            escher_kubeconfig = str(cp.service_account_kubeconfig(ESCHER_NAMESPACE, ESCHER_ACCOUNT))
        else:  # the same account name in "default" (no RBAC: it may do anything)
            cp.apply([{"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": ESCHER_ACCOUNT, "namespace": namespace}}])  # fmt: skip
        api = cp.core_v1()
        for pool, nodes in POOLS.items():
            for node in nodes:
                add_fake_node(api, node, {"cpu": "4", "memory": "8Gi"}, labels={POOL_LABEL: pool})
        kubelet = ExecKubelet(
            api, kubeconfig=str(cp.kubeconfig_path), cwd=str(REPO), poll_seconds=1.0
        )
        kubelet.start()
        os.environ.pop("NODE_NAME", None)
        try:
            yield K8sCluster(
                cp, api, kubelet, namespace=namespace, escher_kubeconfig=escher_kubeconfig
            )
        finally:
            kubelet.stop()
