"""ESLs on the Kubernetes backend: the same policies as in memory, their properties checked on
pods that the real kube-scheduler placed, and their extended resources cleaned up."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import escher
from escher.esl import AntiAffinity, CoLocation, DataLocality, LoadBalance
from escher.testing.conformance import wait_until
from tests.backends.kubernetes.conftest import POOLS
from tests.support import spans as _tasks
from tests.support.spans import peak_per_node

WAIT = 90.0
NODES = sorted(POOLS["conformance"])


@pytest.fixture
def backend(k8s_cluster: Any) -> Iterator[Any]:
    instance = k8s_cluster.backend()
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()


def holders(backend: Any, labels: set[str]) -> set[str]:
    """The nodes that carry any of `labels`, read back from the API server."""
    return {
        node_id
        for node_id, node in backend.get_cluster_state().nodes.items()
        if labels & set(node.ephemeral)
    }


def test_anti_affinity_one_pod_per_node_at_a_time(backend: Any) -> None:
    with AntiAffinity(nodes=NODES, name="aa-k8s") as aa:
        owned = set(aa.ledger())
        assert owned and holders(backend, owned) == set(NODES)
        spans = escher.get([aa.launch(_tasks.span, 1.0) for _ in range(5)], timeout=WAIT)
    assert {s[2] for s in spans} <= set(NODES)
    assert peak_per_node(spans) == 1
    assert wait_until(lambda: not holders(backend, owned), timeout=20)


def test_static_load_balance_caps_pods_per_node(backend: Any) -> None:
    with LoadBalance(tasks=6, nodes=NODES, name="lb-k8s") as lb:
        assert lb.per_node == 2
        owned = set(lb.ledger())
        spans = escher.get([lb.launch(_tasks.span, 1.0) for _ in range(6)], timeout=WAIT)
    assert peak_per_node(spans) <= 2
    assert {s[2] for s in spans} == set(NODES)  # 6 pods, at most 2 per node: all 3 nodes used
    assert wait_until(lambda: not holders(backend, owned), timeout=20)


def test_data_locality_follows_the_data(backend: Any) -> None:
    a, b = NODES[:2]
    with DataLocality(name="loc-k8s") as loc:
        loc.add("shard", [b])
        assert escher.get(loc.near("shard").launch(_tasks.where), timeout=WAIT) == b
        loc.refresh("shard", [a])
        owned = set(loc.ledger())
        assert owned and holders(backend, owned) == {a}
        assert escher.get(loc.near("shard").launch(_tasks.where), timeout=WAIT) == a
    assert wait_until(lambda: not holders(backend, owned), timeout=20)


def test_known_and_unknown_groups_are_co_located(backend: Any) -> None:
    with CoLocation(name="colo-k8s") as colo:
        known = colo.group("ps", size=3, resources={"CPU": 1})
        assert known.node in NODES
        unknown = colo.unknown_group("shuffle", size=3, resources={"CPU": 1})
        owned = {known.label, unknown.label}
        assert owned <= set(colo.ledger())
        refs = [known.launch(_tasks.where) for _ in range(3)]
        refs += [unknown.launch(_tasks.where) for _ in range(3)]
        nodes = escher.get(refs, timeout=WAIT)
        assert holders(backend, owned) <= set(NODES)  # a group's label goes once it is done
    assert nodes[:3] == [known.node] * 3
    assert len(set(nodes[3:])) == 1  # the first member created the label where it landed
    assert wait_until(lambda: not holders(backend, owned), timeout=20)


def test_gang_members_start_together_through_ghost_pods(backend: Any) -> None:
    from escher.esl import Gang, Member

    members = [Member(_tasks.span, args=(1.0,), resources={"CPU": 3}) for _ in range(3)]
    with Gang(mode="ephemeral", timeout=60.0, poll=0.2, name="gang-k8s") as gang:
        spans = gang.run(members).results(WAIT)
    starts = [s[0] for s in spans]
    assert {s[2] for s in spans} == set(NODES)  # 3 CPUs each on 4-CPU nodes: one per node
    assert max(starts) < min(s[1] for s in spans)  # every member started before any ended
