"""Faults on a real Ray cluster: a worker dies (with or without escher's control actor on
it), a retried task's label dies with its node, a gang can no longer fit, a driver is
killed and its labels are collected.

Each test adds its own spare nodes to the session's cluster and removes them again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import escher  # noqa: E402
from escher.core.errors import UnschedulableError  # noqa: E402
from escher.core.resources import Resources  # noqa: E402
from escher.core.task import StatusCode, TaskSpec, TaskState  # noqa: E402
from escher.testing.conformance import first_attempt_hangs, wait_until  # noqa: E402
from tests.support.ray_cluster import (  # noqa: E402
    NAMESPACE,
    OBJECT_STORE,
    make_backend,
    wait_until_gone,
)

pytestmark = [pytest.mark.ray, pytest.mark.chaos]
WAIT = 60.0
ROOT = Path(__file__).resolve().parents[2]


def here() -> str:
    return escher.node_id()


def sleep_here(seconds: float) -> str:
    time.sleep(seconds)
    return escher.node_id()


def fresh() -> str:
    return f"c-{uuid.uuid4().hex[:8]}"


def spare(cluster: Any, backend: Any, **resources: float) -> tuple[Any, str]:
    """Add a worker with 2 CPUs (and `resources`); its handle and node id."""
    before = set(backend.get_cluster_state().nodes)
    handle = cluster.add_node(num_cpus=2, object_store_memory=OBJECT_STORE, resources=resources)
    assert wait_until(lambda: set(backend.get_cluster_state().nodes) - before, timeout=WAIT)
    (node,) = set(backend.get_cluster_state().nodes) - before
    return handle, node


def workers(backend: Any, but: str = "") -> list[str]:
    state = backend.get_cluster_state()
    return sorted(
        n for n, node in state.nodes.items() if node.total.get("CPU", 0) >= 2 and n != but
    )


@pytest.fixture
def backend(ray_backend: Any) -> Any:
    """The shared Ray backend fixture, in each mode (tests/support/ray_cluster.py)."""
    return ray_backend


def test_control_actor_lives_on_the_head_and_a_worker_death_leaves_the_backend_usable(
    ray_cluster: Any, backend: Any
) -> None:
    from escher.backends.ray._control import head_node_id

    assert ray.get(backend.control().node.remote(), timeout=WAIT) == head_node_id()
    handle, doomed = spare(ray_cluster, backend)
    label, survivor = fresh(), workers(backend, but=doomed)[0]
    try:
        backend.set_resource(label, 1, doomed)
        retried = backend.launch(
            TaskSpec(sleep_here, (2.0,), resources=Resources({label: 1}), max_retries=1)
        )
        assert wait_until(lambda: retried.node_id == doomed, timeout=WAIT)
        ray_cluster.remove_node(handle, allow_graceful=False)
        backend.set_resource(label, 1, survivor)
        assert retried.result(WAIT) == survivor and retried.attempts == 2
        assert backend.launch(TaskSpec(here)).result(WAIT)  # new tasks still run
    finally:
        backend.set_resource(label, 0, survivor)
        wait_until_gone(doomed)


def test_retried_task_whose_label_died_goes_back_to_pending_and_says_why(
    ray_cluster: Any, backend: Any, tmp_path: Path
) -> None:
    handle, doomed = spare(ray_cluster, backend)
    label, survivor = fresh(), workers(backend, but=doomed)[0]
    release = tmp_path / "release"
    try:
        backend.set_resource(label, 1, doomed)
        args = (str(tmp_path / "attempts"), str(release), True)
        ref = backend.launch(
            TaskSpec(first_attempt_hangs, args, resources=Resources({label: 1}), max_retries=1)
        )
        assert wait_until(lambda: ref.node_id == doomed, timeout=WAIT)
        ray_cluster.remove_node(handle, allow_graceful=False)
        assert wait_until(lambda: ref.retries == 1, timeout=WAIT)
        assert ref.state is TaskState.PENDING and ref.node_id is None
        reason = ref.status.reason
        assert doomed in reason and label in reason and "no live node" in reason, reason
        facts = backend.describe_task(ref)
        assert facts["retries"] == 1 and facts["mode"] == backend.mode
        backend.set_resource(label, 1, survivor)
        assert ref.result(WAIT) == (2, survivor)
    finally:
        release.touch()
        backend.set_resource(label, 0, survivor)
        wait_until_gone(doomed)


def test_gang_that_can_no_longer_fit_fails_with_the_reason(ray_cluster: Any, backend: Any) -> None:
    handle, doomed = spare(ray_cluster, backend, tpu=1)
    blocker = backend.launch(TaskSpec(sleep_here, (30.0,), resources=Resources({"tpu": 1})))
    assert wait_until(blocker.started, timeout=WAIT)
    gang = backend.launch_gang([TaskSpec(here, resources=Resources({"tpu": 1, "CPU": 1}))] * 1)
    assert not gang[0].wait(1.0)  # waits for room while the tpu node lives
    assert gang[0].status.code is StatusCode.UNSCHEDULABLE or not gang[0].started()
    ray_cluster.remove_node(handle, allow_graceful=False)
    with pytest.raises(UnschedulableError, match="no set of live nodes"):
        gang[0].result(WAIT)
    assert blocker.wait(WAIT)
    wait_until_gone(doomed)


def test_gang_that_never_fits_fails_at_once(ray_cluster: Any, backend: Any) -> None:
    count = len(backend.get_cluster_state().nodes) + 1
    spread = make_backend(ray_cluster, mode=backend.mode, gang_strategy="STRICT_SPREAD")
    try:
        refs = spread.launch_gang([TaskSpec(here, resources=Resources({"CPU": 1}))] * count)
        for ref in refs:
            with pytest.raises(UnschedulableError, match="STRICT_SPREAD"):
                ref.result(0)
            assert ref.status.code is StatusCode.INFEASIBLE
    finally:
        spread.close()


DRIVER = """
import os, sys, time
sys.path.insert(0, {root!r})
from escher.backends.ray import RayBackend
backend = RayBackend(address={address!r}, namespace={namespace!r}, mode={mode!r},
                     lease_seconds=2.0)
nodes = sorted(n for n, node in backend.get_cluster_state().nodes.items()
               if node.total.get("CPU", 0) >= 2)
backend.set_resources({{{label!r}: 2, {label2!r}: 1}}, nodes[0])
backend.set_resource({label!r}, 3, nodes[1])
backend.flush_writes()
print("ready", flush=True)
time.sleep(600)
"""


def test_driver_crash_leaves_labels_that_gc_removes_and_live_ones_stay(
    ray_cluster: Any, backend: Any
) -> None:
    dead, dead2, live = fresh(), fresh(), fresh()
    nodes = workers(backend)
    backend.set_resource(live, 1, nodes[0])
    script = DRIVER.format(
        root=str(ROOT),
        address=ray_cluster.address,
        namespace=NAMESPACE,
        mode=backend.mode,
        label=dead,
        label2=dead2,
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready"
        state = backend.get_cluster_state()
        assert state.holding(dead) == {nodes[0]: 2, nodes[1]: 3}
        early = backend.collect_garbage(dry_run=True)
        assert not any(dead in line for line in early.removed)  # its lease is still alive
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(WAIT)

        def expired() -> bool:
            return any(dead in line for line in backend.collect_garbage(dry_run=True).removed)

        assert wait_until(expired, timeout=WAIT, step=0.5)
        report = backend.collect_garbage()
        removed = {line.split()[1] for line in report.removed}
        assert {dead, dead2} <= removed and live not in removed
        assert any(live in line for line in report.kept)
        state = backend.get_cluster_state()
        assert state.holding(dead) == {} and state.holding(dead2) == {}
        assert state.holding(live) == {nodes[0]: 1}
        assert not any(dead in line for line in backend.collect_garbage().removed)
    finally:
        if driver.poll() is None:
            driver.kill()
        backend.set_resource(live, 0, nodes[0])
