"""`WriteCoalescer` on its own: merging, the barrier, call order, and owed errors.

The writer here is a plain function that records batches (the real API server is exercised
in tests/backends/kubernetes/test_coalescing.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor

import pytest

from escher.backends import WriteCoalescer
from escher.core.errors import BackendError, ConflictError


class Recorder:
    """Applies batches to a dict of nodes; fails the nodes in `failing`."""

    def __init__(self) -> None:
        self.nodes: dict[str, dict[str, float]] = {}
        self.batches: list[dict[str, dict[str, float]]] = []
        self.failing: dict[str, BaseException] = {}
        self.delay = 0.0
        self.lock = threading.Lock()

    def __call__(self, batch: dict[str, dict[str, float]]) -> Mapping[str, BaseException]:
        time.sleep(self.delay)
        with self.lock:
            self.batches.append(batch)
            for node, caps in batch.items():
                if node in self.failing:
                    continue
                labels = self.nodes.setdefault(node, {})
                for label, cap in caps.items():
                    if cap > 0:
                        labels[label] = cap
                    else:
                        labels.pop(label, None)
            return {n: e for n, e in self.failing.items() if n in batch}


def test_calls_merge_into_one_write_per_node_and_later_calls_win() -> None:
    rec = Recorder()
    writes = WriteCoalescer(rec, window=60)
    for i in range(10):
        writes.submit(["a", "b"], {f"g{i}": 1})
    writes.submit(["a"], {"g3": 0, "g4": 5})
    assert rec.batches == []  # nothing written yet: the window is long
    writes.flush()
    assert len(rec.batches) == 1 and writes.node_writes == 2 and writes.calls == 11
    assert rec.nodes["a"] == {**{f"g{i}": 1 for i in range(10) if i != 3}, "g4": 5}
    assert rec.nodes["b"] == {f"g{i}": 1 for i in range(10)}
    writes.close()


def test_the_background_thread_writes_after_the_window() -> None:
    rec = Recorder()
    writes = WriteCoalescer(rec, window=0.02)
    writes.submit(["a"], {"x": 1})
    deadline = time.monotonic() + 10
    while not rec.batches and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rec.nodes == {"a": {"x": 1}}
    writes.close()


def test_a_call_still_choosing_its_nodes_holds_the_batch_until_max_delay() -> None:
    """Ten calls whose node reads each take longer than the window still make one batch
    (a slow LIST between them does not split it); `max_delay` still bounds the wait."""
    rec = Recorder()
    writes = WriteCoalescer(rec, window=0.01, max_delay=5.0)
    for i in range(3):
        with writes.calling():
            time.sleep(0.05)  # reading the nodes: 5 windows
            writes.submit(["a", "b"], {f"g{i}": 1})
    writes.flush()
    assert len(rec.batches) == 1 and writes.node_writes == 2
    held = WriteCoalescer(rec, window=0.01, max_delay=0.2)
    held.submit(["c"], {"x": 1})
    start = time.monotonic()
    with held.calling():  # a call that never ends its read: max_delay writes anyway
        while "c" not in rec.nodes and time.monotonic() - start < 10:
            time.sleep(0.01)
    assert rec.nodes["c"] == {"x": 1} and 0.15 <= time.monotonic() - start < 10
    writes.close()
    held.close()


def test_window_zero_writes_before_returning_and_raises_there() -> None:
    rec = Recorder()
    writes = WriteCoalescer(rec, window=0)
    writes.submit(["a"], {"x": 1})
    assert rec.nodes == {"a": {"x": 1}}
    rec.failing["a"] = ConflictError("kept changing")
    with pytest.raises(ConflictError):
        writes.submit(["a"], {"x": 2})
    writes.close()


def test_a_flush_waits_for_a_batch_being_written_by_another_thread() -> None:
    rec = Recorder()
    rec.delay = 0.2
    writes = WriteCoalescer(rec, window=0.001)
    writes.submit(["a"], {"x": 1})
    time.sleep(0.05)  # the background thread is writing it now
    writes.flush()
    assert rec.nodes == {"a": {"x": 1}}
    writes.close()


def test_errors_are_owed_to_the_threads_whose_calls_the_write_carried() -> None:
    rec = Recorder()
    rec.failing["bad"] = ConflictError("node 'bad' kept changing")
    writes = WriteCoalescer(rec, window=60)
    one, two, three = (ThreadPoolExecutor(1) for _ in range(3))
    one.submit(writes.submit, ["bad"], {"x": 1}).result()
    two.submit(writes.submit, ["bad", "ok"], {"y": 1}).result()
    three.submit(writes.submit, ["ok"], {"z": 1}).result()
    writes.flush()  # this thread carried nothing
    with pytest.raises(ConflictError, match=r"writing x on node 'bad'.*1 other call"):
        one.submit(writes.flush).result()
    with pytest.raises(ConflictError, match="writing y on node 'bad'"):
        two.submit(writes.raise_owed).result()
    three.submit(writes.flush).result()
    one.submit(writes.flush).result()  # raised once
    assert rec.nodes == {"ok": {"y": 1, "z": 1}}
    for pool in (one, two, three):
        pool.shutdown()
    writes.close()


def test_a_writer_that_breaks_fails_every_node_with_a_backend_error() -> None:
    def broken(batch: dict[str, dict[str, float]]) -> Mapping[str, BaseException]:
        raise RuntimeError("socket closed")

    writes = WriteCoalescer(broken, window=60)
    writes.submit(["a", "b"], {"x": 1})
    with pytest.raises(BackendError, match="socket closed") as info:
        writes.flush()
    assert "1 more" in "".join(getattr(info.value, "__notes__", []))
    writes.close()


def test_close_writes_what_is_queued() -> None:
    rec = Recorder()
    writes = WriteCoalescer(rec, window=60)
    writes.submit(["a"], {"x": 1})
    writes.close()
    assert rec.nodes == {"a": {"x": 1}}
    writes.submit(["a"], {"x": 2})  # after close: written at once
    assert rec.nodes == {"a": {"x": 2}}


def test_a_barrier_starts_the_write_without_waiting_and_its_ticket_waits_for_it() -> None:
    """A launch takes a ticket and returns; its pod's create waits on it. The write starts
    at once (not after the window), and a ticket covers every call queued before it."""
    rec = Recorder()
    rec.delay = 0.3
    writes = WriteCoalescer(rec, window=60)  # only the barrier can start this write
    writes.submit(["a", "b"], {"x": 1})
    writes.submit(["a"], {"y": 2})
    start = time.monotonic()
    ticket = writes.barrier()
    assert time.monotonic() - start < 0.2  # did not wait for the write
    assert not writes.wait(ticket, timeout=0.01)
    assert writes.wait(ticket, timeout=10)
    assert rec.nodes == {"a": {"x": 1, "y": 2}, "b": {"x": 1}} and len(rec.batches) == 1
    assert writes.wait(writes.barrier(), timeout=0)  # nothing queued: nothing to wait for
    writes.close()


def test_a_ticket_taken_during_a_write_waits_for_that_write_and_not_the_next() -> None:
    rec = Recorder()
    rec.delay = 0.3
    writes = WriteCoalescer(rec, window=60)
    writes.submit(["a"], {"x": 1})
    first = writes.barrier()
    deadline = time.monotonic() + 10
    while writes.pending() and time.monotonic() < deadline:  # the write has begun
        time.sleep(0.005)
    during = writes.barrier()  # nothing queued, but the batch being written is owed
    assert during == first
    writes.submit(["a"], {"x": 2})
    later = writes.barrier()
    assert later == first + 1
    assert writes.wait(during, timeout=10)
    assert writes.wait(later, timeout=10) and rec.nodes == {"a": {"x": 2}}
    writes.close()


def test_a_failed_write_ends_its_ticket_and_is_owed_to_the_caller() -> None:
    rec = Recorder()
    writes = WriteCoalescer(rec, window=60)
    rec.failing["a"] = ConflictError("kept changing")
    writes.submit(["a"], {"x": 1})
    assert writes.wait(writes.barrier(), timeout=10)  # ended, though it failed
    with pytest.raises(ConflictError, match="writing x on node 'a' failed"):
        writes.raise_owed()
    writes.close()
