"""Resize mode: this process's recent writes, and sharing them with other processes.

Ray's own view of a resized resource catches up about 100 ms after the write. So every
process keeps its writes of the last `window` seconds (the overlay) and overlays them on
its reads, and sends them to the control actor, where other processes read them. Writes are
sent in batches by a flusher thread (off the caller's path), and synchronously wherever
causality leaves this process (`flush`: before a task is submitted, before a task body's
result is returned, at close). Where two writes of the same resource meet, the one stamped
later wins. The batches also tell the control actor which session owns each resource (for
garbage collection), so they are sent even when reads do not share them.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from escher.backends.ray._state import keep_running, ray_up, wait_for

#: Seconds the flusher waits after a write, to send the writes of a burst in one call.
FLUSH_DELAY = 0.025

#: (node, Ray name, total, wall-clock stamp)
Write = tuple[str, str, float, float]


class WriteLog:
    """The overlay of recent writes and the outbox of writes not sent yet."""

    def __init__(
        self,
        control: Callable[[], Any],
        *,
        session_id: str,
        share: bool = True,
        timeout: float = 60.0,
        window: float = 1.0,
    ) -> None:
        self._control = control
        self._session = session_id
        self._share = share
        self._timeout = timeout
        self.window = window
        self._lock = threading.Lock()
        # (node, Ray name) -> (monotonic time, total, wall-clock stamp) of this process's writes
        self._overlay: dict[tuple[str, str], tuple[float, float, float]] = {}
        self._outbox: dict[tuple[str, str], tuple[float, float]] = {}  # not sent yet
        self._send_lock = threading.Lock()  # one send at a time, in order
        self._wake = threading.Event()
        self._flusher: threading.Thread | None = None
        self._closed = False

    @property
    def shared(self) -> bool:
        """True if reads in other processes see these writes through the control actor."""
        return self._share

    def remember(self, node: str, name: str, total: float) -> None:
        """Record that `name` on `node` now has `total` (in the overlay and the outbox)."""
        stamp = time.time()
        with self._lock:
            self._overlay[(node, name)] = (time.monotonic(), total, stamp)
            self._outbox[(node, name)] = (total, stamp)
            self._wake.set()
            self._flusher = keep_running(self._flusher, self._flush_loop, "escher-ray-flush")

    def flush(self, timeout: float) -> None:
        """Make every write of this process so far visible to readers in any process.

        Returns at once when nothing is unsent and no send is in flight (or writes are not
        shared). Raises what the control actor call raised; the writes are sent again later.
        """
        if not self._share or (not self._outbox and not self._send_lock.locked()):
            return
        with self._send_lock:  # waits for a send in flight, which may hold older writes
            self._send(self._take(), timeout)

    def _take(self) -> list[Write]:
        with self._lock:
            out, self._outbox = self._outbox, {}
        return [(node, name, total, stamp) for (node, name), (total, stamp) in out.items()]

    def _send(self, writes: list[Write], timeout: float) -> None:
        if not writes or not ray_up():
            return
        try:
            wait_for(self._control().notes.remote(writes, self._session), timeout)
        except Exception:
            self.requeue(writes)
            raise

    def requeue(self, writes: list[Write]) -> None:
        """Keep unsent `writes`, unless a newer write of the same resource came meanwhile."""
        with self._lock:
            for node, name, total, stamp in writes:
                self._outbox.setdefault((node, name), (total, stamp))

    def _flush_loop(self) -> None:
        while not self._closed and ray_up():
            if not self._wake.wait(1.0):
                with self._lock:
                    if not self._outbox:  # idle: the next write starts a new flusher
                        self._flusher = None
                        return
                continue
            time.sleep(FLUSH_DELAY)  # let a burst of writes gather
            self._wake.clear()
            if not self._outbox:
                continue
            with contextlib.suppress(Exception), self._send_lock:
                self._send(self._take(), self._timeout)

    # --- reads -------------------------------------------------------------------------
    def start_recent(self) -> RecentWrites:
        """Start reading (node, Ray name) -> total of every process's writes in the window;
        collect it with `.result(timeout)`. Sends this process's unsent writes in the same
        call."""
        if not self._share:
            return RecentWrites(self, None, [])
        writes = self._take()
        try:
            future = self._control().exchange.remote(writes, self.window, self._session).future()
        except Exception:
            self.requeue(writes)
            return RecentWrites(self, None, [])
        return RecentWrites(self, future, writes)

    def merge(
        self, shared: dict[tuple[str, str], tuple[float, float]]
    ) -> dict[str, dict[str, float]]:
        """node -> Ray name -> total: `shared` with this process's newer writes on top."""
        now = time.monotonic()
        merged = dict(shared)
        with self._lock:
            for key in [k for k, (t, _, _) in self._overlay.items() if now - t > self.window]:
                del self._overlay[key]
            for key, (_, total, stamp) in self._overlay.items():
                if key not in merged or stamp > merged[key][1]:
                    merged[key] = (total, stamp)
        out: dict[str, dict[str, float]] = {}
        for (node, name), (total, _) in merged.items():
            out.setdefault(node, {})[name] = total
        return out

    def close(self, timeout: float) -> None:
        """Send what is unsent; stop the flusher (and wait for it)."""
        with contextlib.suppress(Exception), self._send_lock:
            self._send(self._take(), timeout)
        self._closed = True
        self._wake.set()
        thread = self._flusher
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)


class RecentWrites:
    """A read of recent writes in flight."""

    def __init__(self, log: WriteLog, future: Any, writes: list[Write]) -> None:
        self._log, self._future, self._writes = log, future, writes

    def result(self, timeout: float) -> dict[str, dict[str, float]]:
        """The merged view; this process's writes only if the control actor did not answer."""
        shared: dict[tuple[str, str], tuple[float, float]] = {}
        if self._future is not None:
            try:
                shared = self._future.result(timeout=timeout)
            except Exception:  # unreachable or slow: this process's writes only
                self._log.requeue(self._writes)
        return self._log.merge(shared)

    def abandon(self) -> None:
        """Not needed after all: give the unsent writes back to the outbox."""
        self.result(0.0)
