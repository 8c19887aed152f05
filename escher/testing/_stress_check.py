"""The invariant bookkeeping of the stress workload (`escher.testing.stress`).

Task bodies report when they start and end, on which node (`Checker.event`); the workload
reports what it asked for (`register`, `begin_write` / `end_write`, `add_node` /
`remove_node`). From these the checker decides, as events arrive in time order, whether a
node ever ran more than it could hold.

Soundness over completeness: a start is flagged only if it *must* have over-committed.

* Node-defined resources (CPU) and fixed labels never change: the sum of the requests of
  the bodies running on a node at once must stay within the node's capacity.
* Labels the workload resizes while tasks run ("churn" labels) may shrink below what is in
  use (running tasks keep what they hold). A task X was placed at some instant between its
  launch and its start; the tasks that already ran on that node before X was launched and
  still run when X starts held their share at that instant. So their share plus X's must fit
  within the largest capacity the label may have had on that node during that window
  (every write that overlaps the window, and the writes that may have been in effect when it
  opened).

Timestamps are `time.monotonic()`, which is one clock for every process on a machine: the
stress workload needs the backend's nodes to run on the machine that drives it.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from escher.core.resources import EPSILON, Resources


@dataclass
class _Write:
    t0: float
    cap: float
    t1: float = math.inf


class Timeline:
    """Every write of one label on one node: when it began and ended, and the capacity."""

    def __init__(self) -> None:
        self._writes: list[_Write] = []  # in t0 order (begun under the checker's lock)
        self._t0s: list[float] = []
        self._open: set[int] = set()  # indexes of writes still in flight
        self._longest = 0.0

    def begin(self, cap: float, t0: float) -> int:
        """A write of `cap` begins at `t0`; returns its index for `end`."""
        self._writes.append(_Write(t0, cap))
        self._t0s.append(t0)
        index = len(self._writes) - 1
        self._open.add(index)
        return index

    def end(self, index: int, t1: float) -> None:
        """The write `index` returned at `t1` (applied, or not at all)."""
        write = self._writes[index]
        write.t1 = t1
        self._open.discard(index)
        self._longest = max(self._longest, t1 - write.t0)

    def max_between(self, a: float, b: float) -> float:
        """The largest capacity the label may have had at some instant of [a, b]."""
        best = 0.0
        for index in self._open:
            if self._writes[index].t0 <= b:
                best = max(best, self._writes[index].cap)
        last_done: float | None = None  # largest t0 of a write that ended before `a`
        i = bisect.bisect_right(self._t0s, b) - 1
        while i >= 0:
            write = self._writes[i]
            if last_done is not None and write.t0 < last_done - self._longest:
                break  # every earlier write ended before `last_done` began: overwritten
            if write.t1 >= a:
                best = max(best, write.cap)  # overlaps the window
            elif last_done is None:
                last_done = write.t0
                best = max(best, write.cap)
            elif write.t1 >= last_done:
                best = max(best, write.cap)  # raced with the last one: may be in effect
            i -= 1
        return best


@dataclass
class _Run:
    key: str
    node: str
    start: float
    counted: bool  # False for runs on a node that was already being removed


@dataclass
class Checker:
    """Live invariant checks over the events of one stress run (thread-safe).

    Attributes:
        fixed: Label -> node -> capacity of the labels that never change.
        churn: Labels that are resized while tasks run.
    """

    fixed: Mapping[str, Mapping[str, float]]
    churn: frozenset[str]
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _cpu: dict[str, float] = field(default_factory=dict)
    _removed: dict[str, float] = field(default_factory=dict)
    _timelines: dict[tuple[str, str], Timeline] = field(default_factory=dict)
    _tasks: dict[str, tuple[Resources, float]] = field(default_factory=dict)
    _running: dict[str, dict[str, _Run]] = field(default_factory=dict)  # node -> token -> run
    _usage: dict[str, dict[str, float]] = field(default_factory=dict)
    runs: dict[str, list[str]] = field(default_factory=dict)  # key -> tokens started
    ended: dict[str, int] = field(default_factory=dict)  # key -> runs ended
    violations: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    events: list[tuple[float, str, str, str, str]] = field(default_factory=list)
    keep_events: bool = False

    # --- what the workload reports --------------------------------------------------------
    def add_node(self, node: str, cpu: float) -> None:
        """A node the workload knows, with its CPU capacity (before it can run anything)."""
        with self._lock:
            self._cpu[node] = cpu

    def known_nodes(self) -> set[str]:
        """Every node the workload was told about (removed ones included)."""
        with self._lock:
            return set(self._cpu)

    def remove_node(self, node: str) -> None:
        """The workload is about to remove `node`: from now on its runs are not counted."""
        with self._lock:
            self._removed.setdefault(node, time.monotonic())

    def register(self, key: str, request: Resources, launched: float) -> None:
        """A task is about to be launched (before its body can start)."""
        with self._lock:
            self._tasks[key] = (request, launched)

    def begin_write(self, node: str, label: str, cap: float) -> int:
        """A write of a churn label is about to be sent; returns a token for `end_write`."""
        with self._lock:
            timeline = self._timelines.setdefault((node, label), Timeline())
            return timeline.begin(cap, time.monotonic())

    def end_write(self, node: str, label: str, index: int) -> None:
        """The write returned (whatever it did)."""
        with self._lock:
            self._timelines[(node, label)].end(index, time.monotonic())

    # --- what task bodies report ----------------------------------------------------------
    def event(self, kind: str, key: str, token: str, node: str, ts: float | None = None) -> None:
        """A body started ("S") or ended ("E"); `ts` defaults to now (taken under the lock)."""
        with self._lock:
            when = time.monotonic() if ts is None else ts
            if self.keep_events:
                self.events.append((when, kind, key, token, node))
            if kind == "S":
                self._start(key, token, node, when)
            else:
                self._end(key, token, node)

    def _start(self, key: str, token: str, node: str, when: float) -> None:
        self.runs.setdefault(key, []).append(token)
        removed = self._removed.get(node)
        counted = node in self._cpu and (removed is None or when < removed)
        if node not in self._cpu:
            self.unknown.append(f"task {key} ran on node {node!r}, which the workload never saw")
        self._running.setdefault(node, {})[token] = _Run(key, node, when, counted)
        if not counted or key not in self._tasks:
            return
        request, launched = self._tasks[key]
        usage = self._usage.setdefault(node, {})
        for name, quantity in request.items():
            usage[name] = usage.get(name, 0.0) + quantity
        for name, quantity in request.items():
            self._check(key, node, name, quantity, usage[name], launched, when)

    def _check(
        self,
        key: str,
        node: str,
        name: str,
        quantity: float,
        used: float,
        launched: float,
        when: float,
    ) -> None:
        if name in self.churn:
            timeline = self._timelines.get((node, name))
            cap = timeline.max_between(launched, when) if timeline else 0.0
            held = quantity + sum(
                self._tasks[run.key][0].get(name, 0.0)
                for run in self._running[node].values()
                if run.counted and run.key != key and run.start < launched
            )
            if held > cap + EPSILON:
                self.violations.append(
                    f"{node}: task {key} started with {held:g} of {name} held, at most {cap:g} "
                    "could exist since it was launched"
                )
            return
        cap = self._cpu[node] if name == "CPU" else self.fixed.get(name, {}).get(node, 0.0)
        if used > cap + EPSILON:
            running = sorted(r.key for r in self._running[node].values() if r.counted)
            self.violations.append(
                f"{node}: {used:g} {name} in use > capacity {cap:g} when task {key} started "
                f"(running: {', '.join(running)})"
            )

    def _end(self, key: str, token: str, node: str) -> None:
        self.ended[key] = self.ended.get(key, 0) + 1
        run = self._running.get(node, {}).pop(token, None)
        if run is None or not run.counted or key not in self._tasks:
            return
        usage = self._usage[node]
        for name, quantity in self._tasks[key][0].items():
            usage[name] = usage.get(name, 0.0) - quantity

    # --- replay -----------------------------------------------------------------------------
    def replay(self, events: list[tuple[float, str, str, str, str]]) -> Checker:
        """A fresh checker fed `events` in time order, with this one's nodes, tasks, writes."""
        fresh = Checker(self.fixed, self.churn)
        fresh._cpu, fresh._removed = dict(self._cpu), dict(self._removed)
        fresh._timelines, fresh._tasks = self._timelines, dict(self._tasks)
        for when, kind, key, token, node in sorted(events, key=lambda e: (e[0], e[1] == "S")):
            fresh.event(kind, key, token, node, when)
        return fresh

    def running_now(self) -> int:
        """Bodies that started and did not end yet."""
        with self._lock:
            return sum(len(runs) for runs in self._running.values())
