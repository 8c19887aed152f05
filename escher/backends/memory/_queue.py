"""Pending tasks, grouped by request shape, placed oldest first with anti-starvation.

Tasks with identical requests are interchangeable for placement, so each shape is a FIFO and
a scheduling pass looks at one head per shape, and only at shapes a change could unblock (see
`PendingQueue`). A head that stays blocked while `starvation_threshold` younger tasks are
placed on nodes that could hold it gets a reservation on the node closest to fitting it; other
tasks then leave the resources it waits for on that node alone, so a large request is never
starved by a stream of small ones.
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
    """FIFO queues per request shape.

    A shape whose head is blocked is parked: it is looked at again only when the matcher
    reports a change that could unblock it (free resources grew on a node that could ever
    hold it, one of its ephemeral labels was created or resized, a node joined). So a
    scheduling pass costs the number of shapes such changes touch, not the number of
    blocked shapes, and many small groups (one label each) stay linear.
    """

    def __init__(self, starvation_threshold: int) -> None:
        self.starvation_threshold = starvation_threshold
        self._shapes: dict[Resources, deque[Entry]] = {}
        self._live: dict[Resources, int] = {}  # shape -> queued entries not removed
        self._entries: dict[str, Entry] = {}
        self._seq = itertools.count()
        self._active: dict[Resources, None] = {}  # shapes to look at in the next pass
        # parked shape -> (nodes that could ever hold it or None for many, its ephemeral labels)
        self._parked: dict[Resources, tuple[list[str] | None, list[str]]] = {}
        self._by_node: dict[str, dict[Resources, None]] = {}
        self._anywhere: dict[Resources, None] = {}  # parked shapes many nodes could hold
        self._by_name: dict[str, dict[Resources, None]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self._entries.values()))

    def push(self, ref: TaskRef, request: Resources, *, front: bool = False) -> Entry:
        """Queue a task; `front` puts it before its shape's other tasks (for retries)."""
        entry = Entry(ref, request, -next(self._seq) if front else next(self._seq))
        queue = self._shapes.get(request)
        if queue is None:
            queue = self._shapes[request] = deque()
            self._active[request] = None
        elif front:
            self._activate(request)  # a new head: look again (it may hold a reservation)
        if front:
            queue.appendleft(entry)
        else:
            queue.append(entry)
        self._live[request] = self._live.get(request, 0) + 1
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
        shape = entry.request
        left = self._live[shape] - 1
        if left:
            self._live[shape] = left
        else:
            self._drop(shape)
        return True

    def schedule(self, matcher: Matcher) -> list[tuple[Entry, str]]:
        """Place every head that fits, oldest first, allocating in `matcher`."""
        placed: list[tuple[Entry, str]] = []
        while True:
            self._wake(matcher)
            if not self._active:
                return placed
            heads: list[tuple[int, int, Resources]] = []
            tiebreak = itertools.count()
            for shape in self._active:
                head = self._head(shape)
                if head is not None:
                    heads.append((head.seq, next(tiebreak), shape))
            self._active = {}
            heapq.heapify(heads)
            while heads:
                _, _, shape = heapq.heappop(heads)
                head = self._head(shape)
                if head is None:
                    continue
                self._check_reservation(head, matcher)
                node_id = matcher.find(shape, owner=head)
                if node_id is None:
                    self._park(shape, matcher)
                    continue
                self._shapes[shape].popleft()
                del self._entries[head.ref.id]
                self._live[shape] -= 1
                matcher.allocate(node_id, shape)
                if head.reserved_node is not None:
                    matcher.unreserve(head.reserved_node)
                    head.reserved_node = None
                placed.append((head, node_id))
                self._overtake(node_id, head.seq, matcher)
                nxt = self._head(shape)
                if nxt is not None:
                    heapq.heappush(heads, (nxt.seq, next(tiebreak), shape))

    # --- parking ---------------------------------------------------------------------------
    def _park(self, shape: Resources, matcher: Matcher) -> None:
        candidates = matcher.candidates(shape)
        names = [name for name in shape if not matcher.is_physical(name)]
        # a shape most nodes could hold (plain CPU, a label on every node) would cost a
        # registration per node at every park; it waits for a change on any node instead
        nodes = None if len(candidates) > max(4, len(matcher.nodes) // 4) else candidates
        self._parked[shape] = (nodes, names)
        if nodes is None:
            self._anywhere[shape] = None
        for node_id in nodes or ():
            self._by_node.setdefault(node_id, {})[shape] = None
        for name in names:
            self._by_name.setdefault(name, {})[shape] = None

    def _unpark(self, shape: Resources) -> None:
        nodes, names = self._parked.pop(shape)
        if nodes is None:
            del self._anywhere[shape]
        for keys, index in ((nodes or (), self._by_node), (names, self._by_name)):
            for key in keys:
                waiting = index.get(key)
                if waiting is not None:
                    waiting.pop(shape, None)
                    if not waiting:
                        del index[key]

    def _activate(self, shape: Resources) -> None:
        if shape in self._parked:
            self._unpark(shape)
        self._active[shape] = None

    def _wake(self, matcher: Matcher) -> None:
        nodes, names, everything = matcher.take_changes()
        if everything:
            for shape in list(self._parked):
                self._activate(shape)
            return
        if nodes:
            for shape in list(self._anywhere):
                self._activate(shape)
        for node_id in nodes:
            for shape in list(self._by_node.get(node_id, ())):
                self._activate(shape)
        for name in names:
            for shape in list(self._by_name.get(name, ())):
                self._activate(shape)

    def _drop(self, shape: Resources) -> None:
        if shape in self._parked:
            self._unpark(shape)
        self._active.pop(shape, None)
        self._shapes.pop(shape, None)
        self._live.pop(shape, None)

    def _head(self, shape: Resources) -> Entry | None:
        queue = self._shapes.get(shape)
        while queue and queue[0].removed:
            queue.popleft()
        if not queue:
            self._drop(shape)
            return None
        return queue[0]

    # --- anti-starvation -------------------------------------------------------------------
    def _overtake(self, node_id: str, seq: int, matcher: Matcher) -> None:
        """A task of sequence `seq` took resources on `node_id`: older blocked heads that
        could use that node count it as overtaking them."""
        for shape in [*self._by_node.get(node_id, ()), *self._anywhere]:
            head = self._head(shape)
            if head is not None and head.seq < seq:
                self._overtaken(head, matcher)

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
