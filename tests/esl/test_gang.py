"""Gang scheduling: ghost reservations with timeout, rollback and backoff; the native path."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import escher
from escher import ValidationError
from escher.backends.memory import MemoryBackend
from escher.core.errors import UnsupportedError
from escher.esl import Gang, Member

from .conftest import WAIT, ephemeral_labels, nodes, wait_until


def together(barrier: threading.Barrier, hold: float) -> str:
    """A member: fails (BrokenBarrierError) unless every member of its gang runs at once."""
    barrier.wait(WAIT)
    time.sleep(hold)
    return escher.node_id()


@pytest.fixture
def small() -> MemoryBackend:
    with escher.init(MemoryBackend(nodes=nodes(4, cpus=2))) as backend:
        assert isinstance(backend, MemoryBackend)
        yield backend


def gang_of(size: int, hold: float = 0.0, cpus: int = 2) -> list[Member]:
    barrier = threading.Barrier(size)
    return [Member(together, (barrier, hold), resources={"CPU": cpus}) for _ in range(size)]


def test_gang_members_start_together(small: MemoryBackend) -> None:
    with Gang(mode="ephemeral", timeout=1.0) as gang:
        run = gang.run(gang_of(4))
        placed = run.results(WAIT)
        assert sorted(placed) == ["n0", "n1", "n2", "n3"]
    assert wait_until(lambda: small.running_count() == 0)
    assert ephemeral_labels(small) == set()


def test_rollback_releases_partial_reservations_then_retries(small: MemoryBackend) -> None:
    gate = threading.Event()
    small.set_resource("pin", 1, "n0")
    small.set_resource("pin", 1, "n1")
    blockers = [escher.launch(gate.wait, WAIT, resources={"CPU": 2, "pin": 1}) for _ in range(2)]
    assert wait_until(lambda: all(b.started() for b in blockers))
    with Gang(mode="ephemeral", timeout=0.05, backoff=0.01, max_backoff=0.05, seed=3) as gang:
        run = gang.run(gang_of(3))
        assert wait_until(lambda: run.attempts >= 3)
        assert run.state == "reserving" and run.refs == []
        # between attempts nothing is held: the two free nodes become free again
        assert wait_until(lambda: small.get_cluster_state().nodes["n2"].available.get("CPU") == 2)
        gate.set()
        assert sorted(run.results(WAIT)) in (
            ["n0", "n1", "n2"],
            ["n0", "n1", "n3"],
            ["n0", "n2", "n3"],
            ["n1", "n2", "n3"],
        )


def test_competing_gangs_neither_deadlock_nor_starve(small: MemoryBackend) -> None:
    """Gangs of 3 on 4 nodes: two interleaved reservations deadlock without rollback."""
    with Gang(mode="ephemeral", timeout=0.1, backoff=0.02, max_backoff=0.2, seed=7) as gang:
        with ThreadPoolExecutor(4) as pool:
            runs = list(pool.map(lambda _: gang.run(gang_of(3, hold=0.15)), range(6)))
        for run in runs:
            assert len(set(run.results(WAIT))) == 3  # all members, distinct nodes, together
    assert wait_until(lambda: small.running_count() == 0 and small.pending_count() == 0)
    assert ephemeral_labels(small) == set()


def test_gang_gives_up_after_max_attempts(small: MemoryBackend) -> None:
    gate = threading.Event()
    blocker = escher.launch(gate.wait, WAIT, resources={"CPU": 2})  # one node stays busy
    try:
        with Gang(mode="ephemeral", timeout=0.02, backoff=0.01, max_attempts=2) as gang:
            run = gang.run(gang_of(4))  # needs all four nodes at once: fits, but not now
            assert not run.wait_started(WAIT)
            assert run.state == "failed" and run.attempts == 2
            with pytest.raises(escher.EscherError, match="2 attempts"):
                run.results(1)
    finally:
        gate.set()
    assert blocker.result(WAIT) is True
    assert wait_until(lambda: small.running_count() == 0)


def test_gang_that_can_never_fit_fails_without_retrying(small: MemoryBackend) -> None:
    with Gang(mode="ephemeral", timeout=0.02, backoff=0.01) as gang:  # max_attempts=None
        run = gang.run(gang_of(5))  # 5 nodes' worth on 4 nodes: never all at once
        with pytest.raises(escher.UnschedulableError, match="10 CPU in all"):
            run.results(WAIT)
        assert run.state == "failed" and run.attempts == 0


def test_native_gang_on_virtual_clock() -> None:
    backend = MemoryBackend(nodes=nodes(4, cpus=2), virtual_clock=True)
    with Gang(backend, mode="auto") as gang:
        assert gang.mode == "native"
        members = [Member(escher.node_id, resources={"CPU": 2}) for _ in range(4)]
        run = gang.run(members)
        assert sorted(run.results(100)) == ["n0", "n1", "n2", "n3"]
    with pytest.raises(UnsupportedError):
        Gang(backend, mode="ephemeral")
    backend.close()


def test_gang_input_errors(small: MemoryBackend) -> None:
    with Gang(mode="ephemeral") as gang:
        with pytest.raises(ValidationError):
            gang.run([])
        with pytest.raises(ValidationError):
            gang.run(5)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="max_attempts"):
        Gang(mode="ephemeral", max_attempts=0)
    with Gang(mode="ephemeral") as gang, pytest.raises(ValidationError):
        gang.launch(escher.node_id)
    with pytest.raises(ValidationError):
        Gang(mode="sometimes")
