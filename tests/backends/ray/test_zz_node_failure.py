"""A node leaves the cluster: its ephemeral resources vanish, retried tasks finish elsewhere,
tasks without retries fail with NodeDiedError, and nothing waits without a timeout.

Runs last in the session (file name): it adds extra nodes to the shared cluster and
removes them again, leaving the original nodes untouched.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import escher  # noqa: E402
from escher.core.errors import NodeDiedError, UnknownNodeError  # noqa: E402
from escher.core.resources import Resources  # noqa: E402
from escher.core.task import TaskSpec  # noqa: E402
from escher.testing.conformance import wait_until  # noqa: E402
from tests.backends.ray.conftest import make_backend  # noqa: E402

pytestmark = pytest.mark.ray
WAIT = 60.0


def sleep_then_report(seconds: float) -> str:
    node = escher.node_id()
    time.sleep(seconds)
    return node


def add_worker(cluster: Any, backend: Any) -> tuple[Any, str]:
    before = set(backend.get_cluster_state().nodes)
    handle = cluster.add_node(num_cpus=2, object_store_memory=80 * 2**20)
    assert wait_until(lambda: set(backend.get_cluster_state().nodes) - before, timeout=WAIT)
    (new,) = set(backend.get_cluster_state().nodes) - before
    return handle, new


@pytest.mark.parametrize("mode", ["resize", "ledger"])
def test_node_removal(ray_cluster: Any, mode: str) -> None:
    backend = make_backend(ray_cluster, mode=mode)
    escher.init(backend)
    label, doomed_label = f"nf-{uuid.uuid4().hex[:6]}", f"nd-{uuid.uuid4().hex[:6]}"
    try:
        handle, doomed = add_worker(ray_cluster, backend)
        survivor = sorted(
            n
            for n, node in backend.get_cluster_state().nodes.items()
            if node.total.get("CPU", 0) >= 2 and n != doomed
        )[0]
        backend.set_resource(label, 1, doomed)
        backend.set_resource(doomed_label, 1, doomed)
        retried = backend.launch(
            TaskSpec(sleep_then_report, (3.0,), max_retries=2, resources=Resources({label: 1}))
        )
        lost = backend.launch(
            TaskSpec(sleep_then_report, (3.0,), resources=Resources({doomed_label: 1}))
        )
        assert wait_until(lambda: retried.started() and lost.started(), timeout=WAIT)
        assert retried.node_id == doomed and lost.node_id == doomed
        backend.set_resource(label, 1, survivor)  # somewhere to go after the failure

        ray_cluster.remove_node(handle, allow_graceful=False)

        assert wait_until(lambda: doomed not in backend.get_cluster_state().nodes, timeout=WAIT)
        state = backend.get_cluster_state()
        assert state.holding(label) == {survivor: 1}
        assert state.holding(doomed_label) == {}
        assert retried.result(WAIT) == survivor
        with pytest.raises(NodeDiedError):
            lost.result(WAIT)
        with pytest.raises(UnknownNodeError):
            backend.set_resource(label, 2, doomed)
    finally:
        for node in backend.get_cluster_state().nodes:
            for name in (label, doomed_label):
                backend.set_resource(name, 0, node)
        escher.shutdown()
