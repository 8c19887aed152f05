"""The backend conformance suite. Every backend runs it as a one-line subclass.

Example (tests/backends/memory/test_memory.py)::

    class TestMemoryConformance(BackendConformance):
        backend_name = "memory"
        backend_options = {"nodes": {"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 2}}}

A backend whose setup needs a fixture (a live cluster) overrides `make_backend` and, if
closing it per test is too costly, `release_backend`. The cluster must have at least three
alive nodes with at least 2 CPUs each. Every test uses fresh labels and deletes them after.
Task bodies are module-level functions so that process-based backends can pickle them;
they coordinate through small files in a temporary directory (every backend tested here runs
its nodes on this machine).

The groups cover the whole public contract of `Backend`: ephemeral resources (single and
bulk), matching and release, bad input, retries (the one retry rule), node loss (needs
`add_spare_node` / `kill_node`, which default to `Backend.add_node` / `remove_node` on
backends with Capability.NODE_MEMBERSHIP), atomic gangs (Capability.ATOMIC_GANG) and
`gang_of`, cancel races, introspection (`tasks`, `describe_task`, `describe`,
`current_node_id`, `pending_elsewhere`), policies (`attach_policy`), garbage collection
(`collect_garbage` never touches a live session), shrinking a label below what is in use,
and fuzzed input at the boundary (`escher.testing.fuzz`: any arguments end in success or
an escher error, never a raw error or a hang, and a refused call changes nothing; each fuzz
test draws `fuzz_examples` examples).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from escher import api
from escher.backends import create_backend
from escher.backends.base import Backend, Capability, GarbageReport, PendingTask
from escher.core.errors import (
    InvalidCapacityError,
    InvalidNodeSpecError,
    InvalidResourceNameError,
    NodeDiedError,
    NotInTaskError,
    ReservedResourceError,
    TaskCancelledError,
    UnknownNodeError,
    UnschedulableError,
    ValidationError,
)
from escher.core.nodespec import NodeSpec
from escher.core.resources import Resources
from escher.core.task import StatusCode, TaskRef, TaskSpec, TaskState

WAIT = 60.0  # every wait in the suite is bounded


class _Policy:
    """A stand-in for an ESL bound to a backend (`Backend.attach_policy`)."""

    closed = False


# --- task bodies (module level: picklable) ---------------------------------------------
def where_am_i() -> str:
    """Return the node id the task runs on."""
    return api.node_id()


def create_here(label: str, capacity: float) -> str:
    """Create `label` on the task's own node and return that node's id."""
    api.set_resource(label, capacity)
    return api.node_id()


def hold(seconds: float) -> tuple[float, float, str]:
    """Sleep; return (start, end, node) wall-clock times."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), api.node_id()


def fail_with(message: str) -> None:
    """Raise ValueError(message)."""
    raise ValueError(message)


def add(a: int, b: int) -> int:
    """Return a + b."""
    return a + b


def count_attempt(path: str) -> int:
    """Append a line to `path`; return how many lines it has now (this attempt's number)."""
    with open(path, "a") as handle:
        handle.write("x\n")
    with open(path) as handle:
        return sum(1 for _ in handle)


def flaky(path: str, failures: int) -> int:
    """Raise ValueError on the first `failures` attempts; then return the attempt number."""
    attempt = count_attempt(path)
    if attempt <= failures:
        raise ValueError(f"attempt {attempt} fails on purpose")
    return attempt


def first_attempt_hangs(path: str, release: str, block: bool) -> tuple[int, str]:
    """Count the attempt; the first one (if `block`) waits for file `release` (<= 60 s)."""
    attempt = count_attempt(path)
    if attempt == 1 and block:
        deadline = time.monotonic() + 60
        while not os.path.exists(release) and time.monotonic() < deadline:
            time.sleep(0.02)
    return attempt, api.node_id()


def node_by_backend() -> str | None:
    """Return what the running task's backend says the current node is."""
    return api.current_backend().current_node_id()


def hold_until(path: str, block: bool) -> str:
    """If `block`, wait for file `path` to exist (<= 60 s); return the node id."""
    deadline = time.monotonic() + 60
    while block and not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)
    return api.node_id()


def mark_ran(directory: str, key: str) -> str:
    """Create file `key` in `directory` (proof that this task's body ran)."""
    with open(os.path.join(directory, key), "a") as handle:
        handle.write("ran\n")
    return key


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT, step: float = 0.05) -> bool:
    """Poll `predicate` until true or `timeout`; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


def run_threads(target: Callable[[int], None], count: int) -> list[BaseException]:
    """Call ``target(i)`` for i in ``range(count)``, each on its own thread, all at once.

    Returns what the calls raised, once every thread has ended (each join is bounded).
    """
    errors: list[BaseException] = []

    def guarded(i: int) -> None:
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    return errors


class BackendConformance:
    """Behaviour every escher backend must show. Subclass it in a test module."""

    backend_name: str = ""
    backend_options: dict[str, Any] = {}
    #: Test name -> why this backend does not conform yet. Such tests must fail (strict
    #: xfail), so a gap that closes shows up and its entry is removed.
    known_gaps: dict[str, str] = {}
    #: Examples each fuzz test draws (lower it for backends where a call is slow).
    fuzz_examples: int = 25

    @pytest.fixture(autouse=True)
    def _known_gap(self, request: pytest.FixtureRequest) -> None:
        reason = self.known_gaps.get(request.node.originalname)
        if reason:
            request.applymarker(pytest.mark.xfail(strict=True, reason=reason))

    # --- hooks ------------------------------------------------------------------------
    def make_backend(self) -> Backend:
        """Build the backend under test (default: from the registry)."""
        return create_backend(self.backend_name, dict(self.backend_options))

    def release_backend(self, backend: Backend) -> None:
        """Undo `make_backend` (default: shut escher down)."""
        api.shutdown()

    def add_spare_node(self, backend: Backend) -> str | None:
        """Add a node with 2 CPUs that a node-loss test may kill; None skips those tests.

        Default: `Backend.add_node` on backends with Capability.NODE_MEMBERSHIP.
        """
        if Capability.NODE_MEMBERSHIP not in backend.capabilities:
            return None
        node_id = f"spare-{uuid.uuid4().hex[:8]}"
        backend.add_node(node_id, {"CPU": 2})
        return node_id

    def kill_node(self, backend: Backend, node_id: str) -> None:
        """Make `node_id` leave the cluster as a failure would (default: `remove_node`)."""
        backend.remove_node(node_id)

    # --- fixtures ---------------------------------------------------------------------
    @pytest.fixture
    def backend(self) -> Iterator[Backend]:
        instance = self.make_backend()
        api.init(instance)
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

    @classmethod
    def view_of(cls, backend: Backend, names: Any) -> dict[str, dict[str, float]]:
        """`ephemeral_view` limited to the labels `names` (nodes without any left out): what
        a call naming only those labels could have changed, unaffected by other tests' nodes
        coming and going on a shared cluster."""
        wanted = {n for n in names if isinstance(n, str)}
        limited = {
            nid: {k: v for k, v in caps.items() if k in wanted}
            for nid, caps in cls.ephemeral_view(backend).items()
        }
        return {nid: caps for nid, caps in limited.items() if caps}

    @staticmethod
    def needs(backend: Backend, capability: Capability) -> None:
        if not backend.supports(capability):
            pytest.skip(f"{backend.name} lacks {capability}")

    @classmethod
    def waiting_gang(cls, backend: Backend, label: Any) -> tuple[str, list[TaskRef]]:
        """A gang of two members that each request a new label no node has yet (so it
        waits), and that label (skips a backend without atomic gangs or Python tasks)."""
        cls.needs(backend, Capability.ATOMIC_GANG)
        cls.needs(backend, Capability.PYTHON_TASKS)
        name = label()
        specs = [TaskSpec(where_am_i, resources=Resources({name: 1})) for _ in range(2)]
        return name, backend.launch_gang(specs)

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

        def submit(_: int) -> None:
            for _ in range(3):
                spec = TaskSpec(hold, (0.2,), resources=Resources({name: 1}), duration=1.0)
                ref = backend.launch(spec)
                with lock:
                    refs.append(ref)

        assert not run_threads(submit, 3)
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

        def worker(i: int) -> None:
            backend.set_resource(names[i], i + 1, nodes[i % len(nodes)])

        assert not run_threads(worker, len(names))
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
            ("grp\n", 1, InvalidResourceNameError),
            ("ok-label", 10**50, InvalidCapacityError),
            ("ok-label", 10**400, InvalidCapacityError),
        ],
    )
    def test_bad_input_raises_and_changes_nothing(
        self, backend: Backend, label_value: str, capacity: Any, error: type[Exception]
    ) -> None:
        node = self.nodes(backend)[0]
        named = (label_value, label_value.strip() if isinstance(label_value, str) else None)
        before = self.view_of(backend, named)
        with pytest.raises(error) as caught:
            backend.set_resource(label_value, capacity, node)
        assert isinstance(caught.value, ValidationError) and str(caught.value)
        assert self.view_of(backend, named) == before

    def test_unknown_node_and_bad_spec(self, backend: Backend, label: Any) -> None:
        names = [label() for _ in range(5)]
        before = self.view_of(backend, names)
        with pytest.raises(UnknownNodeError):
            backend.set_resource(names[0], 1, "no-such-node-xyz")
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(names[1], 1, 42)  # type: ignore[arg-type]
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(names[2], 1, {"CPU": 1}, num_nodes=0)
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(names[3], 1, self.nodes(backend)[0], num_nodes=1)
        with pytest.raises(InvalidNodeSpecError):
            backend.set_resource(names[4], 1, NodeSpec.with_labels({"rack": "3"}), num_nodes=True)
        assert self.view_of(backend, names) == before

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

    # --- bulk ephemeral resources ---------------------------------------------------------
    def test_set_resources_writes_every_label_on_each_node(
        self, backend: Backend, label: Any
    ) -> None:
        a, b = self.nodes(backend)[:2]
        one, two, three = label(), label(), label()
        assert backend.set_resources({one: 1, two: 2}, a) == (a,)
        view = self.ephemeral_view(backend)
        assert view[a][one] == 1 and view[a][two] == 2 and one not in view[b]
        assert backend.set_resources({one: 0, three: 3}, a) == (a,)  # delete and create
        view = self.ephemeral_view(backend)
        assert one not in view[a] and view[a][two] == 2 and view[a][three] == 3

    def test_set_resources_selects_nodes_once(self, backend: Backend, label: Any) -> None:
        a, b, c = self.nodes(backend)[:3]
        marker, other = label(), label()
        backend.set_resource(marker, 1, a)
        backend.set_resource(marker, 1, c)
        # the call deletes its own selector label: the nodes are chosen before it changes
        assert backend.set_resources({marker: 0, other: 2}, {marker: 1}) == tuple(sorted([a, c]))
        view = self.ephemeral_view(backend)
        assert all(marker not in view[n] for n in (a, b, c))
        assert view[a][other] == 2 and view[c][other] == 2 and other not in view[b]

    def test_set_resources_bad_input_changes_nothing(self, backend: Backend, label: Any) -> None:
        node = self.nodes(backend)[0]
        good, negative = label(), label()
        named = (good, negative)
        before = self.view_of(backend, named)
        for bad in ({good: 1, "bad label!": 1}, {good: 1, negative: -1}, {good: 1, "CPU": 1}):
            with pytest.raises(ValidationError):
                backend.set_resources(bad, node)
        with pytest.raises(ValidationError):
            backend.set_resources([(good, 1)], node)  # type: ignore[arg-type]
        with pytest.raises(UnknownNodeError):
            backend.set_resources({good: 1}, "no-such-node-xyz")
        assert self.view_of(backend, named) == before
        assert backend.set_resources({}, node) == ()

    def test_set_resources_concurrently(self, backend: Backend, label: Any) -> None:
        nodes = self.nodes(backend)
        groups = [[label() for _ in range(3)] for _ in range(6)]

        def worker(i: int) -> None:
            backend.set_resources({n: i + 1 for n in groups[i]}, nodes[i % len(nodes)])

        assert not run_threads(worker, len(groups))
        view = self.ephemeral_view(backend)
        for i, names in enumerate(groups):
            assert all(view[nodes[i % len(nodes)]][n] == i + 1 for n in names)

    # --- retries: one rule for every backend -----------------------------------------------
    def test_retry_exceptions_until_success(self, backend: Backend, tmp_path: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        path = str(tmp_path / "attempts")
        ref = backend.launch(TaskSpec(flaky, (path, 2), max_retries=2, retry_exceptions=True))
        assert ref.result(WAIT) == 3
        assert ref.retries == 2 and ref.state is TaskState.FINISHED

    def test_retries_run_out(self, backend: Backend, tmp_path: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        path = str(tmp_path / "attempts")
        ref = backend.launch(TaskSpec(flaky, (path, 5), max_retries=2, retry_exceptions=True))
        with pytest.raises(ValueError, match="attempt 3 fails"):
            ref.result(WAIT)
        assert ref.retries == 2 and ref.state is TaskState.FAILED

    def test_exceptions_are_not_retried_by_default(self, backend: Backend, tmp_path: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        path = str(tmp_path / "attempts")
        ref = backend.launch(TaskSpec(flaky, (path, 1), max_retries=3))
        with pytest.raises(ValueError, match="attempt 1 fails"):
            ref.result(WAIT)
        assert ref.retries == 0
        with open(path) as handle:
            assert len(handle.readlines()) == 1

    # --- node loss ---------------------------------------------------------------------------
    def _doomed_task(
        self, backend: Backend, label: Any, tmp_path: Any, retries: int
    ) -> tuple[Any, str, str, str]:
        self.needs(backend, Capability.PYTHON_TASKS)
        doomed = self.add_spare_node(backend)
        if doomed is None:
            pytest.skip(f"{backend.name}: no spare node to kill")
        name = label()
        backend.set_resource(name, 1, doomed)
        path, release = str(tmp_path / "attempts"), str(tmp_path / "release")
        spec = TaskSpec(
            first_attempt_hangs,
            (path, release, not backend.clock.virtual),
            resources=Resources({name: 1}),
            max_retries=retries,
            duration=5.0,
        )
        ref = backend.launch(spec)
        assert wait_until(ref.started) and ref.node_id == doomed
        # Started is not yet running the body (a pod's process may still be starting): the
        # first attempt must have counted itself, or the retry would count as the first.
        if not backend.clock.virtual:  # (in virtual time the body runs when its time is up)
            assert wait_until(  # (the file exists once opened: wait for the line itself)
                lambda: (os.path.exists(path) and os.path.getsize(path) > 0) or ref.done()
            ), "attempt 1 not run"
        return ref, doomed, name, release

    def test_node_loss_retries_elsewhere(self, backend: Backend, label: Any, tmp_path: Any) -> None:
        ref, doomed, name, release = self._doomed_task(backend, label, tmp_path, retries=1)
        survivor = next(n for n in self.nodes(backend) if n != doomed)
        try:
            self.kill_node(backend, doomed)
            backend.set_resource(name, 1, survivor)
            _, node = ref.result(WAIT)
        finally:
            open(release, "w").close()
        assert node == survivor and ref.retries == 1 and ref.attempts == 2
        assert doomed not in backend.get_cluster_state().nodes

    def test_node_loss_without_retries_fails(
        self, backend: Backend, label: Any, tmp_path: Any
    ) -> None:
        ref, doomed, _, release = self._doomed_task(backend, label, tmp_path, retries=0)
        try:
            self.kill_node(backend, doomed)
            with pytest.raises(NodeDiedError):
                ref.result(WAIT)
        finally:
            open(release, "w").close()
        assert ref.state is TaskState.FAILED and ref.retries == 0

    # --- atomic gangs -------------------------------------------------------------------------
    def test_gang_is_all_or_nothing(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.ATOMIC_GANG)
        self.needs(backend, Capability.PYTHON_TASKS)
        a, b = self.nodes(backend)[:2]
        name = label()
        backend.set_resource(name, 1, a)
        backend.set_resource(name, 1, b)
        request = Resources({name: 1})
        refs = backend.launch_gang([TaskSpec(where_am_i, resources=request) for _ in range(3)])
        assert not any(r.wait(0.5 if not backend.clock.virtual else 0.0) for r in refs)
        assert not any(r.started() for r in refs)
        backend.set_resource(name, 2, a)
        nodes = [r.result(WAIT) for r in refs]
        assert sorted(nodes).count(a) <= 2 and nodes.count(b) <= 1 and len(nodes) == 3

    def test_gang_with_an_infeasible_member_fails_whole(self, backend: Backend) -> None:
        self.needs(backend, Capability.ATOMIC_GANG)
        self.needs(backend, Capability.PYTHON_TASKS)
        specs = [TaskSpec(add, (1, 1)), TaskSpec(add, (1, 2), resources=Resources({"CPU": 1e5}))]
        refs = backend.launch_gang(specs)
        for ref in refs:
            with pytest.raises(UnschedulableError):
                ref.result(WAIT)
            assert not ref.started()

    def test_cancelling_a_gang_member_cancels_the_gang(self, backend: Backend, label: Any) -> None:
        name, refs = self.waiting_gang(backend, label)
        assert refs[0].cancel() is True
        for ref in refs:
            with pytest.raises(TaskCancelledError):
                ref.result(WAIT)
        backend.set_resource(name, 2, self.nodes(backend)[0])
        time.sleep(0.3)
        assert not any(r.started() for r in refs)

    # --- cancel races --------------------------------------------------------------------------
    def test_cancel_races_end_in_exactly_one_outcome(
        self, backend: Backend, label: Any, tmp_path: Any
    ) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[0], label()
        request = Resources({name: 1})
        refs = [
            backend.launch(TaskSpec(mark_ran, (str(tmp_path), f"k{i}"), resources=request))
            for i in range(12)
        ]
        said: dict[str, bool] = {}
        lock = threading.Lock()

        def cancel(i: int) -> None:
            for ref in refs[i::3]:
                outcome = ref.cancel()
                with lock:
                    said[ref.id] = outcome

        backend.set_resource(name, 2, node)  # room opens while the cancels run
        assert not run_threads(cancel, 3)
        for i, ref in enumerate(refs):
            assert ref.wait(WAIT)
            ran = os.path.exists(tmp_path / f"k{i}")
            if ref.state is TaskState.CANCELLED:
                assert said[ref.id] is True and not ran and not ref.started()
            else:
                assert ref.state is TaskState.FINISHED and said[ref.id] is False
                with open(tmp_path / f"k{i}") as handle:
                    assert handle.read() == "ran\n"  # exactly once

    # --- introspection ----------------------------------------------------------------------
    def test_tasks_lists_live_tasks(self, backend: Backend, label: Any) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        name = label()
        ref = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1})))
        assert ref in backend.tasks()
        assert isinstance(backend.describe_task(ref), dict)
        backend.set_resource(name, 1, self.nodes(backend)[0])
        ref.result(WAIT)
        assert wait_until(lambda: ref not in backend.tasks())
        facts = backend.describe()
        assert facts["name"] == backend.name and isinstance(facts["capabilities"], list)

    def test_current_node_id_is_the_tasks_node_and_none_outside(
        self, backend: Backend, label: Any
    ) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        assert backend.current_node_id() is None  # the test's own thread runs no task
        node, name = self.nodes(backend)[1], label()
        backend.set_resource(name, 1, node)
        ref = backend.launch(TaskSpec(node_by_backend, resources=Resources({name: 1})))
        assert ref.result(WAIT) == node

    def test_gang_of_names_every_member_while_not_final(self, backend: Backend, label: Any) -> None:
        name, refs = self.waiting_gang(backend, label)
        alone = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1})))
        assert not any(r.done() for r in [*refs, alone])  # no node has the label yet
        for ref in refs:
            assert set(backend.gang_of(ref)) == set(refs)
        assert backend.gang_of(alone) == ()
        backend.set_resource(name, 3, self.nodes(backend)[0])
        assert len({*(r.result(WAIT) for r in refs), alone.result(WAIT)}) == 1

    def test_pending_elsewhere_never_lists_this_sessions_tasks(
        self, backend: Backend, label: Any
    ) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        name = label()
        ref = backend.launch(TaskSpec(where_am_i, resources=Resources({name: 1}), name="mine"))
        try:
            others = backend.pending_elsewhere()
            assert isinstance(others, list)
            for task in others:
                assert isinstance(task, PendingTask) and isinstance(task.resources, Resources)
                assert task.session_id != backend.session_id and task.id != ref.id
        finally:
            backend.set_resource(name, 1, self.nodes(backend)[0])
        ref.result(WAIT)

    # --- policies --------------------------------------------------------------------------
    def test_attached_policies_are_held_weakly_until_closed(self, backend: Backend) -> None:
        kept, dropped = _Policy(), _Policy()
        backend.attach_policy(kept)
        backend.attach_policy(dropped)
        assert {id(p) for p in backend.policies()} >= {id(kept), id(dropped)}
        kept.closed = True
        assert kept not in backend.policies()
        gone = weakref.ref(dropped)
        del dropped
        gc.collect()
        assert gone() is None  # the backend did not keep it alive

    # --- garbage collection ---------------------------------------------------------------
    def test_collect_garbage_never_touches_a_live_session(
        self, backend: Backend, label: Any, tmp_path: Any
    ) -> None:
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[0], label()
        backend.set_resource(name, 2, node)
        release = str(tmp_path / "release")
        holder = backend.launch(
            TaskSpec(
                hold_until, (release, not backend.clock.virtual), resources=Resources({name: 1})
            )
        )
        try:
            assert wait_until(holder.started)
            before = self.view_of(backend, [name])
            dry = backend.collect_garbage(dry_run=True)
            assert isinstance(dry, GarbageReport) and dry.dry_run is True
            report = backend.collect_garbage()
            assert isinstance(report, GarbageReport) and report.dry_run is False
            for item in (*dry.removed, *report.removed):
                assert name not in item, item  # this session's label stays
            assert self.view_of(backend, [name]) == before == {node: {name: 2}}
            assert not holder.done()
        finally:
            open(release, "w").close()
        assert holder.result(WAIT) == node

    # --- shrinking a label below what is in use ------------------------------------------
    def test_shrink_below_use_keeps_running_tasks_and_blocks_new_ones(
        self, backend: Backend, label: Any, tmp_path: Any
    ) -> None:
        """Running tasks keep what they hold; total is the new capacity, available is
        max(0, total - in use); nothing new gets the label until use drops below it."""
        self.needs(backend, Capability.PYTHON_TASKS)
        node, name = self.nodes(backend)[0], label()
        virtual = backend.clock.virtual
        backend.set_resource(name, 2, node)
        request = Resources({name: 1})
        releases = [str(tmp_path / f"release-{i}") for i in range(2)]
        holders = [
            backend.launch(
                TaskSpec(
                    hold_until,
                    (releases[i], not virtual),
                    resources=request,
                    duration=10.0 * (i + 1),
                )
            )
            for i in range(2)
        ]
        try:
            assert wait_until(lambda: all(h.started() for h in holders))
            assert backend.set_resource(name, 1, node) == (node,)  # accepted, not refused
            here = backend.get_cluster_state().node(node)
            assert here.total[name] == 1 and here.available.get(name, 0.0) == 0
            late = backend.launch(TaskSpec(where_am_i, resources=request, duration=1.0))
            assert not late.wait(0.5 if not virtual else 0.0)
            open(releases[0], "w").close()
            assert holders[0].result(WAIT) == node
            if not virtual:
                time.sleep(0.5)  # room for a wrong placement to show
            # in use 1 = the new capacity: still nothing new
            assert not late.started() and late.status.code is not StatusCode.SCHEDULED
            here = backend.get_cluster_state().node(node)
            assert here.total[name] == 1 and here.available.get(name, 0.0) == 0
        finally:
            for path in releases:
                open(path, "w").close()
        assert holders[1].result(WAIT) == node
        assert late.result(WAIT) == node
        assert wait_until(
            lambda: backend.get_cluster_state().node(node).available.get(name, 0.0) == 1
        )

    # --- fuzzed input at the boundary ------------------------------------------------------
    def _fuzz(self, test: Callable[..., None], **strategies: Any) -> None:
        from hypothesis import HealthCheck, given, settings

        run = settings(
            max_examples=self.fuzz_examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )(given(**strategies)(test))
        run()

    def _forget_labels(self, backend: Backend, made: set[str]) -> None:
        for node_id in backend.get_cluster_state().nodes:
            with contextlib.suppress(Exception):
                backend.set_resources(dict.fromkeys(made, 0), node_id)

    def test_fuzz_set_resource(self, backend: Backend) -> None:
        from escher.testing import fuzz

        made: set[str] = set()

        def check(name: Any, capacity: Any, spec: Any, num: Any) -> None:
            outcome = fuzz.check_refused_or_done(
                backend, lambda: backend.set_resource(name, capacity, spec, num_nodes=num)
            )
            if outcome.error is None:
                made.add(name)
                assert isinstance(outcome.value, tuple)

        try:
            self._fuzz(
                check,
                name=fuzz.labels(),
                capacity=fuzz.capacities(),
                spec=fuzz.node_specs(self.nodes(backend)),
                num=fuzz.junk(),
            )
        finally:
            self._forget_labels(backend, made)

    def test_fuzz_set_resources(self, backend: Backend) -> None:
        from hypothesis import strategies as st

        from escher.testing import fuzz

        made: set[str] = set()

        def check(capacities: Any, spec: Any, num: Any) -> None:
            outcome = fuzz.check_refused_or_done(
                backend, lambda: backend.set_resources(capacities, spec, num_nodes=num)
            )
            if outcome.error is None:
                made.update(capacities)

        try:
            self._fuzz(
                check,
                capacities=st.one_of(
                    st.dictionaries(fuzz.labels(hashable=True), fuzz.capacities(), max_size=3),
                    fuzz.junk(),
                ),
                spec=fuzz.node_specs(self.nodes(backend)),
                num=st.one_of(st.none(), st.integers(-1, 3), fuzz.junk()),
            )
        finally:
            self._forget_labels(backend, made)

    def test_fuzz_launch(self, backend: Backend) -> None:
        from hypothesis import strategies as st

        from escher.testing import fuzz

        self.needs(backend, Capability.PYTHON_TASKS)
        launched: list[Any] = []

        def check(fn: Any, resources: Any, name: Any, retries: Any, extra: Any) -> None:
            outcome = fuzz.check_refused_or_done(
                backend,
                lambda: api.launch(
                    fn, 1, 2, resources=resources, name=name, max_retries=retries, **extra
                ),
            )
            if outcome.error is None:
                launched.append(outcome.value)
                outcome.value.cancel()

        self._fuzz(
            check,
            fn=st.one_of(st.just(add), fuzz.junk()),
            resources=fuzz.requests(),
            name=st.one_of(st.none(), st.just("fuzzed"), fuzz.junk()),
            retries=st.one_of(st.integers(0, 1), fuzz.junk()),
            extra=st.dictionaries(
                st.sampled_from(["resource", "b", "names", "c"]), st.integers(0, 2), max_size=1
            ),
        )
        for ref in launched:  # every launch that was taken ends (or was cancelled)
            if ref.started():
                assert ref.wait(WAIT)

    def test_fuzz_get_and_cancel(self, backend: Backend) -> None:
        from hypothesis import strategies as st

        from escher.testing import fuzz

        self.needs(backend, Capability.PYTHON_TASKS)
        done = backend.launch(TaskSpec(add, (1, 2)))
        assert done.wait(WAIT)

        def check(refs: Any, timeout: Any) -> None:
            for value in (refs, [done, refs]):

                def call(value: Any = value) -> Any:
                    return api.get(value, timeout=timeout)

                outcome = fuzz.call_bounded(call)
                assert outcome.error is not None or isinstance(outcome.value, list)
            fuzz.call_bounded(lambda: api.cancel(refs))

        self._fuzz(
            check,
            refs=st.one_of(fuzz.junk(), st.lists(fuzz.junk(), max_size=2)),
            timeout=fuzz.timeouts(),
        )
