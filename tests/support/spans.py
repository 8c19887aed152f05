"""Task bodies that report where and when they ran, and what to check on those reports.

Module level, so that Ray workers and the Kubernetes runner import them by reference.
"""

from __future__ import annotations

import time

import escher

#: (start, end, node) of one task, wall clock of this machine.
Span = tuple[float, float, str]


def span(seconds: float) -> Span:
    """Sleep `seconds`; return (start, end, node)."""
    start = time.time()
    time.sleep(seconds)
    return start, time.time(), escher.node_id()


def where() -> str:
    """The node id the task runs on."""
    return escher.node_id()


def peak_per_node(spans: list[Span]) -> int:
    """The most tasks that ran at the same time on one node (an end before a start)."""
    peak = 0
    for node in {s[2] for s in spans}:
        events = sorted(
            [(s[0], 1) for s in spans if s[2] == node] + [(s[1], -1) for s in spans if s[2] == node]
        )
        running = 0
        for _, delta in events:
            running += delta
            peak = max(peak, running)
    return peak
