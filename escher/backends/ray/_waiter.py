"""Learns the ends of submitted attempts in batches: one thread waits on Ray for all of them
at once (`ray.wait`) and fetches what is ready together, instead of one completion callback
per task (which costs Ray's I/O thread and a hand-over per task).

A wait ends when `BATCH` attempts are ready or its step is over, whichever comes first: a
wait and a fetch cost about the same whether they bring one end or a hundred, and every
batch takes the driver's GIL from the thread that launches tasks, so during a burst a batch
is worth waiting for; with few outstanding the step is short and ends are noticed at once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from escher.backends.ray._state import ray_up

#: Seconds one wait on Ray lasts at most (a batch is what ended meanwhile) ...
STEP = 0.005
#: ... plus this per outstanding attempt (with many outstanding, fewer and bigger batches:
#: a wait costs the driver 150-350 us of CPU, a settle about 10 us) ...
STEP_PER_ATTEMPT = 1e-4
#: ... and no more than this (how late the end of one of the `WINDOW // 2` oldest attempts
#: is noticed, at most; of another, one step per `WINDOW // 2` outstanding attempts) ...
MAX_STEP = 0.1
#: ... unless this many of the attempts it looks at end sooner (the wait returns then).
BATCH = 64
#: Attempts one wait looks at, at most: the oldest half (attempts end about in the order
#: they were sent) and a slice of the others that moves on with every wait.
WINDOW = 256


class Waiter:
    """Hands each attempt's outcome (its value, or the exception Ray stored instead) to
    `on_done(key, outcome)`, on a thread of its own.

    Args:
        on_done: Settles one attempt (must not raise; it runs on the waiter's thread).
        timeout: Seconds a fetch of ready results may take.
    """

    def __init__(self, on_done: Callable[[str, Any], None], timeout: float) -> None:
        self._on_done = on_done
        self._timeout = timeout
        self._cond = threading.Condition()
        # Attempts added since the waiting thread last looked: two lists side by side, not
        # a pair per attempt (one tracked object fewer per waiting task for Python's GC).
        self._new_refs: list[Any] = []
        self._new_keys: list[str] = []
        self._closed = False
        self._thread: threading.Thread | None = None

    def add(self, object_ref: Any, key: str) -> None:
        """Wait for `object_ref`, the attempt `key`."""
        with self._cond:
            self._new_refs.append(object_ref)
            self._new_keys.append(key)
            if len(self._new_refs) > 1:
                return  # the thread has not taken the earlier ones yet: it will take this too
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="escher-ray-wait", daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify()

    def close(self) -> None:
        """Stop waiting (what is outstanding is not reported)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)

    def _run(self) -> None:
        import ray

        pending: dict[Any, str] = {}
        turn = 0  # where the moving slice starts, among the attempts past the oldest half
        while True:
            with self._cond:
                while not self._new_refs and not pending and not self._closed:
                    self._cond.wait(0.5)
                    if not ray_up():
                        return
                if self._closed:
                    return
                new_refs, new_keys = self._new_refs, self._new_keys
                self._new_refs, self._new_keys = [], []
            pending.update(zip(new_refs, new_keys, strict=True))
            try:
                refs = list(pending)
                step = min(STEP + STEP_PER_ATTEMPT * len(refs), MAX_STEP)
                if len(refs) > WINDOW:
                    refs, turn = window(refs, turn)
                batch = min(len(refs), BATCH)
                ready, _ = ray.wait(refs, num_returns=batch, timeout=step, fetch_local=False)
            except Exception:
                if not ray_up():
                    return
                continue
            if ready:
                for ref, outcome in zip(ready, self._fetch(ready), strict=True):
                    self._on_done(pending.pop(ref), outcome)

    def _fetch(self, ready: list[Any]) -> list[Any]:
        """The outcomes of ready attempts: together, or one by one where one failed."""
        import ray

        try:
            return list(ray.get(ready, timeout=self._timeout))
        except Exception:
            pass
        outcomes: list[Any] = []
        for ref in ready:
            try:
                outcomes.append(ray.get(ref, timeout=self._timeout))
            except Exception as exc:
                outcomes.append(exc)
        return outcomes


def window(refs: list[Any], turn: int) -> tuple[list[Any], int]:
    """The attempts one wait looks at (a wait costs Ray about 0.4 us per attempt it is
    given): the `WINDOW // 2` oldest and the slice of as many that starts `turn` past them;
    and where the next slice starts. Every attempt is looked at within
    ``len(refs) / (WINDOW // 2)`` waits."""
    half = WINDOW // 2
    start = half + turn
    if start >= len(refs):
        start, turn = half, 0
    return refs[:half] + refs[start : start + half], turn + half
