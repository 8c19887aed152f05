"""Pending tasks, grouped by request shape, placed oldest first with anti-starvation.

Tasks with identical requests are interchangeable for placement, so each shape is a FIFO and
a scheduling pass looks at one head per shape: its cost follows the number of distinct shapes,
not the number of queued tasks. A head that stays blocked while `starvation_threshold` younger
tasks are placed gets a reservation on the node closest to fitting it; other tasks then leave
the resources it waits for on that node alone, so a large request is never starved by a stream
of small ones.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from escher.backends.memory._matcher import Matcher
from escher.core.resources import Resources
from escher.core.task import TaskRef


@dataclass(eq=False)
class Entry:
    """One queued task."""

    ref: TaskRef
    request: Resources
    seq: int
    overtaken: int = 0
    reserved_node: str | None = None
    removed: bool = field(default=False)


class PendingQueue:
    """FIFO queues per request shape."""

    def __init__(self, starvation_threshold: int) -> None:
        self.starvation_threshold = starvation_threshold
        self._shapes: dict[Resources, deque[Entry]] = {}
        self._entries: dict[str, Entry] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def push(self, ref: TaskRef, request: Resources, *, front: bool = False) -> Entry:
        """Queue a task; `front` puts it before its shape's other tasks (for retries)."""
        entry = Entry(ref, request, -next(self._seq) if front else next(self._seq))
        queue = self._shapes.setdefault(request, deque())
        if front:
            queue.appendleft(entry)
        else:
            queue.append(entry)
        self._entries[ref.id] = entry
        return entry

    def remove(self, ref: TaskRef, matcher: Matcher) -> bool:
        """Take a task out of the queue; False if it is not queued."""
        entry = self._entries.pop(ref.id, None)
        if entry is None:
            return False
        entry.removed = True
        if entry.reserved_node is not None:
            matcher.unreserve(entry.reserved_node)
        return True

    def schedule(self, matcher: Matcher) -> list[tuple[Entry, str]]:
        """Place every head that fits, oldest first, allocating in `matcher`."""
        placed: list[tuple[Entry, str]] = []
        blocked: list[Entry] = []
        heads: list[tuple[int, int, Resources]] = []
        tiebreak = itertools.count()
        for shape, queue in list(self._shapes.items()):
            head = self._head(shape, queue)
            if head is not None:
                heads.append((head.seq, next(tiebreak), shape))
        heapq.heapify(heads)
        while heads:
            _, _, shape = heapq.heappop(heads)
            queue = self._shapes[shape]
            head = self._head(shape, queue)
            if head is None:
                continue
            self._check_reservation(head, matcher)
            node_id = matcher.find(shape, owner=head)
            if node_id is None:
                blocked.append(head)
                continue
            queue.popleft()
            del self._entries[head.ref.id]
            matcher.allocate(node_id, shape)
            if head.reserved_node is not None:
                matcher.unreserve(head.reserved_node)
                head.reserved_node = None
            placed.append((head, node_id))
            for waiting in blocked:
                if waiting.seq < head.seq:
                    self._overtaken(waiting, matcher)
            nxt = self._head(shape, queue)
            if nxt is not None:
                heapq.heappush(heads, (nxt.seq, next(tiebreak), shape))
        return placed

    def _head(self, shape: Resources, queue: deque[Entry]) -> Entry | None:
        while queue and queue[0].removed:
            queue.popleft()
        if not queue:
            del self._shapes[shape]
            return None
        return queue[0]

    def _overtaken(self, entry: Entry, matcher: Matcher) -> None:
        entry.overtaken += 1
        if entry.overtaken >= self.starvation_threshold and entry.reserved_node is None:
            node_id = matcher.best_node_for(entry.request)
            if node_id is not None:
                matcher.reserve(node_id, entry.request, entry)
                entry.reserved_node = node_id

    @staticmethod
    def _check_reservation(entry: Entry, matcher: Matcher) -> None:
        node_id = entry.reserved_node
        if node_id is None:
            return
        record = matcher.nodes.get(node_id)
        if record is None or record.reserved_by is not entry:
            entry.reserved_node = None
        elif not record.could_ever_fit(entry.request):
            matcher.unreserve(node_id)
            entry.reserved_node = None
