"""ESLs on the Ray backend, both modes: spreading and load balancing hold on real Ray tasks,
and the ESLs clean up their ephemeral resources."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ray")

import escher
from escher.esl import AntiAffinity, DataLocality, LoadBalance
from escher.testing.conformance import wait_until
from tests.support.spans import peak_per_node, span, where

pytestmark = pytest.mark.ray
WAIT = 60.0


@pytest.fixture
def backend(ray_backend: Any) -> Any:
    """The shared Ray backend fixture, in each mode (tests/support/ray_cluster.py)."""
    return ray_backend


def workers(backend: Any) -> list[str]:
    state = backend.get_cluster_state()
    return sorted(n for n, node in state.nodes.items() if node.total.get("CPU", 0) >= 2)


def escher_labels(backend: Any, prefix: str) -> set[str]:
    return {
        label
        for n in backend.get_cluster_state().nodes.values()
        for label in n.ephemeral
        if label.startswith(prefix)
    }


def test_anti_affinity_one_task_per_node_at_a_time(backend: Any) -> None:
    nodes = workers(backend)
    with AntiAffinity(nodes=nodes, name="aa-ray") as aa:
        refs = [aa.launch(span, 0.4) for _ in range(6)]
        spans = escher.get(refs, timeout=WAIT)
    assert {s[2] for s in spans} <= set(nodes)
    assert peak_per_node(spans) == 1
    assert wait_until(lambda: not escher_labels(backend, "aa-ray"), timeout=10)


def test_static_load_balance_caps_tasks_per_node(backend: Any) -> None:
    nodes = workers(backend)
    with LoadBalance(tasks=8, nodes=nodes, name="lb-ray") as lb:
        assert lb.per_node == 2
        refs = [lb.launch(span, 0.3) for _ in range(8)]
        spans = escher.get(refs, timeout=WAIT)
    assert peak_per_node(spans) <= 2


def test_data_locality_follows_the_data(backend: Any) -> None:
    a, b = workers(backend)[:2]
    with DataLocality(name="loc-ray") as loc:
        loc.add("shard", [b])
        assert escher.get(loc.near("shard").launch(where), timeout=WAIT) == b
        loc.refresh("shard", [a])
        assert escher.get(loc.near("shard").launch(where), timeout=WAIT) == a
