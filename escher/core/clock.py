"""Clocks: where policies read the time and schedule timeouts.

Policies (soft-constraint timeouts, gang rollback, monitors) use `backend.clock` rather than
`time` and `threading.Timer`, so they run unchanged in real time and in simulated time.
"""

from __future__ import annotations

import contextvars
import heapq
import itertools
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any


class Timer:
    """A scheduled call. `cancel()` prevents it if it has not run yet.

    It runs in the `contextvars` context of the code that scheduled it (as asyncio's
    `call_later` does), so per-context state such as a `Backend.steered` block reaches the
    timers that block starts (e.g. a `FirstOf` fallback), whichever thread runs the clock.
    """

    __slots__ = ("cancelled", "context", "fn", "when")

    def __init__(self, when: float, fn: Callable[[], Any]) -> None:
        self.when = when
        self.fn = fn
        self.cancelled = False
        self.context = contextvars.copy_context()

    def run(self) -> None:
        """Call `fn()` in the context it was scheduled from (clocks call this)."""
        self.context.run(self.fn)

    def cancel(self) -> None:
        """Do not run this call."""
        self.cancelled = True


class Clock(ABC):
    """Time as a backend sees it."""

    @abstractmethod
    def now(self) -> float:
        """Seconds since an arbitrary origin."""

    @abstractmethod
    def call_later(self, delay: float, fn: Callable[[], Any]) -> Timer:
        """Run `fn()` after `delay` seconds (on a clock-owned thread for real clocks)."""

    @abstractmethod
    def sleep(self, seconds: float) -> None:
        """Let `seconds` pass (a virtual clock advances the simulation instead)."""

    @property
    def virtual(self) -> bool:
        """True if time only passes when the simulation advances it."""
        return False


class RealClock(Clock):
    """Wall-clock time with one lazily started timer thread."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def call_later(self, delay: float, fn: Callable[[], Any]) -> Timer:
        timer = Timer(self.now() + max(0.0, delay), fn)
        with self._cond:
            heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="escher-clock", daemon=True)
                self._thread.start()
            self._cond.notify()
        return timer

    def close(self) -> None:
        """Stop the timer thread; pending calls are dropped."""
        with self._cond:
            self._closed = True
            self._heap.clear()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (not self._heap or self._heap[0][0] > self.now()):
                    self._cond.wait(None if not self._heap else self._heap[0][0] - self.now())
                if self._closed:
                    return
                _, _, timer = heapq.heappop(self._heap)
            if not timer.cancelled:
                try:
                    timer.run()
                except Exception:  # a policy's timer must not kill the clock
                    import logging

                    logging.getLogger("escher").exception("timer callback failed")
