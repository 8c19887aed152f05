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
