"""docs/tutorials/why-pending.md on the local Ray cluster, with the same ESL code as in memory."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

from tests.backends.ray.conftest import NAMESPACE
from tests.explain.tutorial import run_tutorial

pytestmark = pytest.mark.ray


def test_why_tutorial_runs_on_ray(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ESCHER_RAY_ADDRESS", ray_cluster.address)
    monkeypatch.setenv("ESCHER_RAY_NAMESPACE", NAMESPACE)
    run_tutorial("ray")
