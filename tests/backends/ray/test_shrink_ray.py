"""Resize mode: a shrink below what is in use holds back every late task, including one
that Ray would start on the freed unit at once (queued at the raylet, or given the
finished holder's worker lease by its owner). Each test runs twice: with the nodes armed
(tasks read the node's own copy of its marker) and with none armed (tasks read the
control store)."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest

pytest.importorskip("ray")

from escher.backends.ray import RayBackend
from escher.core.resources import Resources
from escher.core.task import StatusCode, TaskSpec
from escher.testing.conformance import hold_until, wait_until
from tests.support.ray_cluster import make_backend

pytestmark = pytest.mark.ray

WAIT = 60.0


@pytest.fixture(params=["armed", "not armed"])
def backend(ray_cluster: Any, request: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    from escher.backends.ray._gate import NodeAgents
    from escher.backends.ray._nodegate import ARMED, node_dir

    prefix = f"shrink{uuid.uuid4().hex[:6]}_"  # a prefix of its own: armed or not
    if request.param == "not armed":
        monkeypatch.setattr(NodeAgents, "ensure", lambda self, nodes: None)
    backend = make_backend(ray_cluster, mode="resize", prefix=prefix)
    if request.param == "armed":
        nodes = list(backend.get_cluster_state().nodes)
        assert wait_until(
            lambda: all(os.path.exists(os.path.join(node_dir(prefix, n), ARMED)) for n in nodes),
            WAIT,
        )
    yield backend
    backend.close()


def _copy_on_node(backend: RayBackend, node: str) -> frozenset[str] | None:
    """The node's own copy of its marker (None if the node is not armed)."""
    from escher.backends.ray._nodegate import node_dir, shrinks_here

    return shrinks_here(node_dir(backend.prefix, node))


def _worker(backend: RayBackend) -> str:
    state = backend.get_cluster_state()
    return next(n for n, node in sorted(state.nodes.items()) if node.total.get("CPU", 0) > 0)


def _holder_and_late_task(
    backend: RayBackend, node: str, label: str, tmp_path: Any
) -> tuple[Any, Any, list[str]]:
    """`label` x1 on `node`, and two tasks of one shape that hold it until their gate file
    exists: the first (which gets the unit) and a late one (queued for it)."""
    for _ in range(2):  # from its second launch on a function has its own remote function
        assert backend.launch(TaskSpec(hold_until, ("", False))).result(WAIT)
    backend.set_resource(label, 1, node)
    request = Resources({label: 1, "CPU": 0.5})
    gates = [str(tmp_path / "a"), str(tmp_path / "b")]
    first = backend.launch(TaskSpec(hold_until, (gates[0], True), resources=request))
    late = backend.launch(TaskSpec(hold_until, (gates[1], True), resources=request))
    return first, late, gates


def test_a_task_of_the_holders_shape_does_not_take_the_freed_unit(
    backend: RayBackend, tmp_path: Any
) -> None:
    """The late task has the holder's function and request (the owner may hand it the
    holder's worker lease): after a shrink to 0, it waits although Ray's unit is free."""
    node, label = _worker(backend), "shrink-lease"
    first, late, gates = _holder_and_late_task(backend, node, label, tmp_path)
    try:
        assert wait_until(first.started, WAIT)
        assert backend.set_resource(label, 0, node) == (node,)
        copy = _copy_on_node(backend, node)
        assert copy is None or backend.ray_resource_name(label) in copy  # before it returned
        assert label not in backend.get_cluster_state().node(node).total
        open(gates[0], "w").close()
        assert first.result(WAIT) == node
        # Ray's unit is free now; the late task must still not run (room for it to show)
        assert not wait_until(late.started, 1.5)
        assert late.status.code is not StatusCode.SCHEDULED
        backend.set_resource(label, 1, node)  # room again: it runs
        assert not _copy_on_node(backend, node)  # the write ended the shrink
        open(gates[1], "w").close()
        assert late.result(WAIT) == node
    finally:
        for gate in gates:
            open(gate, "w").close()
    assert wait_until(
        lambda: backend.get_cluster_state().node(node).available.get(label, 0.0) == 1, WAIT
    )


def test_a_write_that_shrinks_several_nodes_below_use_waits_once(
    backend: RayBackend, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The wait that outlasts workers' marker reads is per call, not per node."""
    from escher.backends.ray import _resize

    waits: list[int] = []
    monkeypatch.setattr(_resize, "outlast_marker_reads", lambda: waits.append(1))
    state = backend.get_cluster_state()
    nodes = [n for n, node in sorted(state.nodes.items()) if node.total.get("CPU", 0) > 0][:2]
    label, gate = "shrink-many", str(tmp_path / "gate")
    holders = []
    try:
        for node in nodes:
            backend.set_resource(label, 1, node)
            request = Resources({f"{label}-{node[:8]}": 1, label: 1, "CPU": 0.5})
            backend.set_resource(f"{label}-{node[:8]}", 1, node)  # pins the holder to node
            holders.append(backend.launch(TaskSpec(hold_until, (gate, True), resources=request)))
        assert wait_until(lambda: all(h.started() for h in holders), WAIT)
        assert waits == []
        written = backend.set_resources({label: 0}, {"CPU": 0.5})  # both held below use
        assert set(nodes) <= set(written)
        assert waits == [1]
    finally:
        open(gate, "w").close()
    assert sorted(h.result(WAIT) for h in holders) == sorted(nodes)
    for node in nodes:
        backend.set_resource(f"{label}-{node[:8]}", 0, node)


def test_a_pending_shrink_outlives_a_restart_of_the_control_actor(
    backend: RayBackend, tmp_path: Any
) -> None:
    """The control actor dies (Ray restarts it) while a shrink below use is pending: the
    late task still does not take the unit its holder frees."""
    import ray

    node, label = _worker(backend), "shrink-restart"
    first, late, gates = _holder_and_late_task(backend, node, label, tmp_path)
    try:
        assert wait_until(first.started, WAIT)
        assert backend.set_resource(label, 0, node) == (node,)
        ray.kill(backend.control(), no_restart=False)
        assert ray.get(backend.control().ownership.remote(), timeout=WAIT)  # restarted
        open(gates[0], "w").close()
        assert first.result(WAIT) == node
        assert not wait_until(late.started, 1.5)
        backend.set_resource(label, 1, node)  # room again: it runs
        open(gates[1], "w").close()
        assert late.result(WAIT) == node
    finally:
        for gate in gates:
            open(gate, "w").close()
