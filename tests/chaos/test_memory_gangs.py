"""Gangs under load on the in-memory backend: more ghosts than task threads, gangs that can no
longer fit, node loss under load, and late first runs after a node left."""

from __future__ import annotations

import threading
import time

import pytest

import escher
from escher.backends.memory import MemoryBackend
from escher.core.errors import UnschedulableError
from escher.core.task import StatusCode, TaskSpec, TaskState
from escher.esl import Gang, Member

pytestmark = pytest.mark.chaos

BOUND = 600.0  # generous: the run must simply finish, however slow the machine


def noop() -> str:
    return escher.node_id()


def occupy(ready: threading.Semaphore, gate: threading.Event) -> None:
    """Hold a task thread (no resources) until `gate` opens."""
    ready.release()
    gate.wait(60)


@pytest.mark.timeout(900)
def test_more_ghosts_than_task_threads_do_not_deadlock() -> None:
    """64 gangs x 4 members x 1 CPU on 32 nodes x 4 CPUs with the default 64 task threads:
    the cluster holds 128 ghosts at once, twice the threads. The threads are kept busy while
    the gangs are launched, so every ghost is placed before any runs; then the first 64
    ghosts to get a thread hold them all. With members launched as tasks of their own, the
    committed gangs' members waited for a thread forever (0 of 64 gangs in 90 s); ghosts
    that run their members need no other thread."""
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 4} for i in range(32)})
    assert backend._max_workers == 64
    ready, gate = threading.Semaphore(0), threading.Event()
    try:
        blockers = [backend.launch(TaskSpec(occupy, (ready, gate))) for _ in range(64)]
        assert all(ready.acquire(timeout=60) for _ in blockers)
        with Gang(backend, mode="ephemeral", seed=11, timeout=30) as gang:
            runs = [gang.run([Member(noop, resources={"CPU": 1})] * 4) for _ in range(64)]
            assert backend.pending_count() == 128  # 128 ghosts placed, 128 waiting
            gate.set()
            deadline = time.monotonic() + BOUND
            for run in runs:
                values = run.results(max(1.0, deadline - time.monotonic()))
                assert len(values) == 4 and all(v.startswith("n") for v in values)
        assert wait_until_idle(backend)
    finally:
        gate.set()
        backend.close()


def wait_until_idle(backend: MemoryBackend) -> bool:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if backend.running_count() == 0 and backend.pending_count() == 0:
            return True
        time.sleep(0.02)
    return False


def test_a_gang_that_never_fits_fails_at_once_natively_and_with_ghosts() -> None:
    backend = MemoryBackend(nodes={"a": {"CPU": 2}, "b": {"CPU": 2}})
    try:
        too_big = [TaskSpec(noop, resources={"CPU": 2}) for _ in range(3)]  # 6 CPUs on 4
        refs = backend.launch_gang(too_big)
        for ref in refs:
            with pytest.raises(UnschedulableError, match="6 CPU in all"):
                ref.result(30)
            assert ref.status.code is StatusCode.INFEASIBLE and not ref.started()
        with Gang(backend, mode="ephemeral") as gang:  # max_attempts=None: still ends
            run = gang.run([Member(noop, resources={"CPU": 2})] * 3)
            with pytest.raises(UnschedulableError, match="6 CPU in all"):
                run.results(30)
            assert run.state == "failed" and run.attempts == 0  # none was tried
    finally:
        backend.close()


def test_a_waiting_gang_fails_when_the_node_it_needs_leaves() -> None:
    backend = MemoryBackend(nodes={"a": {"CPU": 2}, "big": {"CPU": 8}})
    gate = threading.Event()
    try:
        blocker = backend.launch(TaskSpec(gate.wait, (30,), resources={"CPU": 8}))
        assert blocker.wait(0) is False and blocker.started()
        refs = backend.launch_gang([TaskSpec(noop, resources={"CPU": 4})] * 2)
        time.sleep(0.1)
        assert not any(r.started() for r in refs)
        assert "waits" in str(refs[0].status) and refs[0].status.code is StatusCode.UNSCHEDULABLE
        backend.remove_node("big")  # no live node has 4 CPUs any more
        for ref in refs:
            with pytest.raises(UnschedulableError, match="no live node has"):
                ref.result(30)
    finally:
        gate.set()
        backend.close()


def test_ephemeral_gang_fails_when_nodes_leave_during_its_retries() -> None:
    backend = MemoryBackend(nodes={"a": {"CPU": 2}, "b": {"CPU": 2}, "c": {"CPU": 2}})
    gate = threading.Event()
    try:
        blocker = backend.launch(TaskSpec(gate.wait, (30,), resources={"CPU": 2}))
        assert blocker.started()
        with Gang(backend, mode="ephemeral", timeout=0.05, backoff=0.01, max_backoff=0.05) as gang:
            run = gang.run([Member(noop, resources={"CPU": 2})] * 3)  # needs all three
            deadline = time.monotonic() + 30
            while run.attempts < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert run.state == "reserving" and "attempt" in run.reason
            backend.remove_node("c")
            with pytest.raises(UnschedulableError, match="6 CPU in all; the live nodes have 4"):
                run.results(30)
    finally:
        gate.set()
        backend.close()


def blocking_attempt(starts: list[threading.Event], releases: list[threading.Event]) -> str:
    """Attempt k (0-based) signals starts[k], then waits for releases[k] (bounded)."""
    node = escher.node_id()
    k = sum(1 for e in starts if e.is_set())
    starts[k].set()
    releases[k].wait(30)
    return node


def test_a_late_first_run_is_ignored_and_releases_nothing_twice() -> None:
    """At-least-once under node loss: the retried task's first body goes on after its node
    left; when it returns, its value is dropped and the retry keeps what it holds."""
    backend = MemoryBackend(nodes={"a": {"CPU": 2}, "doomed": {"CPU": 2}})
    starts = [threading.Event(), threading.Event()]
    releases = [threading.Event(), threading.Event()]
    try:
        backend.set_resource("here", 1, "doomed")
        ref = backend.launch(
            TaskSpec(
                blocking_attempt, (starts, releases), resources={"CPU": 2, "here": 1}, max_retries=1
            )
        )
        assert starts[0].wait(30) and ref.node_id == "doomed"
        backend.remove_node("doomed")
        backend.set_resource("here", 1, "a")
        assert starts[1].wait(30) and ref.node_id == "a" and ref.attempts == 2
        releases[0].set()  # the first run returns "doomed" now, its node long gone
        waiting = backend.launch(TaskSpec(noop, resources={"CPU": 1}))
        assert not waiting.wait(0.3)  # the retry still holds both CPUs of "a"
        assert backend.get_cluster_state().nodes["a"].available.get("CPU", 0) == 0
        assert not ref.done()
        releases[1].set()
        assert ref.result(30) == "a" and ref.state is TaskState.FINISHED
        assert waiting.result(30) == "a"
        assert backend.running_count() == 0
        assert backend.get_cluster_state().nodes["a"].available.get("CPU") == 2
    finally:
        for event in releases:
            event.set()
        backend.close()
