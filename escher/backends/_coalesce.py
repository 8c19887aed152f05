"""Write coalescing for backends that pay per label write: write-behind, flushed on demand.

`set_resource(s)` calls queue their per-node changes here and return; changes to the same
node merge (later calls win per label), so the writes of several calls and several ESLs
made within a short window become one write per node. A batch is written when the backend
needs it (`flush`, a barrier: everything queued before it has taken effect when it
returns), or by a background thread once no call added to it for `window`
seconds (or it is `max_delay` old); a call still choosing its nodes (`calling`) counts as
adding, so a slow node read between two calls does not split their batch. One flush runs
at a time, so writes to a node are applied in call order. A caller that needs the writes
only later (a pod create, not the launch that queues it) takes a `barrier` ticket, which
starts the write at once without waiting, and `wait`s for it where it depends on it. A
read completes what it read with `queued` (the changes not known to be written yet)
instead of writing them first.

A node write that fails changed nothing on that node (the backend's write is all or
nothing per node); its error is owed to every thread whose calls it carried and raised by
that thread's next call into the backend (`raise_owed`), naming the calls it carried.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from escher.core.errors import BackendError, EscherError

log = logging.getLogger("escher.backends")

#: Writes a batch (node -> label -> capacity) and returns the nodes whose write failed.
BatchWriter = Callable[[dict[str, dict[str, float]]], Mapping[str, BaseException]]


@dataclass
class _NodeBatch:
    """The changes queued for one node, and who asked for them."""

    capacities: dict[str, float] = field(default_factory=dict)
    #: Calling thread -> the labels its calls put in this batch.
    callers: dict[threading.Thread, set[str]] = field(default_factory=dict)
    calls: int = 0


class WriteCoalescer:
    """Queues label writes per node and writes each node once per flush.

    Args:
        write: Writes a batch, nodes concurrently; returns {node: error} for the nodes whose
            write failed (changing nothing there).
        window: Seconds a batch may wait for more calls before the background thread
            writes it; 0 turns coalescing off (`submit` writes at once, errors raise there).
        max_delay: A batch is written at the latest this many seconds after its first call.
        name: Names the background thread.
    """

    def __init__(
        self,
        write: BatchWriter,
        *,
        window: float,
        max_delay: float | None = None,
        name: str = "escher-coalesce",
    ) -> None:
        self._write = write
        self.window = float(window)
        self.max_delay = float(max_delay if max_delay is not None else 10 * window)
        self._name = name
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._flush_lock = threading.Lock()
        self._pending: dict[str, _NodeBatch] = {}
        self._first = self._last = 0.0
        #: Calls between `calling()` and their end (they may still add to the batch).
        self._calling = 0
        #: Errors owed to threads (forgotten with a thread that ended; they were logged).
        self._owed: weakref.WeakKeyDictionary[threading.Thread, list[EscherError]] = (
            weakref.WeakKeyDictionary()
        )
        self._thread: threading.Thread | None = None
        self._closed = False
        #: Batches taken for writing, and batches whose write ended (in order: one flush at
        #: a time); a `barrier` ticket is the batch number a caller waits for.
        self._taken = self._written = 0
        self._written_cond = threading.Condition(self._lock)
        #: A barrier asked for the queued batch: the background thread writes it at once.
        self._urgent = False
        #: The batch being written (node -> label -> capacity), for `queued`.
        self._writing: dict[str, dict[str, float]] = {}
        #: Calls queued and node writes sent, for tests and monitoring.
        self.calls = 0
        self.node_writes = 0

    @property
    def enabled(self) -> bool:
        """False when `window` is 0: every call is written before it returns."""
        return self.window > 0

    # --- queueing ---------------------------------------------------------------------------
    def submit(self, nodes: list[str], capacities: Mapping[str, float]) -> None:
        """Queue `capacities` for each of `nodes` (already validated by the backend).

        With coalescing off, write them now and raise the first failure.
        """
        if not self.enabled or self._closed:
            errors = self._write({node: dict(capacities) for node in nodes})
            with self._lock:
                self.node_writes += len(nodes)
            first = next((errors[n] for n in nodes if n in errors), None)
            if first is not None:
                raise first
            return
        me = threading.current_thread()
        with self._lock:
            now = time.monotonic()
            if not self._pending:
                self._first = now
            self._last = now
            self.calls += 1
            for node in nodes:
                batch = self._pending.setdefault(node, _NodeBatch())
                batch.capacities.update(capacities)
                batch.callers.setdefault(me, set()).update(capacities)
                batch.calls += 1
            self._ensure_thread()
            self._wake.notify()

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """Around a call that may `submit`: while it runs (e.g. reads the nodes it will
        write), the background thread holds the batch; its window restarts when it ends."""
        with self._lock:
            self._calling += 1
        try:
            yield
        finally:
            with self._lock:
                self._calling -= 1
                self._last = max(self._last, time.monotonic())
                self._wake.notify()

    def pending_labels(self) -> set[str]:
        """The labels of every queued (not yet written) change."""
        with self._lock:
            return {label for batch in self._pending.values() for label in batch.capacities}

    def queued(self) -> dict[str, dict[str, float]]:
        """node -> label -> capacity of every change not known to be written yet (the batch
        being written, then what is queued after it: later calls win). Taken before a read
        of the nodes, it completes that read with what earlier calls asked for."""
        with self._lock:
            out = {node: dict(caps) for node, caps in self._writing.items()}
            for node, batch in self._pending.items():
                out.setdefault(node, {}).update(batch.capacities)
            return out

    def pending(self) -> bool:
        """True while some change is queued and not yet being written."""
        with self._lock:
            return bool(self._pending)

    # --- flushing ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Barrier: every change queued before this call has been written (or has failed)
        when it returns; then raise what is owed to the calling thread."""
        if self._pending or self._flush_lock.locked():
            self._flush_once()
        self.raise_owed()

    def barrier(self) -> int:
        """Start writing what is queued now, without waiting for it; returns a ticket that
        `wait` takes: everything queued before this call has taken effect once it returns.
        """
        with self._lock:
            if not self._pending:
                return self._taken  # nothing queued: at most a batch already being written
            self._urgent = True
            self._ensure_thread()
            self._wake.notify()
            return self._taken + 1  # the queued batch is the next one taken

    def wait(self, ticket: int, timeout: float | None = None) -> bool:
        """Wait until the writes of `ticket` (from `barrier`) ended, written or failed
        (failures are owed to the threads whose calls they carried); False on timeout."""
        with self._lock:
            return self._written_cond.wait_for(lambda: self._written >= ticket, timeout)

    def raise_owed(self) -> None:
        """Raise the errors of failed writes that carried this thread's calls (once)."""
        if not self._owed:
            return
        with self._lock:
            owed = self._owed.pop(threading.current_thread(), [])
        if owed:
            first = owed[0]
            if len(owed) > 1:
                first.add_note(f"{len(owed) - 1} more queued write(s) of this thread failed too.")
            raise first

    def _flush_once(self) -> None:
        with self._flush_lock:  # one flush at a time: a node's writes land in call order
            with self._lock:
                batches, self._pending = self._pending, {}
                if not batches:
                    return
                self._urgent = False
                self._taken += 1
                number = self._taken
                self._writing = {n: dict(b.capacities) for n, b in batches.items()}
            errors: dict[str, BaseException] = {}
            try:
                errors = dict(self._write({n: dict(c) for n, c in self._writing.items()}))
            except Exception as broke:  # the writer itself broke: every node failed
                errors = dict.fromkeys(batches, broke)
            finally:
                with self._lock:
                    self.node_writes += len(batches)
                    for node, error in errors.items():
                        self._owe(node, batches[node], error)
                    self._written = number
                    self._writing = {}
                    self._written_cond.notify_all()

    def _owe(self, node: str, batch: _NodeBatch, exc: BaseException) -> None:
        """Record a failed node write for every thread whose calls it carried."""
        others = batch.calls - 1
        for thread, labels in batch.callers.items():
            text = (
                f"writing {', '.join(sorted(labels))} on node {node!r} failed after the call "
                f"returned (writes are coalesced and written before the next launch's pod"
                f"{f'; this write carried {others} other call(s)' if others > 0 else ''}); "
                f"nothing changed on that node: {exc}"
            )
            self._owed.setdefault(thread, []).append(_restated(exc, text))
        log.warning("queued write on node %s failed: %s", node, exc)

    def _ensure_thread(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def _run(self) -> None:
        """Background: write a batch once it has been idle for `window` (or is too old)."""
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                now = time.monotonic()
                due = now if self._urgent else self._first + self.max_delay
                if not self._calling and not self._urgent:  # a call choosing nodes may add
                    due = min(due, self._last + self.window)
                if now < due:
                    self._wake.wait(due - now)
                    continue
            self._flush_once()

    def close(self) -> None:
        """Write what is queued, stop the background thread; raise what this thread is owed.

        Errors owed to other threads are logged (they can no longer call the backend).
        """
        self._flush_once()
        with self._lock:
            self._closed = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        try:
            self.raise_owed()
        finally:
            with self._lock:
                lost = list(self._owed.values())
                self._owed.clear()
            for errors in lost:
                for error in errors:
                    log.error("%s", error)


def _restated(exc: BaseException, text: str) -> EscherError:
    """An error of the same kind as `exc` (a ConflictError stays one) with `text`."""
    if isinstance(exc, EscherError):
        clone = copy.copy(exc)
        clone.args = (text,)
        clone.__cause__ = exc
        clone.__traceback__ = None
        return clone
    error = BackendError(text)
    error.__cause__ = exc
    return error


__all__ = ["BatchWriter", "WriteCoalescer"]
