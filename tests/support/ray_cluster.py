"""One local multi-node Ray cluster per test session (head with 0 CPUs + 4 workers).

Every Ray test module (tests/backends/ray, tests/chaos) uses the `ray_cluster` fixture,
registered for the whole test tree by tests/conftest.py, so one cluster serves them all.
The cluster runs without token authentication, dashboard or usage stats, with a small
object store, so CI needs nothing by hand.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

# Before Ray is imported (it reads some of these at import time).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")  # a stray call must not start a new Ray


def _ray() -> Any:
    """Ray, imported on first use (test runs without Ray tests never pay for the import)."""
    try:
        import ray
    except ImportError:  # the Ray tests skip themselves (pytest.importorskip in each module)
        return None
    return ray


WORKERS = 4
WORKER_CPUS = 2
OBJECT_STORE = 80 * 2**20
NAMESPACE = "escher-tests"
#: Ray notices a killed node within about 2 s (its defaults take tens of seconds), so the
#: node-loss tests do not leave dead nodes listed for the tests after them.
FAST_NODE_DEATH = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
}


def start_cluster(workers: int, labels: bool = True) -> Any:
    """A head node without CPUs and `workers` workers with 2 CPUs each; connected."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "object_store_memory": OBJECT_STORE,
            "_system_config": FAST_NODE_DEATH,
        },
    )
    for i in range(workers):
        cluster.add_node(
            num_cpus=WORKER_CPUS,
            object_store_memory=OBJECT_STORE,
            labels={"zone": f"z{i % 2}"} if labels else {},
            resources={"ssd": 1} if i == 0 else {},  # an application-defined resource
        )
    _ray().init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    cluster.wait_for_nodes(timeout=120)
    return cluster


def kill_worker(cluster: Any, handle: Any, node_id: str, timeout: float = 60.0) -> None:
    """Kill a worker node's processes (as a failure would) and wait, at most `timeout`
    seconds, until Ray no longer lists it."""
    cluster.remove_node(handle, allow_graceful=False)
    wait_until_gone(node_id, timeout)


def wait_until_gone(node_id: str, timeout: float = 60.0) -> None:
    """Wait, at most `timeout` seconds, until Ray no longer lists `node_id` as alive."""
    import ray._private.state as ray_state

    deadline = time.monotonic() + timeout
    while node_id in ray_state.total_resources_per_node() and time.monotonic() < deadline:
        time.sleep(0.1)


def stop_cluster(cluster: Any) -> None:
    """Disconnect and stop every node of `cluster`."""
    _ray().shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The session's shared cluster (started on first use)."""
    ray = _ray()
    if ray is None:
        pytest.skip("Ray is not installed: pip install 'escher-sched[ray]'")
    if ray.is_initialized():
        ray.shutdown()
    cluster = start_cluster(WORKERS)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


def resize_supported() -> bool:
    """True if this Ray has the in-place resize call (resize mode); else only ledger runs."""
    if _ray() is None:
        return False
    import ray._raylet as raylet

    return any(  # GcsClient forwards unknown attributes to InnerGcsClient
        hasattr(getattr(raylet, cls, None), "resize_raylet_resource_instances")
        for cls in ("GcsClient", "InnerGcsClient")
    )


def skip_unless_mode(mode: str) -> None:
    """Skip the calling test if this Ray cannot run `mode`."""
    if mode == "resize" and not resize_supported():
        pytest.skip(f"Ray {_ray().__version__} has no in-place resize call: ledger mode only")


def make_backend(cluster: Any, **options: Any) -> Any:
    """A RayBackend connected to `cluster` (Ray is already initialised by the fixture)."""
    from escher.backends.ray import RayBackend

    skip_unless_mode(options.get("mode", "auto"))
    return RayBackend(address=cluster.address, namespace=NAMESPACE, **options)


@pytest.fixture(params=["resize", "ledger"])
def ray_backend(request: Any, ray_cluster: Any) -> Iterator[Any]:
    """A RayBackend in each mode, installed as escher's current backend for the test."""
    import escher

    instance = make_backend(ray_cluster, mode=request.param)
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()
