"""The random-operations stress workload on the in-memory backend, at full size."""

from __future__ import annotations

import pytest

from escher.backends.memory import MemoryBackend
from escher.testing.stress import StressConfig, run_stress

pytestmark = pytest.mark.chaos


@pytest.mark.timeout(1200)
def test_memory_stress_16_threads_x_10000_operations() -> None:
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 4} for i in range(4)})
    try:
        report = run_stress(
            backend, StressConfig(threads=16, operations=10_000, seed=16, time_limit=900)
        )
    finally:
        backend.close()
    print(report.summary())
    report.assert_ok()
    assert report.operations > 0 and report.tasks > 0 and report.nodes_killed > 0


@pytest.mark.timeout(900)
def test_node_loss_under_load() -> None:
    """Nodes leave while tasks run on them (some with retries, some gangs): every task ends,
    retried elsewhere or failed with NodeDiedError; nothing over-committed or run more often
    than it was started; what the late first runs held is not given back twice."""
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 2} for i in range(3)})
    weights = {"launch": 40.0, "get": 10.0, "state": 5.0, "gang": 5.0, "node_loss": 6.0}
    try:
        report = run_stress(
            backend,
            StressConfig(
                threads=8,
                operations=1500,
                seed=3,
                weights=weights,
                max_hold=0.02,
                spare_nodes=4,
                time_limit=600,
            ),
        )
    finally:
        backend.close()
    print(report.summary())
    report.assert_ok()
    assert report.nodes_killed >= 20 and report.final.get("failed", 0) > 0
    assert report.final.get("finished", 0) > report.tasks / 2
