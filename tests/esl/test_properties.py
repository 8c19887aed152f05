"""Property-based tests: random workloads through ESLs; properties checked on actual placements.

Virtual time: each task records (node, start); with its declared duration that gives the
interval it held its node, so concurrency is checked exactly, independent of machine speed.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

import escher
from escher.backends.memory import MemoryBackend
from escher.esl import AntiAffinity, CoLocation, LoadBalance

SETTINGS = settings(max_examples=25, deadline=None)


def stamp() -> tuple[str, float]:
    ctx_backend = escher.current_backend()
    return escher.node_id(), ctx_backend.clock.now()


def peak_per_node(intervals: list[tuple[str, float, float]]) -> dict[str, int]:
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for node, start, end in intervals:
        events[node] += [(start, 1), (end, -1)]
    peaks = {}
    for node, evs in events.items():
        now = peak = 0
        for _, delta in sorted(evs):  # ends (-1) sort before starts at the same instant
            now += delta
            peak = max(peak, now)
        peaks[node] = peak
    return peaks


def cluster(sizes: list[int]) -> MemoryBackend:
    return MemoryBackend(
        nodes={f"n{i}": {"CPU": c} for i, c in enumerate(sizes)}, virtual_clock=True
    )


@SETTINGS
@given(
    nodes=st.lists(st.integers(2, 6), min_size=1, max_size=5),
    groups=st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), min_size=1, max_size=8),
    known=st.booleans(),
)
def test_colocation_groups_share_one_node(
    nodes: list[int], groups: list[tuple[int, int]], known: bool
) -> None:
    backend = cluster(nodes)
    biggest = max(nodes)
    with CoLocation(backend, retry_interval=0.5) as colo:
        launched = []
        for i, (size, duration) in enumerate(groups):
            size = min(size, biggest)
            group = (
                colo.group(f"g{i}", size, {"CPU": 1})
                if known
                else colo.unknown_group(f"g{i}", size, resources={"CPU": 1})
            )
            launched.append([group.launch(stamp, duration=float(duration)) for _ in range(size)])
        for refs in launched:
            placed = {escher.get(ref, timeout=10_000)[0] for ref in refs}
            assert len(placed) == 1
    backend.close()


@SETTINGS
@given(
    nodes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    per_node=st.integers(1, 3),
    durations=st.lists(st.integers(1, 5), min_size=1, max_size=30),
    balance=st.booleans(),
)
def test_spread_policies_bound_tasks_per_node(
    nodes: list[int], per_node: int, durations: list[int], balance: bool
) -> None:
    backend = cluster(nodes)
    policy = (
        LoadBalance(backend, per_node=per_node)
        if balance
        else AntiAffinity(backend, per_node=per_node)
    )
    with policy:
        refs = [policy.launch(stamp, duration=float(d)) for d in durations]
        intervals = []
        for ref, d in zip(refs, durations, strict=True):
            node, start = escher.get(ref, timeout=10_000)
            intervals.append((node, start, start + d))
    assert max(peak_per_node(intervals).values()) <= per_node
    backend.close()


@SETTINGS
@given(
    pairs=st.integers(1, 8),
    nodes=st.integers(1, 5),
)
def test_load_balanced_pairs(pairs: int, nodes: int) -> None:
    backend = cluster([4] * nodes)
    per_node = 2 * -(-pairs // nodes)
    with LoadBalance(backend, per_node=per_node) as lb, CoLocation(backend) as colo:
        groups = [colo.group(f"p{i}", 2, {"CPU": 1}, policy=lb) for i in range(pairs)]
        refs = [[g.launch(stamp, duration=1.0) for _ in range(2)] for g in groups]
        stamps = [[escher.get(r, timeout=10_000) for r in pair] for pair in refs]
    assert all(len({node for node, _ in pair}) == 1 for pair in stamps)  # co-located
    intervals = [(node, start, start + 1.0) for pair in stamps for node, start in pair]
    assert max(peak_per_node(intervals).values()) <= per_node  # balanced at every instant
    backend.close()
