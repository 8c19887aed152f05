"""Setup cost of spreading ESLs on many simulated nodes: bulk writes vs one write per label.

Each row builds one policy on N in-memory nodes (default 1,000) and times its constructor
(the writes of its labels), median of several runs. The baseline of each row is the way
ESLs set up before the bulk call, measured in the same run: read the node list, then one
`set_resource` per (label, node) through the ledger. Also timed: `close()` (deleting every
label). Usage: python bench/esl_setup.py [--nodes N] [--repeats R] [--groups G]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from escher import esl
from escher.backends.memory import MemoryBackend
from escher.esl._esl import node_ids


def cluster(nodes: int) -> MemoryBackend:
    return MemoryBackend(nodes={f"n{i:05d}": {"CPU": 8} for i in range(nodes)}, virtual_clock=True)


class OldWay(esl.ESL):
    """What a per-node ESL did at setup: the node list, then one write per label and node."""

    kind = "old"

    def __init__(self, backend: MemoryBackend, labels: int, capacity: float = 1) -> None:
        super().__init__(backend)
        nodes = node_ids(self.backend, None)
        for i in range(labels):
            label = self.label(f"l{i}")
            for node in nodes:
                self.set_resource(label, capacity, node)


def timed(build: Callable[[], esl.ESL]) -> tuple[float, float]:
    """Seconds to build the policy and seconds to close it."""
    start = time.perf_counter()
    policy = build()
    built = time.perf_counter() - start
    start = time.perf_counter()
    problems = policy.close()
    closed = time.perf_counter() - start
    assert not problems, problems
    return built, closed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--groups", type=int, default=10)
    args = parser.parse_args()
    backend = cluster(args.nodes)
    groups = [f"g{i}" for i in range(args.groups)]
    rows: list[tuple[str, Callable[[], esl.ESL], Callable[[], esl.ESL]]] = [
        ("AntiAffinity", lambda: esl.AntiAffinity(backend), lambda: OldWay(backend, 1)),
        (
            f"AntiAffinity, {args.groups} groups",
            lambda: esl.AntiAffinity(backend, groups=groups),
            lambda: OldWay(backend, 1 + args.groups),
        ),
        (
            "LoadBalance(tasks=)",
            lambda: esl.LoadBalance(backend, tasks=4 * args.nodes),
            lambda: OldWay(backend, 1, 4),
        ),
        ("Priority", lambda: esl.Priority(backend, levels=100), lambda: OldWay(backend, 1, 100)),
        ("TaskQueue", lambda: esl.TaskQueue(backend, rate=2), lambda: OldWay(backend, 1, 2)),
    ]
    print(f"{args.nodes} in-memory nodes; median of {args.repeats} runs; ms")
    print(f"{'policy':<26}{'setup':>9}{'old way':>10}{'ratio':>8}{'close':>9}{'old way':>10}")
    for name, new, old in rows:
        runs_new = [timed(new) for _ in range(args.repeats)]
        runs_old = [timed(old) for _ in range(args.repeats)]
        setup = statistics.median(r[0] for r in runs_new) * 1000
        setup_old = statistics.median(r[0] for r in runs_old) * 1000
        close = statistics.median(r[1] for r in runs_new) * 1000
        close_old = statistics.median(r[1] for r in runs_old) * 1000
        print(
            f"{name:<26}{setup:>9.1f}{setup_old:>10.1f}{setup / setup_old:>8.3f}"
            f"{close:>9.1f}{close_old:>10.1f}"
        )
    backend.close()


if __name__ == "__main__":
    main()
