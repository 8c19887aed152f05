"""Fixtures and helpers for the ESL tests: a fresh in-memory backend, a placement tracker."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest

import escher
from escher.backends.memory import MemoryBackend

WAIT = 30.0  # every wait is bounded


def nodes(count: int, cpus: int = 4) -> dict[str, dict[str, float]]:
    """`count` nodes n0..n{count-1} with `cpus` CPUs each."""
    return {f"n{i}": {"CPU": cpus} for i in range(count)}


@pytest.fixture
def backend() -> Iterator[MemoryBackend]:
    """Four 4-CPU nodes, real time, installed as the active backend."""
    with escher.init(MemoryBackend(nodes=nodes(4))) as active:
        assert isinstance(active, MemoryBackend)
        yield active


@pytest.fixture
def vbackend() -> Iterator[MemoryBackend]:
    """Four 4-CPU nodes on a virtual clock, installed as the active backend."""
    with escher.init(MemoryBackend(nodes=nodes(4), virtual_clock=True)) as active:
        assert isinstance(active, MemoryBackend)
        yield active


def ephemeral_labels(backend: MemoryBackend) -> set[str]:
    """Every ephemeral label on any node."""
    return {label for n in backend.get_cluster_state().nodes.values() for label in n.ephemeral}


def wait_until(predicate: Callable[[], bool], timeout: float = WAIT) -> bool:
    """Poll `predicate` until true or `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


class Tracker:
    """Tasks report start/end per (group, node); records the peak concurrency.

    Task bodies block on `gate` (bounded) so tests decide when they end, not the clock.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: Counter[tuple[str, str]] = Counter()
        self.peak: Counter[tuple[str, str]] = Counter()
        self.node_now: Counter[str] = Counter()
        self.seen: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.overlaps: list[tuple[str, str, str]] = []

    def body(self, group: str, exclusive_with: str | None = None) -> str:
        node = escher.node_id()
        with self.lock:
            self.now[(group, node)] += 1
            self.peak[(group, node)] = max(self.peak[(group, node)], self.now[(group, node)])
            if exclusive_with is not None and self.now[(exclusive_with, node)]:
                self.overlaps.append((group, exclusive_with, node))
            self.seen.append((group, node))
        self.gate.wait(WAIT)
        with self.lock:
            self.now[(group, node)] -= 1
        return node

    def running(self) -> int:
        with self.lock:
            return sum(self.now.values())
