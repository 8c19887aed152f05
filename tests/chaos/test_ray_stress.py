"""The random-operations stress workload (escher.testing.stress) on a real Ray cluster, in
both modes, at a size that fits CI, with node churn (spare workers added and killed)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")
stress = pytest.importorskip("escher.testing.stress")

import escher  # noqa: E402
from escher.backends.base import Backend  # noqa: E402
from escher.testing.conformance import wait_until  # noqa: E402
from tests.support.ray_cluster import OBJECT_STORE, make_backend, wait_until_gone  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.chaos]


class RayChurn(stress.NodeChurn):
    """Spare Ray workers: started with `Cluster.add_node`, killed with `remove_node`."""

    def __init__(self, cluster: Any) -> None:
        self._cluster = cluster
        self._handles: dict[str, Any] = {}
        self._killed: list[str] = []

    def add(self, backend: Backend, name: str) -> str | None:
        before = set(backend.get_cluster_state().nodes)
        handle = self._cluster.add_node(num_cpus=2, object_store_memory=OBJECT_STORE)
        if not wait_until(lambda: set(backend.get_cluster_state().nodes) - before, timeout=60):
            self._cluster.remove_node(handle, allow_graceful=False)
            return None
        (node,) = set(backend.get_cluster_state().nodes) - before
        self._handles[node] = handle
        return str(node)

    def kill(self, backend: Backend, node_id: str) -> None:
        self._cluster.remove_node(self._handles.pop(node_id), allow_graceful=False)
        self._killed.append(node_id)

    def cleanup(self) -> None:
        """Kill the spares left, and wait (bounded) until Ray no longer lists them, so the
        next run does not take a dying node for one of its own."""
        for handle in self._handles.values():
            self._cluster.remove_node(handle, allow_graceful=False)
        for node in [*self._handles, *self._killed]:
            wait_until_gone(node)
        self._handles.clear()


@pytest.mark.parametrize("mode", ["resize", "ledger"])
def test_stress_with_node_churn(ray_cluster: Any, mode: str) -> None:
    backend = make_backend(ray_cluster, mode=mode)
    escher.init(backend)
    churn = RayChurn(ray_cluster)
    try:
        config = stress.StressConfig(
            threads=4,
            operations=40,
            seed=11,
            drain_timeout=180.0,
            max_hold=0.05,
            spare_nodes=1,
        )
        report = stress.run_stress(backend, config, churn=churn)
        print(report.summary())
        report.assert_ok()
    finally:
        churn.cleanup()
        escher.shutdown()
