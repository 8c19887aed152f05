"""Start tracking: which submitted attempts started, and where, as the start gate reports.

A worker claims its task's start at the start gate (`escher.backends.ray._gate`) before the
body runs. The task table's sync thread looks at the gate every `look_period` and marks the
attempts that claimed their start running on their node; a settle that needs the starts
looks at once. Looks are one at a time, so a settle that waits for one sees every start the
gate reported before. The gate files and control-store keys of settled attempts are removed
with the next look.

Introspection never looks itself (`request_look`): it asks the sync thread for a look, waits
a bounded time for it, and then reads what the look recorded.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Collection

from escher.backends.ray._gate import Gate

#: Seconds between two turns of the sync thread (parked retries, held-back attempts) ...
SYNC_PERIOD = 0.1
#: ... and between two looks at the start gate for the tasks that started, plus this per
#: submitted attempt not settled (a look asks every node agent and Ray's control store:
#: during a burst of tasks that costs Ray's own work more than its CPU shows) ...
SYNC_PER_ATTEMPT = 1e-3
#: ... and no more than this (how late a start is noticed, at most, unless someone asks
#: about the task: `describe_task` asks for a look if the last one began over `SYNC_PERIOD`
#: ago).
MAX_SYNC_PERIOD = 1.0
#: Seconds a question about a task waits at most for the look it asked for; a look that
#: took this long or more is not waited for again (a node agent that does not answer must
#: not hold up every question).
SLOW_LOOK = 0.5


def look_period(outstanding: int) -> float:
    """Seconds between two looks at the start gate with `outstanding` attempts submitted
    and not settled."""
    return min(SYNC_PERIOD + SYNC_PER_ATTEMPT * outstanding, MAX_SYNC_PERIOD)


class StartTracker:
    """Looks at the start gate and reports starts; removes what settled attempts left there.

    Args:
        gate: This session's start gate.
        waiting: Whether some submitted attempt is not known to have started.
        mark_started: Called with Ray task id -> node for the attempts that claimed their start.
        dead: The nodes escher saw die (their agents are not asked).
        wake: Wake the sync thread (it serves asked-for looks).
    """

    def __init__(
        self,
        gate: Gate,
        *,
        waiting: Callable[[], bool],
        mark_started: Callable[[dict[str, str]], None],
        dead: Callable[[], Collection[str]],
        wake: Callable[[], None],
    ) -> None:
        self.gate = gate
        self._waiting = waiting
        self._mark_started = mark_started
        self._dead = dead
        self._wake = wake
        self._learn_lock = threading.Lock()  # one look at a time
        self._lock = threading.Lock()  # the lists of what to remove
        # Settled attempts whose gate files (node -> Ray task ids; "" = every node) and
        # control-store keys are still to be removed.
        self._forget_files: dict[str, list[str]] = {}
        self._forget_keys: list[str] = []
        self._looked = threading.Condition()
        self._begun = 0  # looks begun ...
        self._done = 0  # ... and the last one done (its number)
        self._asked = False  # someone asked the sync thread for a look
        self.last_look = 0.0  # time.monotonic() when the last look began
        self.look_took = 0.0  # and how long it took

    # --- what settled attempts leave behind --------------------------------------------
    def forget(self, task_id: str, node: str, *, key: bool) -> None:
        """Settled attempt `task_id`: remove its gate file on `node` ("" = every node) and,
        with `key`, its control-store key."""
        with self._lock:
            self._forget_files.setdefault(node, []).append(task_id)
            if key:
                self._forget_keys.append(task_id)

    def forget_key(self, task_id: str) -> None:
        """Remove the control-store key of attempt `task_id` (it claimed its start there)."""
        with self._lock:
            self._forget_keys.append(task_id)

    def cleaned(self) -> bool:
        """Whether nothing is left to remove."""
        with self._lock:
            return not self._forget_files and not self._forget_keys

    # --- looking -----------------------------------------------------------------------
    def learn(self) -> bool:
        """Ask the gate which submitted attempts started (and where), and report them;
        False if the gate did not answer. One look at a time."""
        with self._learn_lock:
            with self._looked:
                self._begun += 1
                number = self._begun
                self._asked = False
            self.last_look = began = time.monotonic()
            try:
                return self._look()
            finally:
                self.look_took = time.monotonic() - began
                with self._looked:
                    self._done = number
                    self._looked.notify_all()

    def _look(self) -> bool:
        waiting = self._waiting()
        with self._lock:
            files, self._forget_files = self._forget_files, {}
            keys, self._forget_keys = self._forget_keys, []
        if keys:
            with contextlib.suppress(Exception):  # else removed with the session
                self.gate.forget(keys)
        if not waiting and not files:
            return True
        try:
            started = self.gate.started(files, skip=self._dead())
        except Exception:
            with self._lock:  # try again at the next look
                for node, task_ids in files.items():
                    self._forget_files.setdefault(node, []).extend(task_ids)
            return False
        self._mark_started(started)
        return True

    # --- looks asked for by introspection ----------------------------------------------
    def asked(self) -> bool:
        """Whether someone waits for a look (the sync thread then looks at once)."""
        return self._asked

    def request_look(self) -> None:
        """Have the sync thread look at the gate now, and wait (at most `SLOW_LOOK`) until a
        look that began after this call is done. Never looks itself; does nothing if a look
        began in the last `SYNC_PERIOD` or the last look was slow."""
        if time.monotonic() - self.last_look <= SYNC_PERIOD or self.look_took >= SLOW_LOOK:
            return
        with self._looked:
            target = self._begun + 1
            self._asked = True
        self._wake()
        with self._looked:
            self._looked.wait_for(lambda: self._done >= target, timeout=SLOW_LOOK)
