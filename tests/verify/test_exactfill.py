"""Exact completion of zero-slack packings (`escher.verify.engines._exactfill`)."""

from __future__ import annotations

import random
import time
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from escher.core.cluster import ClusterState
from escher.core.plan import Plan
from escher.verify import Verdict, check_placement, verify
from escher.verify.engines._exactfill import fill

WAIT = 60.0


@st.composite
def zero_slack(draw: st.DrawFn) -> tuple[int, dict[int, int], dict[int, int], int]:
    """Nodes of one capacity, each cut into parts: (capacity, sizes, copies, nodes)."""
    cap = draw(st.integers(4, 40))
    nodes = draw(st.integers(1, 8))
    parts: Counter[int] = Counter()
    for _ in range(nodes):
        rest = cap
        while rest:
            part = draw(st.integers(1, rest))
            parts[part] += 1
            rest -= part
    sizes = {c: w for c, w in enumerate(sorted(parts))}
    copies = {c: parts[w] for c, w in sizes.items()}
    return cap, sizes, copies, nodes


@settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(zero_slack())
def test_fills_fill_every_node_exactly_and_place_every_copy(
    inst: tuple[int, dict[int, int], dict[int, int], int],
) -> None:
    cap, sizes, copies, nodes = inst
    fills = fill(cap, sizes, copies, nodes, time.monotonic() + WAIT)
    assert fills is not None, "a packing exists (the instance was cut from one)"
    assert len(fills) == nodes
    placed: Counter[int] = Counter()
    for node in fills:
        assert sum(sizes[c] * k for c, k in node) == cap
        placed.update(dict(node))
    assert placed == Counter(copies)


def test_nothing_is_found_where_the_totals_leave_slack_or_sizes_are_not_positive() -> None:
    assert fill(10, {0: 5}, {0: 3}, 2, time.monotonic() + WAIT) is None  # 15 of 20
    assert fill(10, {0: 5, 1: 0}, {0: 4, 1: 1}, 2, time.monotonic() + WAIT) is None


def _quadruplets(n_nodes: int, seed: int) -> tuple[Plan, ClusterState]:
    """Each node of 1000 filled exactly by four tasks of 200-300, one entry per task."""
    rng = random.Random(seed)
    plan = Plan()
    for i in range(n_nodes):
        while True:
            parts = [rng.randint(200, 300) for _ in range(3)]
            if 200 <= 1000 - sum(parts) <= 300:
                break
        for k, size in enumerate([*parts, 1000 - sum(parts)]):
            plan.add_task(f"t{i}-{k}", {"mem": size}, source=f"task {i}-{k}")
    nodes = [{"id": f"n{i:03d}", "total": {"mem": 1000}} for i in range(n_nodes)]
    return plan, ClusterState.from_dict({"nodes": nodes})


def test_a_zero_slack_quadruplet_packing_gets_a_checked_witness() -> None:
    pytest.importorskip("scipy")  # the arc-flow stage runs it
    plan, state = _quadruplets(120, 7)
    result = verify(plan, state, timeout=120, check_intents=False)
    assert result.status is Verdict.FEASIBLE, result.render()
    assert result.witness is not None
    assert check_placement(plan, state, result.witness) == []
