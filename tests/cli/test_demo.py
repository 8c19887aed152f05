"""The paper's co-location + load-balancing example, as `escher demo` runs it."""

from __future__ import annotations

from collections import Counter

from escher.backends.memory import MemoryBackend
from escher.cli.demo import run_demo


def ephemeral_labels(backend: MemoryBackend) -> set[str]:
    return {label for n in backend.get_cluster_state().nodes.values() for label in n.ephemeral}


def check(placements: list[tuple[str, str]], per_node: int) -> None:
    pairs: dict[str, set[str]] = {}
    for task, node in placements:
        pairs.setdefault(task.split("/")[0], set()).add(node)
    assert all(len(nodes) == 1 for nodes in pairs.values()), pairs  # co-located
    load = Counter(next(iter(nodes)) for nodes in pairs.values())
    assert max(load.values()) * 2 <= per_node  # balanced


def test_demo_on_its_own_backend() -> None:
    placements = run_demo()
    assert len(placements) == 8
    check(placements, per_node=2)
    assert sorted({n for _, n in placements}) == ["node-1", "node-2", "node-3", "node-4"]


def test_demo_on_a_given_backend_in_virtual_time_leaves_nothing() -> None:
    backend = MemoryBackend(
        nodes={"a": {"CPU": 4}, "b": {"CPU": 4}, "c": {"CPU": 4}}, virtual_clock=True
    )
    placements = run_demo(backend, pairs=5)
    check(placements, per_node=4)
    assert ephemeral_labels(backend) == set()
    backend.close()
