"""The backend conformance suite on a local multi-node Ray cluster, in both modes, with the
node-loss hooks (a spare node added with `Cluster.add_node`, killed with `remove_node`)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from escher.backends.base import Backend
from escher.testing.conformance import BackendConformance, wait_until
from tests.support.ray_cluster import OBJECT_STORE, make_backend, wait_until_gone

pytestmark = pytest.mark.ray


class _OnCluster(BackendConformance):
    backend_name = "ray"
    mode = "auto"

    @pytest.fixture(autouse=True)
    def _cluster(self, ray_cluster: Any) -> None:
        self._ray_cluster = ray_cluster
        self._spares: dict[str, Any] = {}

    def make_backend(self) -> Backend:
        return make_backend(self._ray_cluster, mode=self.mode)

    def add_spare_node(self, backend: Backend) -> str | None:
        before = set(backend.get_cluster_state().nodes)
        handle = self._ray_cluster.add_node(num_cpus=2, object_store_memory=OBJECT_STORE)
        assert wait_until(lambda: set(backend.get_cluster_state().nodes) - before, timeout=60)
        (node,) = set(backend.get_cluster_state().nodes) - before
        self._spares[node] = handle
        return str(node)

    def kill_node(self, backend: Backend, node_id: str) -> None:
        handle = self._spares.pop(node_id)
        self._ray_cluster.remove_node(handle, allow_graceful=False)
        self._killed.append(node_id)

    @pytest.fixture(autouse=True)
    def _forget_killed(self) -> Any:
        """After a node-loss test, wait until Ray no longer lists the killed node (so the
        next test starts on a settled cluster)."""
        self._killed: list[str] = []
        yield
        for node in self._killed:
            wait_until_gone(node)


class TestRayResizeConformance(_OnCluster):
    mode = "resize"


class TestRayLedgerConformance(_OnCluster):
    mode = "ledger"
