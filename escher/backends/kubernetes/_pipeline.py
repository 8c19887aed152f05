"""A bounded pipeline of API calls, in order within a lane, concurrent across lanes.

`Pipeline.put(lane, job)` returns at once (or waits while `depth` jobs are queued or in
flight); `workers` threads run the jobs. Jobs of the same lane run one at a time in the
order they were put, so the API server sees them in that order; jobs without a lane (None)
run as soon as a worker is free.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger("escher.kubernetes")

Job = Callable[[], None]


class Pipeline:
    """Run jobs on a small pool: ordered per lane, bounded in number.

    Args:
        workers: Threads that run jobs.
        depth: At most this many jobs queued or running; `put` waits beyond it.
        name: Prefix of the worker threads' names.
    """

    def __init__(self, workers: int, depth: int, name: str = "escher-k8s-create") -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
        self._room = threading.BoundedSemaphore(depth)
        self._lock = threading.Lock()
        self._lanes: dict[Hashable, deque[Job]] = {}
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self._closed = False

    def put(self, lane: Hashable | None, job: Job) -> None:
        """Queue `job` (in `lane`'s order, or unordered for None)."""
        self._room.acquire()
        with self._lock:
            if self._closed:
                self._room.release()
                raise RuntimeError("the pipeline is closed")
            self._pending += 1
            if lane is None:
                self._pool.submit(self._run, job)
                return
            queue = self._lanes.get(lane)
            if queue is not None:  # a worker drains this lane already
                queue.append(job)
                return
            self._lanes[lane] = deque([job])
        self._pool.submit(self._drain, lane)

    def _drain(self, lane: Hashable) -> None:
        while True:
            with self._lock:
                queue = self._lanes[lane]
                job = queue[0]
            self._run(job)
            with self._lock:
                queue.popleft()
                if not queue:
                    del self._lanes[lane]
                    return

    def _run(self, job: Job) -> None:
        try:
            job()
        except Exception:
            log.exception("a queued API call failed")
        finally:
            self._room.release()
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until every job put so far ended; True if it did within `timeout`."""
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self) -> None:
        """Refuse new jobs; let the queued ones run (they check for themselves whether to)."""
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True)
