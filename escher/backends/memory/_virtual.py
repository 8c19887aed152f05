"""A simulated clock: time moves only when the simulation runs its next event."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from typing import Any

from escher.core.clock import Clock, Timer


class VirtualClock(Clock):
    """Discrete-event time. `call_later` queues an event; `step` runs the next one."""

    def __init__(self) -> None:
        self._now = 0.0
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self.events_run = 0

    @property
    def virtual(self) -> bool:
        return True

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, fn: Callable[[], Any]) -> Timer:
        timer = Timer(self._now + max(0.0, delay), fn)
        heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
        return timer

    def sleep(self, seconds: float) -> None:
        """Run every event due within `seconds`, then set the time to now + `seconds`."""
        self.run_until(self._now + max(0.0, seconds))

    def pending(self) -> bool:
        """True if an event is waiting."""
        while self._heap and self._heap[0][2].cancelled:
            heapq.heappop(self._heap)
        return bool(self._heap)

    def step(self) -> bool:
        """Run the next event; False if there is none."""
        if not self.pending():
            return False
        when, _, timer = heapq.heappop(self._heap)
        self._now = max(self._now, when)
        self.events_run += 1
        timer.run()
        return True

    def run_until(self, deadline: float | None = None) -> None:
        """Run events due up to `deadline` (all of them when None)."""
        while self.pending() and (deadline is None or self._heap[0][0] <= deadline):
            self.step()
        if deadline is not None:
            self._now = max(self._now, deadline)
