"""One local multi-node Ray cluster per test session (head with 0 CPUs + 4 workers).

Every Ray test module uses the `ray_cluster` fixture. The cluster runs without token
authentication, dashboard or usage stats, with a small object store, so CI needs nothing
by hand.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

# Before Ray is imported (it reads some of these at import time).
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_AUTO_CONNECT", "0")  # a stray call must not start a new Ray

try:
    import ray
    from ray.cluster_utils import Cluster
except ImportError:  # the Ray tests skip themselves (pytest.importorskip in each module)
    ray = None

WORKERS = 4
WORKER_CPUS = 2
OBJECT_STORE = 80 * 2**20
NAMESPACE = "escher-tests"


def start_cluster(workers: int, labels: bool = True) -> Any:
    """A head node without CPUs and `workers` workers with 2 CPUs each; connected."""
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "include_dashboard": False,
            "object_store_memory": OBJECT_STORE,
        },
    )
    for i in range(workers):
        cluster.add_node(
            num_cpus=WORKER_CPUS,
            object_store_memory=OBJECT_STORE,
            labels={"zone": f"z{i % 2}"} if labels else {},
            resources={"ssd": 1} if i == 0 else {},  # an application-defined resource
        )
    ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
    cluster.wait_for_nodes(timeout=120)
    return cluster


def stop_cluster(cluster: Any) -> None:
    """Disconnect and stop every node of `cluster`."""
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The session's shared cluster (started on first use)."""
    if ray is None:
        pytest.skip("Ray is not installed: pip install 'escher-sched[ray]'")
    if ray.is_initialized():
        ray.shutdown()
    cluster = start_cluster(WORKERS)
    try:
        yield cluster
    finally:
        stop_cluster(cluster)


def make_backend(cluster: Any, **options: Any) -> Any:
    """A RayBackend connected to `cluster` (Ray is already initialised by the fixture)."""
    from escher.backends.ray import RayBackend

    return RayBackend(address=cluster.address, namespace=NAMESPACE, **options)
