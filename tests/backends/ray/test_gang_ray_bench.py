"""The real-Ray gang workload (`escher bench gang-ray`) on the session's cluster: all three
paths place a whole gang, and the table compares them with the paper."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("ray")

import escher
from escher.evaluation.workloads import gang_ray
from tests.backends.ray.conftest import make_backend

pytestmark = pytest.mark.ray


@pytest.fixture
def backend(ray_cluster: Any) -> Iterator[Any]:
    instance = make_backend(ray_cluster)
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()


def test_every_path_places_the_whole_gang(backend: Any) -> None:
    latencies = gang_ray.measure(backend, trials=1, pause=0.2)
    assert set(latencies) == set(gang_ray.VARIANTS)
    assert all(len(v) == 1 and 0 < v[0] < gang_ray.WAIT for v in latencies.values())
    result = gang_ray.summarise(latencies)
    metrics = {row.metric: row for row in result.rows}
    assert metrics["median latency ms: native"].paper == 381.0
    assert metrics["esl / native"].ours > 0
    # The app path released every label it created.
    state = backend.get_cluster_state()
    assert not [label for n in state.nodes.values() for label in n.ephemeral if "bench-" in label]
