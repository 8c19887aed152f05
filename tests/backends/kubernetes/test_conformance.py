"""The backend conformance suite on the Kubernetes backend, against a real control plane."""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

from escher.backends.base import Backend
from escher.testing.conformance import WAIT, BackendConformance, wait_until
from tests.backends.kubernetes.conftest import POOL_LABEL
from tests.support.k8s_control_plane import add_fake_node


class TestKubernetesConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _cluster(self, k8s_cluster: Any) -> Any:
        self.cluster = k8s_cluster
        self.spares: list[str] = []
        yield
        for node in self.spares:  # a failed node-loss test leaves its spare behind
            with contextlib.suppress(Exception):
                k8s_cluster.api.delete_node(node)

    def make_backend(self) -> Backend:
        # Check the nodes under running pods often, so a lost node is noticed in the test.
        return self.cluster.backend("conformance", node_check_seconds=0.5)  # type: ignore[no-any-return]

    def add_spare_node(self, backend: Backend) -> str | None:
        """A fake node of the pool (2 CPUs) that the exec kubelet serves."""
        node = f"k8s-spare-{uuid.uuid4().hex[:6]}"
        add_fake_node(
            self.cluster.api,
            node,
            {"cpu": "2", "memory": "4Gi"},
            labels={POOL_LABEL: "conformance"},
        )
        self.spares.append(node)
        return node

    def kill_node(self, backend: Backend, node_id: str) -> None:
        """The node's machine is gone: its Node object is deleted (as a cloud provider does).

        Nothing else is done for the backend: no pod garbage collector runs on the test
        plane, so the backend must notice the loss itself. The node dies only once the
        commands of its pods really started (as on a real node that ran them).
        """
        api, kubelet = self.cluster.api, self.cluster.kubelet
        pods = api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node_id}").items
        names = {pod.metadata.name for pod in pods}
        assert wait_until(lambda: names <= set(kubelet.executed), timeout=WAIT)
        api.delete_node(node_id)
