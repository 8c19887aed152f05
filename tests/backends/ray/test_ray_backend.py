"""Ray-specific behaviour of RayBackend, on the session's local multi-node cluster."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

ray = pytest.importorskip("ray")

import escher  # noqa: E402
from escher.backends.base import Capability  # noqa: E402
from escher.core.errors import (  # noqa: E402
    ConfigError,
    ReservedResourceError,
    UnknownNodeError,
    UnschedulableError,
    UnsupportedError,
)
from escher.core.resources import Resources  # noqa: E402
from escher.core.task import StatusCode, TaskSpec, TaskState  # noqa: E402
from escher.testing.conformance import wait_until  # noqa: E402
from tests.backends.ray.conftest import make_backend  # noqa: E402

pytestmark = pytest.mark.ray
WAIT = 60.0


class Boom(Exception):
    """A task's own exception type, with an attribute."""

    def __init__(self, code: int) -> None:
        super().__init__(f"boom {code}")
        self.code = code


def raise_boom(code: int) -> None:
    raise Boom(code)


def here() -> str:
    return escher.node_id()


def sleep_here(seconds: float) -> str:
    time.sleep(seconds)
    return escher.node_id()


def set_here_and_report(label: str) -> tuple[str, float]:
    escher.set_resource(label, 3)
    node = escher.node_id()
    return node, escher.get_cluster_state().node(node).total[label]


def set_on(label: str, capacity: float, node: str) -> str:
    escher.set_resource(label, capacity, node)  # no read after it: nothing else sends it
    return node


def total_on(label: str, node: str) -> float:
    return float(escher.get_cluster_state().node(node).total.get(label, 0.0))


@pytest.fixture
def backend(ray_backend: Any) -> Any:
    """The shared Ray backend fixture, in each mode (tests/support/ray_cluster.py)."""
    return ray_backend


@pytest.fixture
def resize(ray_cluster: Any) -> Iterator[Any]:
    instance = make_backend(ray_cluster, mode="resize")
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()


def fresh() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def workers(backend: Any) -> list[str]:
    state = backend.get_cluster_state()
    return sorted(n for n, node in state.nodes.items() if node.total.get("CPU", 0) >= 2)


def ssd_node(backend: Any) -> str:
    state = backend.get_cluster_state()
    return next(n for n, node in state.nodes.items() if "ssd" in node.total)


def test_auto_mode_detects_the_resize_call(ray_cluster: Any) -> None:
    from escher.backends.ray._resize import resize_call

    backend = make_backend(ray_cluster)
    try:
        assert backend.mode == ("resize" if resize_call() is not None else "ledger")
        facts = backend.describe()
        assert facts["mode"] == backend.mode and facts["ray_version"] == ray.__version__
    finally:
        backend.close()
    with pytest.raises(ConfigError, match="mode"):
        make_backend(ray_cluster, mode="magic")
    with pytest.raises(ConfigError, match="prefix"):
        make_backend(ray_cluster, prefix="CPU")


def test_registry_name_and_options(ray_cluster: Any) -> None:
    with escher.init("ray", address=ray_cluster.address, namespace="escher-tests") as backend:
        assert backend.name == "ray" and Capability.ATOMIC_GANG in backend.capabilities
        assert len(escher.get_cluster_state().nodes) >= 5


def test_prefix_isolates_escher_resources_in_ray(resize: Any) -> None:
    import ray._private.state as ray_state

    node, label = workers(resize)[1], fresh()
    resize.set_resource(label, 2, node)
    assert wait_until(
        lambda: ray_state.total_resources_per_node()[node].get("escher_" + label) == 2,
        timeout=10,
    )
    state = resize.get_cluster_state().node(node)
    assert state.total[label] == 2 and label in state.ephemeral
    assert "escher_" + label not in state.total and state.physical["CPU"] == 2
    resize.set_resource(label, 0, node)


def test_the_resize_probe_never_shows_in_the_cluster_state(resize: Any) -> None:
    """Ray's view may list the probe's resource a moment after the probe deleted it."""
    import ray._private.state as ray_state

    from escher.backends.ray._resize import resize_call
    from escher.backends.ray._state import PROBE_PREFIX

    call, node = resize_call(), workers(resize)[0]
    assert call is not None
    name = PROBE_PREFIX + "lingering"
    call(node, {name: 1.5})  # as a view read between the probe's create and delete sees it
    try:
        assert wait_until(lambda: name in ray_state.total_resources_per_node()[node], timeout=10)
        state = resize.get_cluster_state().node(node)
        assert not any("probe" in key for key in state.total), state.total
        assert not any("probe" in key for key in state.available), state.available
    finally:
        call(node, {name: 0})


def test_application_resources_are_node_defined(backend: Any) -> None:
    node = ssd_node(backend)
    with pytest.raises(ReservedResourceError):
        backend.set_resource("ssd", 5, node)
    state = backend.get_cluster_state().node(node)
    assert state.total["ssd"] == 1 and "ssd" not in state.ephemeral
    ref = backend.launch(TaskSpec(here, resources=Resources({"ssd": 1})))
    assert ref.result(WAIT) == node


def test_node_id_and_set_resource_inside_a_task(backend: Any) -> None:
    assert backend.current_node_id() is None
    label = fresh()
    try:
        ref = backend.launch(TaskSpec(set_here_and_report, (label,)))
        node, seen_inside = ref.result(WAIT)
        assert node == ref.node_id and seen_inside == 3
        assert backend.get_cluster_state().node(node).total[label] == 3
        follower = backend.launch(TaskSpec(here, resources=Resources({label: 1})))
        assert follower.result(WAIT) == node
    finally:
        for n in workers(backend):
            backend.set_resource(label, 0, n)


def test_writes_are_seen_across_processes_as_soon_as_causality_allows(backend: Any) -> None:
    """A write inside a task is in the driver's view when the task's result is back, and a
    driver's write is in a task's view when the task starts (Ray's own view lags ~100 ms;
    resize mode sends writes to the control actor in batches, and must flush at these
    points)."""
    nodes = workers(backend)
    labels = [fresh() for _ in range(6)]
    try:
        for i, label in enumerate(labels):
            node = nodes[i % len(nodes)]
            task = backend.launch(TaskSpec(set_on, (label, 2 + i, node)))
            assert task.result(WAIT) == node
            assert backend.get_cluster_state().node(node).total.get(label) == 2 + i
            backend.set_resource(label, 1, node)
            assert backend.launch(TaskSpec(total_on, (label, node))).result(WAIT) == 1
    finally:
        for i, label in enumerate(labels):
            backend.set_resource(label, 0, nodes[i % len(nodes)])


def test_wait_for_labels_returns_when_a_task_created_them(backend: Any) -> None:
    node, label = workers(backend)[1], fresh()
    try:
        assert not backend.wait_for_labels([label], 0.2)
        task = backend.launch(TaskSpec(set_on, (label, 1, node)))
        if backend.mode == "ledger":  # no cheap signal there: callers poll the state
            task.result(WAIT)
            assert not backend.waits_for_labels and not backend.wait_for_labels([label], 0.2)
            return
        assert backend.waits_for_labels
        assert backend.wait_for_labels([label], WAIT)
        follower = backend.launch(TaskSpec(here, resources=Resources({label: 1})))
        assert follower.result(WAIT) == node
    finally:
        backend.set_resource(label, 0, node)


def test_unknown_node_changes_nothing(backend: Any) -> None:
    with pytest.raises(UnknownNodeError):
        backend.set_resource(fresh(), 1, "ab" * 28)


def test_original_exception_type_reaches_the_caller(backend: Any) -> None:
    ref = backend.launch(TaskSpec(raise_boom, (7,)))
    with pytest.raises(Boom) as caught:
        ref.result(WAIT)
    assert caught.value.code == 7 and ref.state is TaskState.FAILED


def test_infeasible_requests_fail_at_once(backend: Any) -> None:
    for request in ({"GPU": 1}, {"CPU": 3}, {"ssd": 2}):
        ref = backend.launch(TaskSpec(here, resources=Resources(request)))
        assert ref.status.code is StatusCode.INFEASIBLE
        with pytest.raises(UnschedulableError):
            ref.result(0)


def test_cancel_after_start_returns_false_and_the_task_finishes(backend: Any) -> None:
    node, label = workers(backend)[0], fresh()
    backend.set_resource(label, 1, node)
    try:
        ref = backend.launch(TaskSpec(sleep_here, (1.5,), resources=Resources({label: 1})))
        assert wait_until(ref.started, timeout=WAIT)
        assert ref.state is TaskState.RUNNING and ref.node_id == node
        assert ref.cancel() is False
        assert ref.result(WAIT) == node and ref.state is TaskState.FINISHED
    finally:
        backend.set_resource(label, 0, node)


def test_shrink_below_in_use_is_applied_once_released(backend: Any) -> None:
    node, label = workers(backend)[2], fresh()
    backend.set_resource(label, 2, node)
    try:
        refs = [
            backend.launch(TaskSpec(sleep_here, (1.0,), resources=Resources({label: 1})))
            for _ in range(2)
        ]
        assert wait_until(lambda: all(r.started() for r in refs), timeout=WAIT)
        backend.set_resource(label, 1, node)  # 2 in use: Ray keeps 2 for now
        assert [r.result(WAIT) for r in refs] == [node, node]
        assert wait_until(
            lambda: backend.get_cluster_state().node(node).total.get(label) == 1, timeout=10
        )
        assert wait_until(
            lambda: backend.get_cluster_state().node(node).available.get(label) == 1, timeout=10
        )
        assert backend.store.pending_shrinks() == {}
    finally:
        backend.set_resource(label, 0, node)


def test_gang_is_all_or_nothing_with_ephemeral_resources(resize: Any) -> None:
    a, b = workers(resize)[:2]
    label = fresh()
    resize.set_resource(label, 1, a)
    try:
        specs = [TaskSpec(here, resources=Resources({"CPU": 1, label: 1})) for _ in range(2)]
        refs = resize.launch_gang(specs)
        time.sleep(1.0)
        assert not any(r.started() or r.done() for r in refs)  # only one unit exists
        resize.set_resource(label, 1, b)
        assert sorted(r.result(WAIT) for r in refs) == sorted([a, b])
    finally:
        for n in (a, b):
            resize.set_resource(label, 0, n)


def test_gang_spread_over_four_nodes(ray_cluster: Any) -> None:
    backend = make_backend(ray_cluster, gang_strategy="STRICT_SPREAD")
    try:
        refs = backend.launch_gang(
            [TaskSpec(here, resources=Resources({"CPU": 1})) for _ in range(4)]
        )
        assert len({r.result(WAIT) for r in refs}) == 4
    finally:
        backend.close()


def test_ledger_gang_with_ephemeral_labels_and_cpus(ray_cluster: Any) -> None:
    from escher.backends.ray._gang import bundle_selector_supported

    backend = make_backend(ray_cluster, mode="ledger")
    a, b = workers(backend)[:2]
    label = fresh()
    try:
        backend.set_resource(label, 1, a)
        specs = [TaskSpec(here, resources=Resources({"CPU": 1, label: 1})) for _ in range(2)]
        if not bundle_selector_supported():
            with pytest.raises(UnsupportedError, match="ledger"):
                backend.launch_gang(specs)
            return
        refs = backend.launch_gang(specs)
        time.sleep(1.0)
        assert not any(r.started() or r.done() for r in refs)  # only one unit exists
        backend.set_resource(label, 1, b)
        assert sorted(r.result(WAIT) for r in refs) == sorted([a, b])
    finally:
        for n in (a, b):
            backend.set_resource(label, 0, n)
        backend.close()


def test_esl_gang_on_ray_both_paths(resize: Any) -> None:
    from escher import esl

    for mode in ("native", "ephemeral"):
        with esl.Gang(resize, mode=mode, timeout=5.0, seed=1) as gang:
            run = gang.run([esl.Member(here, resources={"CPU": 2}) for _ in range(4)])
            assert len(set(run.results(timeout=WAIT))) == 4


def _add(x: int, y: int = 0) -> int:
    return x + y


@pytest.mark.parametrize("mode", ["resize", "ledger"])
def test_settled_tasks_are_freed_without_the_cycle_collector(ray_cluster: Any, mode: str) -> None:
    """A handle and what the backend kept for it form no reference cycle: they are freed as
    soon as the last reference goes (cycles would wait for Python's cyclic collector, whose
    full passes over a Ray driver's heap cost more than the tasks themselves)."""
    import gc
    import weakref

    backend = make_backend(ray_cluster, mode=mode)
    label = fresh()
    node = workers(backend)[0]
    gc.collect()
    gc.disable()
    try:
        backend.set_resource(label, 4, node)
        specs = [TaskSpec(_add, args=(i,), resources=Resources({"CPU": 0.5})) for i in range(6)]
        specs += [TaskSpec(_add, args=(i,), kwargs={"y": 1}) for i in range(6)]
        specs += [TaskSpec(here, resources=Resources({"CPU": 0.5, label: 1})) for _ in range(6)]
        refs = [backend.launch(spec) for spec in specs]
        values = [r.result(WAIT) for r in refs]
        assert values[:12] == [*range(6), *range(1, 7)]
        assert set(values[12:]) == {node}
        assert refs[0].cancel() is False  # a settled handle: nothing to cancel
        assert wait_until(lambda: not backend.tasks(), WAIT)
        handles = [weakref.ref(r) for r in refs]
        del refs
        # A thread that settles or dispatches may still hold the last one for a moment.
        wait_until(lambda: all(h() is None for h in handles), 10.0)
        alive = [h for h in handles if h() is not None]
        assert not alive, f"{len(alive)} settled handles are kept alive: {alive[:3]}"
    finally:
        gc.enable()
        backend.set_resource(label, 0, node)
        backend.close()


def test_ledger_units_come_back_while_others_wait(ray_cluster: Any) -> None:
    """Ledger mode gives units back with its next grant call: tasks queued for a label of
    capacity 2 all run, never more than 2 at once, and every unit is free afterwards."""
    backend = make_backend(ray_cluster, mode="ledger")
    node = workers(backend)[0]
    label = fresh()
    try:
        backend.set_resource(label, 2, node)
        refs = [
            backend.launch(TaskSpec(_hold, args=(label,), resources=Resources({label: 1})))
            for _ in range(12)
        ]
        peaks = [r.result(WAIT) for r in refs]
        assert max(peaks) <= 2
        wait_until(lambda: backend.get_cluster_state().nodes[node].available.get(label) == 2, WAIT)
    finally:
        backend.set_resource(label, 0, node)
        backend.close()


def _hold(label: str) -> int:
    """Run for a moment; how many tasks of `label` ran at once (a file per running task)."""
    import os
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"escher-hold-{label}")
    os.makedirs(folder, exist_ok=True)
    mine = os.path.join(folder, uuid.uuid4().hex)
    open(mine, "w").close()
    try:
        time.sleep(0.05)
        return len(os.listdir(folder))
    finally:
        os.unlink(mine)


def _run_until(started: str, go: str) -> str:
    """Say it started (a file), then run until `go` exists; the node it ran on."""
    import os

    open(started, "w").close()
    deadline = time.monotonic() + WAIT
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.02)
    return str(escher.node_id())


def test_asking_about_a_task_learns_that_it_started(
    backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """With many tasks outstanding, escher looks for starts less often; asking about a task
    (`describe_task`, which `escher.why` reads) looks at once, so the answer is current."""
    from escher.backends.ray import _tasks

    monkeypatch.setattr(_tasks, "look_period", lambda outstanding: 3600.0)  # never on its own
    started, go = tmp_path / "started", tmp_path / "go"
    ref = backend.launch(
        TaskSpec(_run_until, args=(str(started), str(go)), resources=Resources({"CPU": 0.5}))
    )
    try:
        assert wait_until(started.exists, WAIT)
        backend.describe_task(ref)
        assert ref.state is TaskState.RUNNING
        why = escher.why(ref, backend=backend)
        assert why.task["state"] == "running", why.render()
    finally:
        go.touch()
    assert ref.result(WAIT) == ref.node_id


def test_asking_about_a_task_changes_nothing_itself(
    backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """`describe_task` is introspection: the look at the start gate that it asks for, and the
    state change that follows, happen on the sync thread, never on the asking thread."""
    import threading

    from escher.backends.ray import _gate, _tasks

    lookers: list[str] = []
    started_by_gate = _gate.Gate.started

    def recorded(self: Any, forget: Any, skip: Any = ()) -> dict[str, str]:
        lookers.append(threading.current_thread().name)
        return started_by_gate(self, forget, skip)

    monkeypatch.setattr(_tasks, "look_period", lambda outstanding: 3600.0)
    monkeypatch.setattr(_gate.Gate, "started", recorded)
    started, go = tmp_path / "started", tmp_path / "go"
    ref = backend.launch(
        TaskSpec(_run_until, args=(str(started), str(go)), resources=Resources({"CPU": 0.5}))
    )
    try:
        assert wait_until(started.exists, WAIT)
        backend.describe_task(ref)
        assert ref.state is TaskState.RUNNING
        assert lookers and threading.current_thread().name not in lookers
    finally:
        go.touch()
    assert ref.result(WAIT) == ref.node_id


def test_questions_do_not_wait_on_a_slow_start_gate(
    backend: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """After a look at the start gate that took long (a node agent not answering), asking
    about a task does not look again: the answer comes from what is known."""
    from escher.backends.ray import _gate, _starts, _tasks

    looks: list[float] = []

    def slow_look(self: Any, forget: Any, skip: Any = ()) -> dict[str, str]:
        looks.append(time.monotonic())
        time.sleep(_starts.SLOW_LOOK + 0.1)
        return {}  # learns nothing

    monkeypatch.setattr(_tasks, "look_period", lambda outstanding: 3600.0)
    monkeypatch.setattr(_gate.Gate, "started", slow_look)
    started, go = tmp_path / "started", tmp_path / "go"
    ref = backend.launch(
        TaskSpec(_run_until, args=(str(started), str(go)), resources=Resources({"CPU": 0.5}))
    )
    try:
        assert wait_until(started.exists, WAIT)
        backend.describe_task(ref)  # the sync thread looks, slowly
        time.sleep(3 * _starts.SYNC_PERIOD)
        backend.describe_task(ref)  # does not look again
        assert len(looks) == 1
        assert ref.state is TaskState.PENDING  # the slow look learnt nothing
    finally:
        go.touch()
    assert ref.result(WAIT) == ref.node_id
