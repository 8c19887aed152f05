"""The backend conformance suite on a local multi-node Ray cluster, in both modes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from escher.backends.base import Backend
from escher.testing.conformance import BackendConformance
from tests.backends.ray.conftest import make_backend

pytestmark = pytest.mark.ray


class _OnCluster(BackendConformance):
    backend_name = "ray"
    mode = "auto"

    @pytest.fixture(autouse=True)
    def _cluster(self, ray_cluster: Any) -> None:
        self._ray_cluster = ray_cluster

    def make_backend(self) -> Backend:
        return make_backend(self._ray_cluster, mode=self.mode)


class TestRayResizeConformance(_OnCluster):
    mode = "resize"


class TestRayLedgerConformance(_OnCluster):
    mode = "ledger"
