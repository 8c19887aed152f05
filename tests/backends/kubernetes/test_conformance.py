"""The backend conformance suite on the Kubernetes backend, against a real control plane."""

from __future__ import annotations

from typing import Any

import pytest

from escher.backends.base import Backend
from escher.testing.conformance import BackendConformance


class TestKubernetesConformance(BackendConformance):
    @pytest.fixture(autouse=True)
    def _cluster(self, k8s_cluster: Any) -> None:
        self.cluster = k8s_cluster

    def make_backend(self) -> Backend:
        return self.cluster.backend("conformance")  # type: ignore[no-any-return]
