"""The backend conformance suite on the Kubernetes backend, against a real control plane."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from escher.backends.base import Backend
from escher.testing.conformance import BackendConformance


class TestKubernetesConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _cluster(self, k8s_cluster: Any) -> Iterator[None]:
        self.cluster = k8s_cluster
        self.spares: list[str] = []
        yield
        for node in self.spares:  # a failed node-loss test leaves its spare behind
            with contextlib.suppress(Exception):
                k8s_cluster.api.delete_node(node)

    def make_backend(self) -> Backend:
        # Nodes under running pods are checked often, so a lost node is noticed in the test.
        backend: Backend = self.cluster.backend("conformance", node_check_seconds=0.5)
        return backend

    def add_spare_node(self, backend: Backend) -> str | None:
        """A fake node of the pool (2 CPUs) that the exec kubelet serves."""
        node: str = self.cluster.add_node("conformance")
        self.spares.append(node)
        return node

    def kill_node(self, backend: Backend, node_id: str) -> None:
        """The Node object is deleted; the backend must notice by itself (no pod GC runs)."""
        self.cluster.kill_node(node_id)
