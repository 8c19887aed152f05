"""Topology ESLs on Ray, both modes: the workers' ``zone`` node labels (set at node start by
the test cluster) are the domains; co-location, anti-affinity and spreading per zone hold on
real Ray tasks."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytest.importorskip("ray")

import escher
from escher.esl import DomainAntiAffinity, DomainColocation, DomainSpread
from escher.testing.conformance import wait_until
from tests.support.spans import Span, span, where

pytestmark = pytest.mark.ray
WAIT = 60.0


@pytest.fixture
def backend(ray_backend: Any) -> Any:
    """The shared Ray backend fixture, in each mode (tests/support/ray_cluster.py)."""
    return ray_backend


def zones(backend: Any) -> dict[str, str]:
    state = backend.get_cluster_state()
    return {n: node.labels["zone"] for n, node in state.nodes.items() if "zone" in node.labels}


def peak_per_zone(spans: list[Span], zone: dict[str, str]) -> int:
    events = sorted(
        [(s[0], 1, zone[s[2]]) for s in spans] + [(s[1], -1, zone[s[2]]) for s in spans]
    )
    running: Counter[str] = Counter()
    peak = 0
    for _, delta, z in events:
        running[z] += delta
        peak = max(peak, running[z])
    return peak


def holding(backend: Any, labels: set[str]) -> set[str]:
    """The nodes that hold any of `labels`."""
    state = backend.get_cluster_state()
    return {n for n, node in state.nodes.items() if labels & set(node.ephemeral)}


def test_one_task_per_zone_at_a_time(backend: Any) -> None:
    zone = zones(backend)
    with DomainAntiAffinity("zone", name="daa-ray") as aa:
        refs = [aa.launch(span, 0.5, resources={"CPU": 1}) for _ in range(4)]
        spans = escher.get(refs, timeout=WAIT)
        assert wait_until(lambda: not any(aa.counts.values()), timeout=10)
    assert {zone[s[2]] for s in spans} == set(zone.values())
    assert peak_per_zone(spans, zone) == 1


def test_spread_over_zones_with_max_skew(backend: Any) -> None:
    zone = zones(backend)
    with DomainSpread("zone", max_skew=1, name="dspr-ray") as spread:
        # long enough that all four are live at once (the skew counts live tasks)
        refs = [spread.launch(span, 3.0, resources={"CPU": 1}) for _ in range(4)]
        assert sorted(spread.counts.values()) == [2, 2]
        spans = escher.get(refs, timeout=WAIT)
        assert wait_until(lambda: not any(spread.counts.values()), timeout=10)
    per_zone = Counter(zone[s[2]] for s in spans)
    assert sorted(per_zone.values()) == [2, 2]


def test_a_group_stays_in_one_zone(backend: Any) -> None:
    zone = zones(backend)
    colo = DomainColocation("zone", name="dcolo-ray")
    group = colo.group("g", 3, {"CPU": 1})
    nodes = escher.get([group.launch(where) for _ in range(3)], timeout=WAIT)
    assert {zone[n] for n in nodes} == {group.domain}
    assert holding(backend, {group.label}) <= {n for n, z in zone.items() if z == group.domain}
    colo.close()
    assert wait_until(lambda: not holding(backend, {group.label}), timeout=10)
