"""Node liveness for the task path: which nodes died, and retries parked until Ray drops them.

escher notices a dead node before Ray's control store does (its raylet refuses connections),
settles or retries the attempts that ran there at once, and holds a retry back (bounded)
while Ray still lists a node escher saw die, so that Ray does not send it there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection

from escher.backends.ray._entry import Entry
from escher.backends.ray._state import NodeCache, raylet_reachable, read_raw

#: Seconds between two checks that the nodes of running attempts are still alive.
NODE_CHECK_PERIOD = 1.0
#: Seconds a retry waits at most for Ray to drop a node escher saw die.
PARK_SECONDS = 60.0


class NodeLeftError(Exception):
    """escher saw a running attempt's node leave the cluster before Ray reported it."""


def listed_alive(node: str) -> bool:
    """Whether Ray's control store lists `node` alive (if in doubt, it is)."""
    try:
        return node in read_raw().total
    except Exception:
        return True


class NodeWatch:
    """Which nodes of the cluster escher knows to be dead.

    Args:
        nodes: What is known about the cluster's nodes.
    """

    def __init__(self, nodes: NodeCache) -> None:
        self._nodes = nodes

    def any_dead(self) -> bool:
        """Whether escher saw any node die."""
        return bool(self._nodes.dead.snapshot())

    def dead(self) -> Collection[str]:
        """The nodes escher saw die."""
        return self._nodes.dead.snapshot()

    def died(self, node: str) -> bool:
        """Whether `node` is dead: Ray no longer lists it, or its raylet refuses connections
        (then it is marked dead at once, before Ray's control store notices)."""
        if node in self._nodes.dead.snapshot():
            return True
        if not raylet_reachable(self._nodes.endpoint(node)):
            self._nodes.dead.mark(node)
            return True
        return False

    def gone(self, nodes: Collection[str]) -> set[str]:
        """Those of `nodes` that left the cluster (none if Ray cannot be asked)."""
        try:
            alive = set(read_raw().total)
        except Exception:
            return set()
        return {n for n in nodes if n not in alive or self.died(n)}


class Parking:
    """Retries waiting for Ray to drop the nodes escher saw die (at most `PARK_SECONDS`).

    Args:
        watch: The dead nodes.
    """

    def __init__(self, watch: NodeWatch) -> None:
        self._watch = watch
        self._lock = threading.Lock()
        self._parked: list[tuple[float, Entry]] = []

    def __bool__(self) -> bool:
        return bool(self._parked)

    def park(self, entry: Entry) -> None:
        """Hold `entry`'s next attempt back until Ray drops the dead nodes."""
        with self._lock:
            self._parked.append((time.monotonic(), entry))

    def ready(self) -> list[Entry]:
        """Take the parked entries that may start now: Ray lists no node escher saw die (or
        they waited `PARK_SECONDS`)."""
        with self._lock:
            if not self._parked:
                return []
            parked = list(self._parked)
        try:
            listed = set(read_raw().total)
        except Exception:
            return []
        dead_listed = set(self._watch.dead()) & listed
        now = time.monotonic()
        ready = [e for at, e in parked if not dead_listed or now - at > PARK_SECONDS]
        if ready:
            with self._lock:
                self._parked = [(at, e) for at, e in self._parked if e not in ready]
        return ready
