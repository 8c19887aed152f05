"""Gangs through scheduling gates: every member is bound before any of them runs.

Where the API server has pod scheduling gates (see `escher.backends.kubernetes._gates`), a
gang is launched in four steps:

1. **Create** every member's pod with the gate ``escher.io/gang``. The scheduler leaves a
   gated pod alone, so no member takes resources while the others are being created, and a
   driver that dies half-way leaves pods that never run.
2. **Release**: once all exist, remove the gate from each (one patch per pod).
3. **Commit**: the scheduler now places the members one by one, among other pods. When the
   watch shows every member bound to a node, the driver sets the release annotation on every
   pod; each member's runner waits for it before calling the task
   (`escher.backends.kubernetes.runner.wait_for_release`), so no member's code runs before
   the whole gang is placed.
4. **Roll back** when the members are not all bound within ``timeout``: delete every pod of
   the attempt (none has run anything) and try again after an exponential backoff with
   jitter, so gangs competing for the same nodes do not hold parts of each other forever.

What the gates do not guarantee, and the protocol covers: removing the gates is one request
per pod, not one for the gang, and the scheduler binds the released members one at a time;
if only some fit, those are bound and hold their resources until the commit or the
rollback. The barrier is why nothing runs early; the rollback is why a partial placement
does not last. Members hold their resources from binding to commit, as ghost pods would.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: What a backend uses for "run this later": (delay in seconds, function) -> a handle whose
#: ``cancel()`` stops it.
Schedule = Callable[[float, Callable[[], None]], Any]


def timer(delay: float, fn: Callable[[], None]) -> threading.Timer:
    """The default `Schedule`: a daemon `threading.Timer`."""
    handle = threading.Timer(delay, fn)
    handle.daemon = True
    handle.start()
    return handle


@dataclass
class GangAttempt:
    """The pods of one attempt of a gang: pod name -> node (empty while unbound)."""

    number: int
    nodes: dict[str, str] = field(default_factory=dict)
    committed: bool = False
    rolled_back: bool = False

    @property
    def bound(self) -> int:
        return sum(1 for node in self.nodes.values() if node)


class GatedGang:
    """One gang's members, placed together through scheduling gates.

    The callables do the API work; this class decides when.

    Args:
        gang_id: The gang's id (in status messages).
        size: Number of members.
        create: Creates the gated pods of attempt `n`; returns their names.
        release: Removes the gate from one pod.
        commit: Sets the release annotation on one pod.
        discard: Deletes one pod of a rolled-back attempt (its task is kept for the next).
        on_status: Tells the members' handles what the gang is doing.
        timeout: Seconds an attempt may take to have every member bound.
        backoff: First pause before a new attempt (doubles, with jitter x0.5-x1.5, up to
            `max_backoff`).
        max_backoff: Longest pause.
        schedule: Runs a function later (default: a daemon timer).
        seed: Seed of the jitter.
    """

    def __init__(
        self,
        gang_id: str,
        size: int,
        *,
        create: Callable[[int], Sequence[str]],
        release: Callable[[str], None],
        commit: Callable[[str], None],
        discard: Callable[[str], None],
        on_status: Callable[[str], None],
        timeout: float,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        schedule: Schedule = timer,
        seed: int | None = None,
    ) -> None:
        self.gang_id = gang_id
        self.size = size
        self._create = create
        self._release = release
        self._commit = commit
        self._discard = discard
        self._on_status = on_status
        self.timeout = timeout
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._schedule = schedule
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._attempt: GangAttempt | None = None
        self._pending: Any = None
        self.closed = False
        #: Attempts started so far.
        self.attempts = 0

    @property
    def committed(self) -> bool:
        with self._lock:
            return self._attempt is not None and self._attempt.committed

    def start(self) -> None:
        """Create and release one attempt; commit or roll back happen on later events.

        Raises:
            Exception: what `create` or `release` raised (the caller fails the gang).
        """
        with self._lock:
            if self.closed:
                return
            self.attempts += 1
            number = self.attempts
        names = list(self._create(number))
        attempt = GangAttempt(number, dict.fromkeys(names, ""))
        with self._lock:
            self._attempt = attempt
            self._pending = self._schedule(self.timeout, lambda: self._expire(attempt))
        for name in names:
            self._release(name)
        self._on_status(
            f"gang {self.gang_id}: {self.size} members released together (scheduling gates, "
            f"attempt {number}); they start once all are bound"
        )

    def on_bound(self, pod: str, node: str) -> None:
        """A member's pod was seen bound to `node`; commit once every member is."""
        with self._lock:
            attempt = self._attempt
            if self.closed or attempt is None or pod not in attempt.nodes or not node:
                return
            if attempt.committed or attempt.rolled_back or attempt.nodes[pod]:
                return
            attempt.nodes[pod] = node
            bound = attempt.bound
            if bound == self.size:
                attempt.committed = True
                if self._pending is not None:
                    self._pending.cancel()
        if bound < self.size:
            self._on_status(
                f"gang {self.gang_id}: {bound} of {self.size} members bound (scheduling "
                f"gates, attempt {attempt.number}); they start once all are"
            )
            return
        for name in attempt.nodes:
            self._commit(name)
        self._on_status(f"gang {self.gang_id}: all {self.size} members bound; released to run")

    def _expire(self, attempt: GangAttempt) -> None:
        with self._lock:
            if attempt.committed or attempt.rolled_back or self.closed:
                return
            attempt.rolled_back = True
            bound = attempt.bound
        for name in attempt.nodes:
            self._discard(name)
        delay = min(self.max_backoff, self.backoff * 2 ** (attempt.number - 1))
        delay *= self._random.uniform(0.5, 1.5)
        self._on_status(
            f"gang {self.gang_id}: {bound} of {self.size} members bound after "
            f"{self.timeout:g} s (attempt {attempt.number}); rolled back, next attempt in "
            f"{delay:.1f} s"
        )
        with self._lock:
            if not self.closed:
                self._pending = self._schedule(delay, self._retry)

    def _retry(self) -> None:
        try:
            self.start()
        except Exception as exc:  # the API refused: say so and try again later
            with self._lock:
                number = self.attempts
                closed = self.closed
            self._on_status(f"gang {self.gang_id}: attempt {number} could not start: {exc}")
            if not closed:
                with self._lock:
                    self._pending = self._schedule(self.max_backoff, self._retry)

    def close(self) -> bool:
        """Stop: no commit, rollback or new attempt happens after this.

        Returns:
            True if the gang was stopped before its commit (no member runs), False if the
            commit came first.
        """
        with self._lock:
            self.closed = True
            if self._pending is not None:
                self._pending.cancel()
            return not (self._attempt is not None and self._attempt.committed)
