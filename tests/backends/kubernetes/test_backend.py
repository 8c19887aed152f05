"""Kubernetes-specific behaviour, against the real control plane (see conftest.py)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

import escher
from escher.backends import create_backend
from escher.backends.kubernetes import KubernetesBackend, ResultTooLargeError
from escher.backends.kubernetes._gc import collect_garbage
from escher.cli import main as cli
from escher.core.errors import (
    ConfigError,
    ConflictError,
    InvalidCapacityError,
    InvalidResourceNameError,
    ReservedResourceError,
    TaskFailedError,
    UnknownNodeError,
    UnschedulableError,
)
from escher.core.resources import Resources
from escher.core.task import StatusCode, TaskSpec, TaskState
from escher.testing.conformance import wait_until
from tests.backends.kubernetes import _tasks
from tests.backends.kubernetes.conftest import POOL_LABEL, POOLS

WAIT = 60.0
NODE = POOLS["extra"][0]
OTHER = POOLS["extra"][1]


def fresh(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allocatable(cluster: Any, node: str) -> dict[str, str]:
    return dict(cluster.api.read_node(node).status.allocatable)


def capacity(cluster: Any, node: str) -> dict[str, str]:
    return dict(cluster.api.read_node(node).status.capacity)


def annotations(cluster: Any, node: str) -> dict[str, str]:
    return dict(cluster.api.read_node(node).metadata.annotations or {})


def raw_patch(cluster: Any, node: str, resource: str, value: str | None) -> None:
    body = {"status": {"capacity": {resource: value}, "allocatable": {resource: value}}}
    cluster.api.patch_node_status(node, body, _content_type="application/merge-patch+json")


@pytest.fixture
def backend(k8s_cluster: Any) -> Iterator[KubernetesBackend]:
    instance = k8s_cluster.backend("extra")
    escher.init(instance)
    try:
        yield instance
    finally:
        escher.shutdown()
        collect_garbage(
            instance.api,
            instance.names,
            namespace=k8s_cluster.namespace,
            node_selector=f"{POOL_LABEL}=extra",
            everything=True,
        )


# --- set_resource -----------------------------------------------------------------------
def test_capacity_and_allocatable_both_set_and_marked(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    assert backend.set_resource(label, 3, NODE) == (NODE,)
    backend.flush_writes()  # other clients see a queued write once it is flushed
    assert capacity(k8s_cluster, NODE)[f"escher.io/{label}"] == "3"
    assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "3"
    mark = annotations(k8s_cluster, NODE)[f"ephemeral.escher.io/{label}"]
    assert mark == f"{k8s_cluster.namespace}/{backend.session_id}"  # where its lease lives
    node = backend.get_cluster_state().node(NODE)
    assert node.total[label] == 3 and label in node.ephemeral
    assert node.total["CPU"] == 4 and "CPU" not in node.ephemeral
    backend.set_resource(label, 0, NODE)
    backend.flush_writes()
    assert f"escher.io/{label}" not in allocatable(k8s_cluster, NODE)
    assert f"ephemeral.escher.io/{label}" not in annotations(k8s_cluster, NODE)


def test_stale_resource_version_is_retried(k8s_cluster: Any, backend: Any) -> None:
    label, other = fresh(), fresh()
    backend.set_resource(label, 1, NODE)
    backend.flush_writes()  # caches the node's resourceVersion
    raw_patch(k8s_cluster, NODE, f"example.com/{other}", "1")  # someone else writes
    before = backend.conflicts
    backend.set_resource(label, 2, NODE)
    backend.flush_writes()
    assert backend.conflicts == before + 1
    assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "2"
    assert allocatable(k8s_cluster, NODE)[f"example.com/{other}"] == "1"  # not lost
    raw_patch(k8s_cluster, NODE, f"example.com/{other}", None)


def test_conflict_budget_exhausted_raises_and_changes_nothing(k8s_cluster: Any) -> None:
    strict = k8s_cluster.backend("extra", conflict_retries=0, write_window=0)  # no coalescing
    try:
        label, other = fresh(), fresh()
        strict.set_resource(label, 1, NODE)
        raw_patch(k8s_cluster, NODE, f"example.com/{other}", "1")
        with pytest.raises(ConflictError, match="retry"):
            strict.set_resource(label, 5, NODE)
        assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "1"
        strict.set_resource(label, 5, NODE)  # the failed attempt refreshed the cache
        assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "5"
        strict.set_resource(label, 0, NODE)
        raw_patch(k8s_cluster, NODE, f"example.com/{other}", None)
    finally:
        strict.close()


def test_concurrent_writers_in_separate_processes_lose_nothing(k8s_cluster: Any) -> None:
    writers = [k8s_cluster.backend("extra") for _ in range(4)]
    labels = [[fresh(f"w{i}") for _ in range(5)] for i in range(len(writers))]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(writers))

    def write(i: int) -> None:
        try:
            writers[i].get_cluster_state()  # every writer caches the same resourceVersion
            barrier.wait(WAIT)
            for n, label in enumerate(labels[i]):
                writers[i].set_resource(label, n + 1, NODE)
            writers[i].flush_writes()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(len(writers))]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        assert not errors
        alloc = allocatable(k8s_cluster, NODE)
        for group in labels:
            for n, label in enumerate(group):
                assert alloc[f"escher.io/{label}"] == str(n + 1)
        assert sum(w.conflicts for w in writers) >= 1  # they really collided
    finally:
        for w in writers:
            w.close()


def test_delete_is_idempotent_and_absent_delete_is_fine(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    assert backend.set_resource(label, 0, NODE) == (NODE,)
    backend.set_resource(label, 2, NODE)
    backend.set_resource(label, 0, NODE)
    backend.set_resource(label, 0, NODE)
    assert f"escher.io/{label}" not in capacity(k8s_cluster, NODE)


def test_fractional_capacity_rejected_before_the_api(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    before = k8s_cluster.api.read_node(NODE).metadata.resource_version
    with pytest.raises(InvalidCapacityError, match="whole"):
        backend.set_resource(label, 0.5, NODE)
    assert k8s_cluster.api.read_node(NODE).metadata.resource_version == before
    with pytest.raises(InvalidCapacityError):
        backend.launch(TaskSpec(_tasks.env_node, resources=Resources({label: 0.5})))


@pytest.mark.parametrize("bad", ["a/b", "kubernetes.io/x", "-x", "x_", "x" * 64, "sp ace"])
def test_bad_labels_never_reach_the_api(k8s_cluster: Any, backend: Any, bad: str) -> None:
    before = k8s_cluster.api.read_node(NODE).metadata.resource_version
    with pytest.raises(InvalidResourceNameError):
        backend.set_resource(bad, 1, NODE)
    assert k8s_cluster.api.read_node(NODE).metadata.resource_version == before


def test_longest_label_is_a_valid_extended_resource(k8s_cluster: Any, backend: Any) -> None:
    label = "L" + uuid.uuid4().hex[:8] + "x" * 54
    assert len(label) == 63
    backend.set_resource(label, 1, NODE)
    backend.flush_writes()
    assert allocatable(k8s_cluster, NODE)[f"escher.io/{label}"] == "1"


@pytest.mark.parametrize("domain", ["kubernetes.io", "node.kubernetes.io", "x.k8s.io", "Bad_", ""])
def test_reserved_or_malformed_domain_is_a_config_error(k8s_cluster: Any, domain: str) -> None:
    with pytest.raises(ConfigError):
        k8s_cluster.backend("extra", domain=domain)


def test_requests_under_kubernetes_io_are_refused(backend: Any) -> None:
    with pytest.raises(InvalidResourceNameError, match="reserve"):
        backend.launch(TaskSpec(_tasks.env_node, resources=Resources({"kubernetes.io/x": 1})))


def test_custom_domain(k8s_cluster: Any) -> None:
    other = k8s_cluster.backend("extra", domain="sched.example.com")
    try:
        label = fresh()
        other.set_resource(label, 2, NODE)
        other.flush_writes()
        assert allocatable(k8s_cluster, NODE)[f"sched.example.com/{label}"] == "2"
        assert label in other.get_cluster_state().node(NODE).ephemeral
        other.set_resource(label, 0, NODE)
    finally:
        other.close()


def test_unknown_and_ineligible_nodes(k8s_cluster: Any, backend: Any) -> None:
    with pytest.raises(UnknownNodeError, match="Did you mean"):
        backend.set_resource(fresh(), 1, NODE + "z")
    with pytest.raises(UnknownNodeError, match="node_selector"):  # exists, other pool
        backend.set_resource(fresh(), 1, POOLS["conformance"][0])
    assert set(backend.get_cluster_state().nodes) == set(POOLS["extra"])


# --- gc -------------------------------------------------------------------------------
def gc(*args: str) -> Any:
    return CliRunner().invoke(cli, ["gc", *args])


def test_gc_removes_only_what_escher_created(k8s_cluster: Any, backend: Any) -> None:
    mine, foreign = fresh("mine"), fresh("foreign")
    backend.set_resource(mine, 2, NODE)
    backend.set_resource(mine, 1, OTHER)
    backend.flush_writes()
    raw_patch(k8s_cluster, NODE, f"escher.io/{foreign}", "7")  # same domain, not ours
    raw_patch(k8s_cluster, NODE, "example.com/dongle", "1")
    kube = ["--kubeconfig", k8s_cluster.kubeconfig, "--namespace", k8s_cluster.namespace]
    try:
        # escher's last view of the node predates the foreign resource: the queued write
        # finds it, changes nothing, and the error reaches this caller at the flush.
        backend.set_resource(foreign, 3, NODE)
        with pytest.raises(ReservedResourceError, match="did not create"):
            backend.flush_writes()
        with pytest.raises(ReservedResourceError):  # now known: refused at once
            backend.set_resource(foreign, 0, NODE)
        # The session is alive: gc keeps its labels and says so.
        result = gc(*kube, "--label", mine)
        assert result.exit_code == 0, result.output
        assert f"kept label {mine} on node {NODE}" in result.output
        assert allocatable(k8s_cluster, NODE)[f"escher.io/{mine}"] == "2"
        result = gc(*kube, "--dry-run", "--all-sessions", "--label", mine)
        assert result.exit_code == 0, result.output
        assert f"would remove label {mine} on node {NODE}" in result.output
        assert allocatable(k8s_cluster, NODE)[f"escher.io/{mine}"] == "2"  # dry run
        result = gc(*kube, "--all-sessions", "--label", mine, "--format", "json")
        assert result.exit_code == 0, result.output
        assert f"label {mine} on node {OTHER}" in json.loads(result.stdout)["removed"]
        alloc = allocatable(k8s_cluster, NODE)
        assert f"escher.io/{mine}" not in alloc
        assert f"escher.io/{mine}" not in allocatable(k8s_cluster, OTHER)
        assert alloc[f"escher.io/{foreign}"] == "7" and alloc["example.com/dongle"] == "1"
        assert f"ephemeral.escher.io/{mine}" not in annotations(k8s_cluster, NODE)
        # The foreign one under escher's domain is still visible to escher, by its label.
        assert backend.get_cluster_state().node(NODE).total[foreign] == 7
    finally:
        raw_patch(k8s_cluster, NODE, f"escher.io/{foreign}", None)
        raw_patch(k8s_cluster, NODE, "example.com/dongle", None)


def test_gc_options_are_checked(k8s_cluster: Any) -> None:
    result = gc("--backend", "memory", "--kubeconfig", k8s_cluster.kubeconfig)
    assert result.exit_code == 3 and "--backend kubernetes" in result.stderr
    result = gc("--backend", "memory", "--label", "x")
    assert result.exit_code == 3 and "--label" in result.stderr
    result = gc("--backend", "memory", "--format", "json")
    assert result.exit_code == 0 and json.loads(result.stdout)["removed"] == []


# --- tasks ----------------------------------------------------------------------------
def test_failed_scheduling_reason_is_surfaced(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    ref = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({label: 1})))
    assert wait_until(lambda: ref.status.code is StatusCode.UNSCHEDULABLE, timeout=WAIT)
    assert f"Insufficient escher.io/{label}" in ref.status.reason
    facts = backend.describe_task(ref)
    assert facts["namespace"] == k8s_cluster.namespace and facts["node"] is None
    assert facts["pod"].startswith("escher-env-node-")
    assert wait_until(lambda: backend.describe_task(ref)["scheduler_message"], timeout=WAIT)
    message = backend.describe_task(ref)["scheduler_message"]  # the scheduler's own event
    assert f"Insufficient escher.io/{label}" in message and "nodes are available" in message
    assert ref.state is TaskState.PENDING and ref.cancel() is True
    assert backend.describe_task(ref)["pod"] is None  # final: no current pod


def test_describe_task_of_a_bound_task(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    backend.set_resource(label, 1, NODE)
    ref = backend.launch(TaskSpec(_tasks.sleep_then_node, (2.0,), resources=Resources({label: 1})))
    assert wait_until(lambda: backend.describe_task(ref)["node"] == NODE, timeout=WAIT)
    facts = backend.describe_task(ref)
    assert facts["scheduler_message"] is None and facts["pod"]
    assert ref.result(WAIT) == NODE
    assert backend.describe_task(ref)["node"] == NODE


def test_pod_requests_equal_limits_and_downward_api(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    backend.set_resource(label, 1, OTHER)
    ref = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({label: 1, "CPU": 0.5})))

    def pods_of_task() -> list[Any]:
        selector = f"escher.io/task={ref.id}"
        return list(
            k8s_cluster.api.list_namespaced_pod(
                k8s_cluster.namespace, label_selector=selector
            ).items
        )

    assert wait_until(lambda: len(pods_of_task()) == 1, timeout=WAIT)  # created by the pipeline
    pods = pods_of_task()
    res = pods[0].spec.containers[0].resources
    assert res.requests[f"escher.io/{label}"] == res.limits[f"escher.io/{label}"] == "1"
    assert res.requests["cpu"] == "500m" and "cpu" not in (res.limits or {})
    assert pods[0].spec.node_selector == {POOL_LABEL: "extra"}
    assert ref.result(WAIT) == (OTHER, OTHER)  # escher.node_id() and $NODE_NAME
    assert wait_until(
        lambda: (
            not k8s_cluster.api.list_namespaced_pod(
                k8s_cluster.namespace, label_selector=f"escher.io/task={ref.id}"
            ).items
        )
    )  # finished pod deleted


def test_cluster_state_subtracts_requests_of_running_pods(k8s_cluster: Any, backend: Any) -> None:
    label = fresh()
    backend.set_resource(label, 2, NODE)
    ref = backend.launch(
        TaskSpec(_tasks.sleep_then_node, (3.0,), resources=Resources({label: 1, "CPU": 1}))
    )
    assert wait_until(lambda: ref.state is TaskState.RUNNING, timeout=WAIT)
    node = backend.get_cluster_state().node(NODE)
    assert node.available[label] == 1 and node.total[label] == 2
    assert node.available["CPU"] == 3
    assert ref.cancel() is False  # it started
    assert ref.result(WAIT) == NODE
    assert wait_until(lambda: backend.get_cluster_state().node(NODE).available[label] == 2)


def test_infeasible_physical_request_fails_at_once(backend: Any) -> None:
    ref = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({"CPU": 5})))
    assert ref.status.code is StatusCode.INFEASIBLE and ref.done()
    with pytest.raises(UnschedulableError, match="allocatable"):
        ref.result(0)
    # A label no node has yet is not infeasible: it may be created later.
    waiting = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({fresh(): 1})))
    assert not waiting.done() and waiting.cancel()
    # A burst with one physical request checks the node that fitted it last; a request no
    # node covers is still refused, with or without such a hint.
    label = fresh()
    burst = [
        backend.launch(TaskSpec(_tasks.env_node, resources=Resources({"CPU": 1, label: 1})))
        for _ in range(3)
    ]
    assert not any(ref.done() for ref in burst)
    assert all(ref.cancel() for ref in burst)
    for cpu in (5, 4.5):
        ref = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({"CPU": cpu})))
        assert ref.status.code is StatusCode.INFEASIBLE


def test_oversize_result_is_a_clear_error(backend: Any) -> None:
    ref = backend.launch(TaskSpec(_tasks.big_result, (6000,)))
    with pytest.raises(ResultTooLargeError, match="4096 bytes"):
        ref.result(WAIT)
    small = backend.launch(TaskSpec(_tasks.big_result, (1000,)))
    assert len(small.result(WAIT)) == 1000


def test_container_tasks(backend: Any) -> None:
    ok = backend.launch(
        TaskSpec(None, image="busybox:1.36", command=["sh", "-c",
                 'printf done > "${ESCHER_TERMINATION_LOG:-/dev/termination-log}"'])
    )  # fmt: skip
    bad = backend.launch(TaskSpec(None, image="busybox:1.36", command=["sh", "-c", "exit 3"]))
    assert ok.result(WAIT) == "done"
    with pytest.raises(TaskFailedError, match="exit code 3"):
        bad.result(WAIT)
    assert bad.state is TaskState.FAILED


def test_python_callable_needs_an_image(k8s_cluster: Any) -> None:
    """The refused launch leaves nothing behind: closing deletes no pod (none of another's)."""
    bystander = k8s_cluster.backend("extra")
    bare = k8s_cluster.backend("extra", image=None)
    try:
        running = bystander.launch(TaskSpec(_tasks.sleep_then_node, (3.0,)))
        assert wait_until(running.started, WAIT)
        with pytest.raises(ConfigError, match="image"):
            bare.launch(TaskSpec(_tasks.env_node))
        assert bare.tasks() == []
        bare.close()
        assert running.result(WAIT) in POOLS["extra"]
        assert running.retries == 0, "closing the refused backend deleted another's pod"
    finally:
        bare.close()
        bystander.close()


def test_registry_name_and_alias(k8s_cluster: Any) -> None:
    for name in ("kubernetes", "k8s"):
        made = create_backend(
            name, {"kubeconfig": k8s_cluster.kubeconfig, "namespace": k8s_cluster.namespace}
        )
        try:
            assert isinstance(made, KubernetesBackend)
            assert set(POOLS["extra"]) <= set(made.get_cluster_state().nodes)
        finally:
            made.close()


def test_close_cancels_pods_that_never_started(k8s_cluster: Any) -> None:
    short = k8s_cluster.backend("extra")
    ref = short.launch(TaskSpec(_tasks.env_node, resources=Resources({fresh(): 1})))
    short.close()
    assert ref.state is TaskState.CANCELLED
    deadline = time.monotonic() + WAIT
    while (
        time.monotonic() < deadline
        and k8s_cluster.api.list_namespaced_pod(
            k8s_cluster.namespace, label_selector=f"escher.io/session={short.session}"
        ).items
    ):
        time.sleep(0.1)
    assert not k8s_cluster.api.list_namespaced_pod(
        k8s_cluster.namespace, label_selector=f"escher.io/session={short.session}"
    ).items


def test_node_loss_check_reports_only_lost_nodes(k8s_cluster: Any) -> None:
    """The periodic check, answered by one node watch (no LIST per check): a deleted node
    is gone (None), a not-Ready one comes with its record, a Ready one is not reported."""
    gone = k8s_cluster.add_node("extra", prefix="k8s-lost")
    sick = k8s_cluster.add_node("extra", prefix="k8s-sick")
    backend = k8s_cluster.backend("extra")
    try:
        assert backend._nodes.lost([NODE, gone, sick]) == {}
        k8s_cluster.api.delete_node(gone)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ready = {"type": "Ready", "status": "False", "reason": "KubeletStopped",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
        k8s_cluster.api.patch_node_status(sick, {"status": {"conditions": [ready]}})

        def both_seen() -> bool:
            lost = backend._nodes.lost([NODE, gone, sick, "k8s-never-was"])
            return set(lost) == {gone, sick, "k8s-never-was"}

        assert wait_until(both_seen, WAIT)  # the cache follows the writes within moments
        lost = backend._nodes.lost([NODE, gone, sick])
        assert lost[gone] is None
        assert lost[sick] is not None and lost[sick].name == sick and not lost[sick].ready
        assert backend._nodes.lost([]) == {}
        watch = backend._nodes._watch
        assert watch.records([NODE]) is not None and watch.lists == 1  # listed once, watched
        backend.close()
        assert watch.records([NODE]) is None  # stopped with the backend
    finally:
        backend.close()
        k8s_cluster.api.delete_node(sick)
