"""A real control plane (etcd + kube-apiserver + kube-scheduler) for the Kubernetes backend.

Session-scoped: started once (about 5 s), with fake nodes in two pools and an `ExecKubelet`
that runs the pods' commands as local processes. Every test that uses it is marked ``k8s``
and is skipped, with the reason, when the binaries of scripts/provision-k8s.sh are missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.k8s_control_plane import ControlPlane, add_fake_node, binaries_available

REPO = Path(__file__).resolve().parents[3]
POOL_LABEL = "escher-test/pool"
#: Pools of fake nodes: name -> node ids (4 CPUs, 8 GiB each).
POOLS = {
    "conformance": ["k8s-a", "k8s-b", "k8s-c"],
    "extra": ["k8s-x1", "k8s-x2"],
}
IMAGE = "escher-test-runner:local"  # ignored by the exec kubelet

SKIP_REASON = (
    "Kubernetes control-plane binaries missing: run scripts/provision-k8s.sh "
    "(etcd + kube-apiserver/kube-scheduler v1.20.2 into ~/.cache/escher-k8s)"
)


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    here = Path(__file__).parent
    have = binaries_available()
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        have_client = False
    else:
        have_client = True
    for item in items:
        if Path(str(item.fspath)).parent != here:
            continue
        if "k8s_cluster" not in getattr(item, "fixturenames", ()):
            continue  # pure unit tests of the backend's pieces run everywhere
        item.add_marker(pytest.mark.k8s)
        if not have:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))
        elif not have_client:
            item.add_marker(pytest.mark.skip(reason="needs pip install 'escher-sched[k8s]'"))


@dataclass
class K8sCluster:
    """The running control plane and how to build backends on it."""

    cp: ControlPlane
    api: Any
    kubelet: Any
    made: list[Any] = field(default_factory=list)

    @property
    def kubeconfig(self) -> str:
        return str(self.cp.kubeconfig_path)

    def backend(self, pool: str = "conformance", **options: Any) -> Any:
        from escher.backends.kubernetes import KubernetesBackend

        opts: dict[str, Any] = {
            "kubeconfig": self.kubeconfig,
            "namespace": "default",
            "image": IMAGE,
            "node_selector": {POOL_LABEL: pool},
        }
        opts.update(options)
        return KubernetesBackend(**opts)


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[K8sCluster]:
    """Control plane + fake nodes + exec kubelet, shared by every k8s test."""
    if not binaries_available():
        pytest.skip(SKIP_REASON)
    pytest.importorskip("kubernetes", reason="needs pip install 'escher-sched[k8s]'")
    from tests.support.exec_kubelet import ExecKubelet

    with ControlPlane() as cp:
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
            yield K8sCluster(cp, api, kubelet)
        finally:
            kubelet.stop()
