"""Coalesced label writes on a real API server: one patch per node, today's guarantees.

`set_resource(s)` queues its change and returns; the queue is written before the backend's
next launch or read (or after `write_window`). These tests check that a call that returned
has taken effect for every later launch and read, from many threads; that a conflict in a
batch is retried; that a failed batch reaches exactly the callers whose changes it carried
and changes nothing on its node; that bad input is refused at once; and that a shrink queued
before a launch is never over-committed.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import pytest

from escher.backends.kubernetes import KubernetesBackend
from escher.backends.kubernetes._gc import collect_garbage
from escher.core.errors import InvalidResourceNameError, ReservedResourceError, UnknownNodeError
from escher.core.resources import Resources
from escher.core.task import TaskSpec
from tests.backends.kubernetes import _tasks
from tests.backends.kubernetes.conftest import POOL_LABEL, POOLS

T = TypeVar("T")
WAIT = 60.0
NODE, OTHER = POOLS["extra"]


def fresh(prefix: str = "c") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allocatable(cluster: Any, node: str) -> dict[str, str]:
    return dict(cluster.api.read_node(node).status.allocatable)


def raw_patch(cluster: Any, node: str, resource: str, value: str | None) -> None:
    body = {"status": {"capacity": {resource: value}, "allocatable": {resource: value}}}
    cluster.api.patch_node_status(node, body, _content_type="application/merge-patch+json")


class Caller:
    """One dedicated thread: a caller of the backend with its own identity."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1)

    def __call__(self, fn: Callable[..., T], *args: Any) -> T:
        return self._pool.submit(fn, *args).result(WAIT)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture
def backend(k8s_cluster: Any) -> Iterator[KubernetesBackend]:
    instance: KubernetesBackend = k8s_cluster.backend("extra", write_window=5.0)  # flush by hand
    try:
        yield instance
    finally:
        instance.close()
        collect_garbage(
            instance.api,
            instance.names,
            namespace=k8s_cluster.namespace,
            node_selector=f"{POOL_LABEL}=extra",
            everything=True,
        )


def test_sequential_calls_become_one_write_per_node(k8s_cluster: Any, backend: Any) -> None:
    labels = [fresh() for _ in range(10)]
    before = backend.node_writes
    for label in labels:  # as ten one-label policies set up one after another
        assert backend.set_resources({label: 1}, {}) == (NODE, OTHER)
    state = backend.get_cluster_state()  # a read shows the queued changes as made ...
    assert backend.node_writes == before  # ... without writing them
    for node in (NODE, OTHER):
        assert all(state.node(node).total[label] == 1 for label in labels)
        assert all(state.node(node).available[label] == 1 for label in labels)
    backend.flush_writes()
    assert backend.node_writes - before == 2
    for node in (NODE, OTHER):
        alloc = allocatable(k8s_cluster, node)
        assert all(alloc[f"escher.io/{label}"] == "1" for label in labels)


def test_later_calls_win_and_a_returned_call_is_seen_by_every_read(
    k8s_cluster: Any, backend: Any
) -> None:
    label = fresh()
    backend.set_resource(label, 3, NODE)
    backend.set_resource(label, 5, NODE)
    backend.set_resource(label, 0, NODE)
    backend.set_resource(label, 2, NODE)
    assert backend.get_cluster_state().node(NODE).total[label] == 2
    backend.flush_writes()
    assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "2"
    backend.set_resource(label, 0, NODE)
    assert label not in backend.get_cluster_state().node(NODE).total  # queued, shown
    backend.flush_writes()
    assert f"escher.io/{label}" not in allocatable(k8s_cluster, NODE)


def test_many_threads_each_see_their_own_writes(k8s_cluster: Any) -> None:
    backend = k8s_cluster.backend("extra")  # the default window: background flushes too
    threads, rounds = 12, 6
    labels = [fresh(f"t{i}") for i in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(i: int) -> None:
        try:
            barrier.wait(WAIT)
            node = (NODE, OTHER)[i % 2]
            for n in range(1, rounds + 1):
                backend.set_resource(labels[i], n, node)
                if n % 2 == 0:  # a read after a returned call sees it, whoever flushed
                    assert backend.get_cluster_state().node(node).total[labels[i]] == n
            backend.set_resources({labels[i]: 7}, {})  # last call: every node
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join(WAIT)
        assert not errors, errors
        state = backend.get_cluster_state()
        backend.flush_writes()
        for node in (NODE, OTHER):
            alloc = allocatable(k8s_cluster, node)
            for label in labels:
                assert state.node(node).total[label] == 7
                assert alloc[f"escher.io/{label}"] == "7"
        assert backend.node_writes < threads * (rounds + 2)  # calls really shared writes
    finally:
        backend.set_resources(dict.fromkeys(labels, 0), {})
        backend.close()


def test_a_conflict_in_a_batch_is_retried(k8s_cluster: Any, backend: Any) -> None:
    first, second, foreign = fresh(), fresh(), fresh()
    backend.set_resource(first, 1, NODE)
    backend.flush_writes()  # escher now remembers the node's resourceVersion
    backend.set_resources({first: 2, second: 4}, NODE)
    backend.set_resource(second, 3, NODE)
    raw_patch(k8s_cluster, NODE, f"example.com/{foreign}", "1")  # the node changes meanwhile
    before = backend.conflicts
    backend.flush_writes()
    assert backend.conflicts == before + 1
    alloc = allocatable(k8s_cluster, NODE)
    assert alloc[f"escher.io/{first}"] == "2" and alloc[f"escher.io/{second}"] == "3"
    assert alloc[f"example.com/{foreign}"] == "1"  # the other writer's change is kept
    raw_patch(k8s_cluster, NODE, f"example.com/{foreign}", None)


def test_a_failed_batch_reaches_exactly_the_callers_it_carried(
    k8s_cluster: Any, backend: Any
) -> None:
    taken, good, elsewhere = fresh("taken"), fresh("good"), fresh("else")
    backend.get_cluster_state()  # escher's view of the nodes, before someone else's resource
    raw_patch(k8s_cluster, NODE, f"escher.io/{taken}", "1")  # under escher's domain, not ours
    a, b, c = Caller(), Caller(), Caller()
    try:
        a(backend.set_resource, taken, 2, NODE)  # its view is stale: accepted, queued
        b(backend.set_resource, good, 1, NODE)  # shares the node's patch with a's change
        c(backend.set_resource, elsewhere, 1, OTHER)  # another node, another patch
        backend.flush_writes()  # this thread carried nothing: no error here
        with pytest.raises(ReservedResourceError, match=f"{taken}.*did not create"):
            a(backend.get_cluster_state)
        with pytest.raises(ReservedResourceError, match=f"writing {good} on node"):
            b(backend.set_resource, fresh(), 1, OTHER)  # its next call, whatever it is
        assert elsewhere in c(backend.get_cluster_state).node(OTHER).total  # c's landed
        a(backend.get_cluster_state)  # an error is raised once
        alloc = allocatable(k8s_cluster, NODE)
        assert alloc[f"escher.io/{taken}"] == "1"  # nothing changed on the failed node
        assert f"escher.io/{good}" not in alloc
        with pytest.raises(ReservedResourceError):  # known now: refused before queueing
            backend.set_resource(taken, 3, NODE)
    finally:
        for caller in (a, b, c):
            caller.close()
        raw_patch(k8s_cluster, NODE, f"escher.io/{taken}", None)


def test_a_vector_selector_sees_queued_changes_without_writing_them(
    k8s_cluster: Any, backend: Any
) -> None:
    marker, follower = fresh("m"), fresh("f")
    before = backend.node_writes
    backend.set_resource(marker, 2, NODE)  # queued
    assert backend.set_resource(follower, 1, {marker: 1}) == (NODE,)  # selected by it
    assert backend.node_writes == before  # the selection wrote nothing
    state = backend.get_cluster_state()
    assert state.node(NODE).total[follower] == 1 and follower not in state.node(OTHER).total
    backend.flush_writes()
    assert backend.node_writes == before + 1  # both changes in one patch
    alloc = allocatable(k8s_cluster, NODE)
    assert alloc[f"escher.io/{marker}"] == "2" and alloc[f"escher.io/{follower}"] == "1"
    backend.set_resources({marker: 0, follower: 0}, NODE)


def test_a_launch_returns_before_its_labels_are_written_and_its_pod_waits_for_them(
    k8s_cluster: Any,
) -> None:
    backend = k8s_cluster.backend("extra", write_window=5.0)
    label = fresh("slot")
    held = backend._nodes._node_lock(NODE)  # the node's writer waits for this lock
    try:
        backend.set_resource(label, 1, NODE)  # queued; nowhere else
        spec = TaskSpec(_tasks.span, (0.1,), resources=Resources({label: 1}), name=label)
        with held:  # the write cannot land while the launch runs
            ref = backend.launch(spec)  # returns: it does not wait for the write
            time.sleep(1.0)
            pods = k8s_cluster.api.list_namespaced_pod(k8s_cluster.namespace).items
            assert not [p for p in pods if p.metadata.name.startswith(f"escher-{label}-")]
        assert ref.result(timeout=WAIT)[0] == NODE  # created once the write landed
        assert backend.node_writes == 1
    finally:
        backend.set_resource(label, 0, NODE)
        backend.close()


def test_bad_input_is_refused_at_once_and_queues_nothing(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    with pytest.raises(InvalidResourceNameError):
        backend.set_resources({label: 1, "bad label": 1}, NODE)
    with pytest.raises(UnknownNodeError):
        backend.set_resource(label, 1, NODE + "-gone")
    before = backend.node_writes
    backend.flush_writes()
    assert backend.node_writes == before
    assert label not in backend.get_cluster_state().node(NODE).total


def test_a_queued_shrink_is_in_force_before_the_next_launch(k8s_cluster: Any) -> None:
    backend = k8s_cluster.backend("extra", write_window=5.0)
    label = fresh("slot")
    try:
        backend.set_resource(label, 2, NODE)
        backend.flush_writes()
        backend.set_resource(label, 1, NODE)  # queued; the launches below must see it
        refs = [
            backend.launch(TaskSpec(_tasks.span, (1.0,), resources=Resources({label: 1})))
            for _ in range(3)
        ]
        spans = sorted(ref.result(timeout=WAIT)[1:] for ref in refs)
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end - 0.05, spans  # one at a time: never over-committed
    finally:
        backend.set_resource(label, 0, NODE)
        backend.close()


def test_ten_one_group_policies_cost_the_writes_of_one_ten_group_policy(k8s_cluster: Any) -> None:
    from escher.esl import AntiAffinity

    writes, closes = {}, {}
    for form in ("per-group", "groups"):
        backend = k8s_cluster.backend("extra", write_window=5.0)
        try:
            if form == "per-group":
                policies = [AntiAffinity(backend, name=f"pg{i}") for i in range(10)]
            else:
                policies = [AntiAffinity(backend, groups=[f"g{i}" for i in range(10)], name="all")]
            backend.flush_writes()
            state = backend.get_cluster_state()
            writes[form] = backend.node_writes
            labels = [label for p in policies for label in p.ledger()]
            for node in (NODE, OTHER):
                assert all(state.node(node).total[label] == 1 for label in labels)
            for policy in policies:  # each close reads the nodes: that writes nothing
                policy.close()
            assert not any(
                label in backend.get_cluster_state().node(NODE).total for label in labels
            )
            backend.flush_writes()
            closes[form] = backend.node_writes - writes[form]
            alloc = allocatable(k8s_cluster, NODE)
            assert not any(f"escher.io/{label}" in alloc for label in labels)
        finally:
            backend.close()
    assert writes == {"per-group": 2, "groups": 2}  # one patch per node, either way
    assert closes == {"per-group": 2, "groups": 2}  # and so do the closes


def test_a_node_deleted_before_its_queued_write_owes_nothing(k8s_cluster: Any) -> None:
    """The change goes with the node, as if the node had been deleted just after the write:
    the caller did nothing wrong, so its next call raises nothing (chaos churn found it)."""
    spare = k8s_cluster.add_node("extra", prefix="k8s-gone")
    backend = k8s_cluster.backend("extra", write_window=5.0)
    label = fresh()
    try:
        backend.set_resource(label, 1, spare)  # queued: the node is alive when checked
        backend.set_resource(label, 1, NODE)
        k8s_cluster.api.delete_node(spare)
        backend.flush_writes()  # nothing owed
        state = backend.get_cluster_state()
        assert state.node(NODE).total[label] == 1  # the other node's change landed
        assert spare not in state.nodes
    finally:
        backend.set_resource(label, 0, NODE)
        backend.close()
