"""Topology ESLs on Kubernetes: fake nodes labelled ``zone`` are the domains; the real
kube-scheduler places the pods, and co-location, anti-affinity and spreading per zone hold
on where it put them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

import escher
from escher.esl import DomainAntiAffinity, DomainColocation, DomainSpread
from escher.testing.conformance import wait_until
from tests.backends.kubernetes.conftest import POOL_LABEL
from tests.support import spans as _tasks
from tests.support.k8s_control_plane import add_fake_node

WAIT = 90.0
POOL = "zones"
#: node -> zone: two zones of two nodes (4 CPUs each)
ZONES = {"k8s-za1": "za", "k8s-za2": "za", "k8s-zb1": "zb", "k8s-zb2": "zb"}


@pytest.fixture(scope="module")
def zoned_nodes(k8s_cluster: Any) -> Iterator[dict[str, str]]:
    for node, zone in ZONES.items():
        add_fake_node(
            k8s_cluster.api,
            node,
            {"cpu": "4", "memory": "8Gi"},
            labels={POOL_LABEL: POOL, "zone": zone},
        )
    try:
        yield ZONES
    finally:
        for node in ZONES:
            k8s_cluster.api.delete_node(node)


@pytest.fixture
def backend(k8s_cluster: Any, zoned_nodes: dict[str, str]) -> Iterator[Any]:
    instance = k8s_cluster.backend(pool=POOL)
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()


def holding(backend: Any, labels: set[str]) -> set[str]:
    state = backend.get_cluster_state()
    return {n for n, node in state.nodes.items() if labels & set(node.ephemeral)}


def peak_per_zone(spans: list[_tasks.Span]) -> int:
    events = sorted(
        [(s[0], 1, ZONES[s[2]]) for s in spans] + [(s[1], -1, ZONES[s[2]]) for s in spans]
    )
    running: Counter[str] = Counter()
    peak = 0
    for _, delta, zone in events:
        running[zone] += delta
        peak = max(peak, running[zone])
    return peak


def test_one_pod_per_zone_at_a_time(backend: Any) -> None:
    with DomainAntiAffinity("zone", name="daa-k8s") as aa:
        refs = [aa.launch(_tasks.span, 1.0, resources={"CPU": 1}) for _ in range(4)]
        spans = escher.get(refs, timeout=WAIT)
        labels = set(aa.ledger())
    assert {ZONES[s[2]] for s in spans} == {"za", "zb"}
    assert peak_per_zone(spans) == 1
    assert wait_until(lambda: not holding(backend, labels), timeout=20)


def test_spread_over_zones_with_max_skew(backend: Any) -> None:
    with DomainSpread("zone", max_skew=1, name="dspr-k8s") as spread:
        # long enough that all four are live at once (the skew counts live tasks)
        refs = [spread.launch(_tasks.span, 3.0, resources={"CPU": 1}) for _ in range(4)]
        assert sorted(spread.counts.values()) == [2, 2]
        spans = escher.get(refs, timeout=WAIT)
    assert sorted(Counter(ZONES[s[2]] for s in spans).values()) == [2, 2]


def test_a_group_stays_in_one_zone(backend: Any) -> None:
    with DomainColocation("zone", name="dcolo-k8s") as colo:
        group = colo.group("g", 3, {"CPU": 1})
        nodes = escher.get([group.launch(_tasks.where) for _ in range(3)], timeout=WAIT)
        assert {ZONES[n] for n in nodes} == {group.domain}
    assert wait_until(lambda: not holding(backend, {group.label}), timeout=20)
