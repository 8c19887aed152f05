"""The backend conformance suite. Every backend runs it as a one-line subclass.

Example (tests/backends/memory/test_memory.py)::

    class TestMemoryConformance(BackendConformance):
        backend_name = "memory"
        backend_options = {"nodes": {"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 2}}}

A backend whose setup needs a fixture (a live cluster) overrides `make_backend` and, if
closing it per test is too costly, `release_backend`. The cluster must have at least three
alive nodes with at least 2 CPUs each. Every test uses fresh labels and deletes them after.
Task bodies are module-level functions so that process-based backends can pickle them.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import escher
from escher.backends._registry import create_backend
from escher.backends.base import Backend, Capability
from escher.core.errors import (
    InvalidCapacityError,
    InvalidNodeSpecError,
    InvalidResourceNameError,
    NotInTaskError,
    ReservedResourceError,
    TaskCancelledError,
    UnknownNodeError,
    UnschedulableError,
    ValidationError,
)
from escher.core.resources import Resources
from escher.core.task import StatusCode, TaskSpec, TaskState

WAIT = 60.0  # every wait in the suite is bounded


# --- task bodies (module level: picklable) ---------------------------------------------
def where_am_i() -> str:
    """Return the node id the task runs on."""
    return escher.node_id()


def create_here(label: str, capacity: float) -> str:
    """Create `label` on the task's own node and return that node's id."""
    escher.set_resource(label, capacity)
    return escher.node_id()


def hold(seconds: float) -> tuple[float, float, str]:
    """Sleep; return (start, end, node) wall-clock times."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), escher.node_id()


def fail_with(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)


def add(a: int, b: int) -> int:
    """Return a + b."""
    return a + b


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, step: float = 0.05) -> bool:
    """Poll `predicate` until true or `timeout`; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


class BackendConformance:
    """Behaviour every escher backend must show. Subclass it in a test module."""

    backend_name: str = ""
    backend_options: dict[str, Any] = {}

    # --- hooks ------------------------------------------------------------------------
    def make_backend(self) -> Backend:
        """Build the backend under test (default: from the registry)."""
        return create_backend(self.backend_name, dict(self.backend_options))

    def release_backend(self, backend: Backend) -> None:
        """Undo `make_backend` (default: shut escher down)."""
        escher.shutdown()

    # --- fixtures ---------------------------------------------------------------------
    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        instance = self.make_backend()
        escher.init(instance)
        try:
            yield instance
        finally:
            self.release_backend(instance)

    @pytest.fixture
    def label(self, backend: Backend) -> Iterator[Callable[[], str]]:
        """A factory of fresh labels, each deleted everywhere after the test."""
        made: list[str] = []

        def fresh() -> str:
            name = f"conf-{uuid.uuid4().hex[:10]}"
            made.append(name)
            return name

        yield fresh
        for name in made:
            for node_id in backend.get_cluster_state().nodes:
                with contextlib.suppress(Exception):
                    backend.set_resource(name, 0, node_id)

    @staticmethod
    def nodes(backend: Backend) -> list[str]:
        state = backend.get_cluster_state()
        ids = sorted(n for n, node in state.nodes.items() if node.total.get("CPU", 0) >= 2)
        assert len(ids) >= 3, "the conformance suite needs 3 nodes with >= 2 CPUs"
        return ids

    @staticmethod
    def ephemeral_view(backend: Backend) -> dict[str, dict[str, float]]:
        state = backend.get_cluster_state()
        return {
            nid: {k: v for k, v in n.total.items() if k in n.ephemeral}
            for nid, n in state.nodes.items()
        }

    @staticmethod
    def needs(backend: Backend, capability: Capability) -> None:
        if capability not in backend.capabilities:
            pytest.skip(f"{backend.name} lacks {capability}")

    # --- ephemeral resources ------------------------------------------------------------
    def test_create_resize_delete_by_node_id(self, backend: Backend, label: Any) -> None:
        node = self.nodes(backend)[0]
        name = label()
        assert backend.set_resource(name, 3, node) == (node,)
        state = backend.get_cluster_state().node(node)
        assert state.total[name] == 3 and state.available[name] == 3
        assert name in state.ephemeral
        backend.set_resource(name, 5, node)
        assert backend.get_cluster_state().node(node).total[name] == 5
        backend.set_resource(name, 1, node)
        assert backend.get_cluster_state().node(node).total[name] == 1
        backend.set_resource(name, 0, node)
        assert name not in backend.get_cluster_state().node(node).total
        backend.set_resource(name, 0, node)  # deleting twice is fine
        assert name not in backend.get_cluster_state().node(node).total

    def test_node_spec_vector_selects_nodes_with_available(
        self, backend: Backend, label: Any
    ) -> None:
        a, b, c = self.nodes(backend)[:3]
        marker, target = label(), label()
        backend.set_resource(marker, 2, a)
        backend.set_resource(marker, 2, c)
        assert backend.set_resource(target, 4, {marker: 1}) == tuple(sorted([a, c]))
        state = backend.get_cluster_state()
        assert state.node(a).total[target] == 4 and state.node(c).total[target] == 4
        assert target not in state.node(b).total
        capped = label()
        assert len(backend.set_resource(capped, 1, {marker: 1}, num_nodes=1)) == 1
        assert backend.set_resource(label(), 1, {marker: 3}) == ()  # nobody has 3 free

    def test_node_spec_none_outside_a_task_is_an_error(self, backend: Backend, label: Any) -> None:
        with pytest.raises(NotInTaskError):
            backend.set_resource(label(), 1)

    def test_task_creates_resource_on_its_own_node(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        name = label()
        ref = backend.launch(TaskSpec(create_here, (name, 2)))
        node = ref.result(WAIT)
        assert node == ref.node_id
        assert backend.get_cluster_state().node(node).total[name] == 2

    # --- matching and release -----------------------------------------------------------
    def test_task_lands_where_its_label_is(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        for node in self.nodes(backend)[:3]:
            name = label()
            backend.set_resource(name, 1, node)
            ref = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1})))
            assert ref.result(WAIT) == node

    def test_completion_releases_resources(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[1], label()
        backend.set_resource(name, 1, node)
        request = Resources({name: 1})
        refs = [backend.launch(TaskSpec(add, (i, 1), resources=request)) for i in range(3)]
        assert [r.result(WAIT) for r in refs] == [1, 2, 3]
        assert wait_until(lambda: backend.get_cluster_state().node(node).available.get(name) == 1)

    def test_waiting_task_starts_when_resource_appears(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[2], label()
        ref = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1})))
        assert not ref.wait(0.5 if not backend.clock.virtual else 0.0)
        assert ref.status.code in (StatusCode.UNSCHEDULABLE, StatusCode.PENDING)
        backend.set_resource(name, 1, node)
        assert ref.result(WAIT) == node

    def test_no_overcommit_under_concurrency(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[0], label()
        backend.set_resource(name, 2, node)
        refs: list[Any] = []
        lock = threading.Lock()

        def submit() -> None:
            for _ in range(3):
                spec = TaskSpec(hold, (0.2,), resources=Resources({name: 1}), duration=1.0)
                ref = backend.launch(spec)
                with lock:
                    refs.append(ref)

        threads = [threading.Thread(target=submit) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        spans = [r.result(WAIT) for r in refs]
        assert len(spans) == 9 and {s[2] for s in spans} == {node}
        if not backend.clock.virtual:
            events = sorted(
                [(s[0], 1) for s in spans] + [(s[1], -1) for s in spans], key=lambda e: (e[0], e[1])
            )
            running = peak = 0
            for _, delta in events:
                running += delta
                peak = max(peak, running)
            assert peak <= 2

    def test_concurrent_set_resource(self, backend: Backend, label: Any) -> None:
        nodes = self.nodes(backend)
        names = [label() for _ in range(12)]
        errors: list[BaseException] = []

        def worker(i: int) -> None:
            try:
                backend.set_resource(names[i], i + 1, nodes[i % len(nodes)])
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(names))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not errors
        view = self.ephemeral_view(backend)
        for i, name in enumerate(names):
            assert view[nodes[i % len(nodes)]][name] == i + 1

    # --- failures -----------------------------------------------------------------------
    @pytest.mark.parametrize(
        ("label_value", "capacity", "error"),
        [
            ("bad label!", 1, InvalidResourceNameError),
            ("", 1, InvalidResourceNameError),
            ("x" * 64, 1, InvalidResourceNameError),
            ("CPU", 1, ReservedResourceError),
            ("ok-label", -1, InvalidCapacityError),
            ("ok-label", math.nan, InvalidCapacityError),
            ("ok-label", math.inf, InvalidCapacityError),
            ("ok-label", "3", InvalidCapacityError),
            ("ok-label", True, InvalidCapacityError),
        ],
    )
    def test_bad_input_raises_and_changes_nothing(
        self, backend: Backend, label_value: str, capacity: Any, error: type[Exception]
    ) -> None:
        node = self.nodes(backend)[0]
        before = self.ephemeral_view(backend)
        with pytest.raises(error) as caught:
            backend.set_resource(label_value, capacity, node)
        assert isinstance(caught.value, ValidationError) and str(caught.value)
        assert self.ephemeral_view(backend) == before

    def test_unknown_node_and_bad_spec(self, backend: Backend, label: Any) -> None:
        before = self.ephemeral_view(backend)
        with pytest.raises(UnknownNodeError):
            backend.set_resource(label(), 1, "no-such-node-xyz")
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(label(), 1, 42)  # type: ignore[arg-type]
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(label(), 1, {"CPU": 1}, num_nodes=0)
        assert self.ephemeral_view(backend) == before

    def test_fractional_capacity(self, backend: Backend, label: Any) -> None:
        node, name = self.nodes(backend)[0], label()
        if Capability.FRACTIONAL in backend.capabilities:
            backend.set_resource(name, 0.5, node)
            assert backend.get_cluster_state().node(node).total[name] == 0.5
        else:
            with pytest.raises(InvalidCapacityError):
                backend.set_resource(name, 0.5, node)
            assert name not in backend.get_cluster_state().node(node).total

    def test_infeasible_request_fails_fast(self, backend: Backend) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        ref = backend.launch(TaskSpec(add, (1, 2), resources=Resources({"CPU": 100_000})))
        with pytest.raises(UnschedulableError):
            ref.result(WAIT)
        assert ref.status.code is StatusCode.INFEASIBLE
        assert ref.state is TaskState.FAILED

    def test_task_exception_reaches_caller(self, backend: Backend) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        ref = backend.launch(TaskSpec(fail_with, ("boom",)))
        with pytest.raises(ValueError, match="boom"):
            ref.result(WAIT)
        assert ref.state is TaskState.FAILED

    def test_cancel_pending_task(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[0], label()
        ref = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1})))
        assert ref.cancel() is True
        with pytest.raises(TaskCancelledError):
            ref.result(WAIT)
        backend.set_resource(name, 1, node)
        time.sleep(0.3)
        assert ref.state is TaskState.CANCELLED and not ref.started()
