"""Placement rate of the in-memory matcher vs a scan-every-node matcher, and set_resource latency.

    python bench/matcher.py [--quick]

Workload: nodes of 16 CPUs; 1,000 live ephemeral labels, each on 3 random nodes; a steady load
of live allocations (a quarter of the cluster's CPUs) where each decision places one request and
releases the oldest allocation. Requests are {CPU: 1, <random label>: 1} ("label") or
{CPU: 1} ("cpu-only"). Both matchers work on the same node records; only the search differs.
Task execution is excluded: this times find + allocate + release.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from escher.backends.memory import MemoryBackend
from escher.backends.memory._matcher import Matcher
from escher.core.resources import Resources

LABELS = 1_000


def build(nodes: int, seed: int) -> tuple[Matcher, list[Resources], list[Resources]]:
    rng = random.Random(seed)
    matcher = Matcher()
    for i in range(nodes):
        matcher.add_node(f"n{i}", Resources({"CPU": 16}), {})
    ids = list(matcher.nodes)
    for k in range(LABELS):
        for node_id in rng.sample(ids, 3):
            matcher.set_capacity(node_id, f"lbl-{k}", 1_000_000)
    label_requests = [Resources({"CPU": 1, f"lbl-{rng.randrange(LABELS)}": 1}) for _ in range(4096)]
    cpu_requests = [Resources({"CPU": 1})] * 4096
    return matcher, label_requests, cpu_requests


def naive_find(matcher: Matcher, request: Resources) -> str | None:
    """Scan every node in order: the baseline."""
    for record in matcher.nodes.values():
        if record.fits(request):
            return record.id
    return None


def rate(
    matcher: Matcher,
    requests: list[Resources],
    find: Callable[[Matcher, Resources], str | None],
    decisions: int,
) -> float:
    live: deque[tuple[str, Resources]] = deque()
    steady = len(matcher.nodes) * 4  # a quarter of the cluster's CPUs stay allocated
    placed = 0
    start = time.perf_counter()
    for i in range(decisions):
        request = requests[i % len(requests)]
        node_id = find(matcher, request)
        if node_id is not None:
            matcher.allocate(node_id, request)
            live.append((node_id, request))
            placed += 1
        if len(live) > steady:
            matcher.release(*live.popleft())
    elapsed = time.perf_counter() - start
    while live:
        matcher.release(*live.popleft())
    return decisions / elapsed


def indexed_find(matcher: Matcher, request: Resources) -> str | None:
    return matcher.find(request)


def set_resource_latency(samples: int) -> tuple[float, float]:
    """Median and p99 microseconds of MemoryBackend.set_resource(label, cap, node_id)."""
    backend = MemoryBackend(nodes={f"n{i}": {"CPU": 16} for i in range(100)})
    timings = []
    for i in range(samples):
        node = f"n{i % 100}"
        label = f"lbl-{i % 1000}"
        t0 = time.perf_counter_ns()
        backend.set_resource(label, 1 + i % 7, node)
        timings.append(time.perf_counter_ns() - t0)
    backend.close()
    timings.sort()
    return statistics.median(timings) / 1000, timings[int(len(timings) * 0.99)] / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer decisions")
    args = parser.parse_args()
    sizes = [100, 1_000, 10_000]
    print(f"{'nodes':>6} {'workload':>9} {'indexed/s':>11} {'naive/s':>9} {'ratio':>7}")
    rates: dict[tuple[int, str], float] = {}
    for nodes in sizes:
        matcher, label_reqs, cpu_reqs = build(nodes, seed=nodes)
        for workload, requests in (("label", label_reqs), ("cpu-only", cpu_reqs)):
            indexed_n = 20_000 if args.quick else 100_000
            naive_n = max(200, (2_000_000 if not args.quick else 400_000) // nodes)
            fast = rate(matcher, requests, indexed_find, indexed_n)
            slow = rate(matcher, requests, naive_find, naive_n)
            rates[(nodes, workload)] = fast
            print(f"{nodes:>6} {workload:>9} {fast:>11,.0f} {slow:>9,.0f} {fast / slow:>6.1f}x")
    for workload in ("label", "cpu-only"):
        scale = rates[(10_000, workload)] / rates[(1_000, workload)]
        print(f"{workload}: rate at 10,000 nodes / rate at 1,000 nodes = {scale:.2f}")
    median, p99 = set_resource_latency(20_000 if args.quick else 100_000)
    print(f"set_resource on the memory backend: median {median:.2f} us, p99 {p99:.2f} us")


if __name__ == "__main__":
    main()
