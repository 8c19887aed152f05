"""Integration tests for the local Kubernetes control plane (tests/support/k8s_control_plane.py).

They start real etcd + kube-apiserver + kube-scheduler processes on loopback.
Binaries come from scripts/provision-k8s.sh; without them every test is skipped.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

try:
    from tests.support.k8s_control_plane import (
        FAKE_EXIT_CODE_ANNOTATION,
        FAKE_MESSAGE_ANNOTATION,
        FAKE_RUN_SECONDS_ANNOTATION,
        ControlPlane,
        FakeKubelet,
        add_fake_node,
        binaries_available,
        set_node_resources,
        wait_for,
    )
except ImportError:  # tests/ is not a package: pytest puts tests/ itself on sys.path
    from k8s_control_plane import (  # type: ignore[no-redef]
        FAKE_EXIT_CODE_ANNOTATION,
        FAKE_MESSAGE_ANNOTATION,
        FAKE_RUN_SECONDS_ANNOTATION,
        ControlPlane,
        FakeKubelet,
        add_fake_node,
        binaries_available,
        set_node_resources,
        wait_for,
    )

pytestmark = [
    pytest.mark.k8s,
    pytest.mark.skipif(
        not binaries_available(),
        reason="Kubernetes binaries not provisioned; run scripts/provision-k8s.sh",
    ),
]

client = pytest.importorskip(
    "kubernetes.client", reason="needs the kubernetes client (escher-sched[k8s])"
)

FOO = "escher.io/foo"
NS = "default"
TIMEOUT = 30.0


@pytest.fixture(scope="module")
def cp() -> Iterator[ControlPlane]:
    with ControlPlane() as plane:
        yield plane


@pytest.fixture
def api(cp: ControlPlane) -> Any:
    return cp.core_v1()


@pytest.fixture
def tag(api: Any) -> Iterator[str]:
    """A per-test id; nodes labelled/named with it and pods with it are deleted afterwards."""
    t = uuid.uuid4().hex[:8]
    yield t
    for pod in api.list_namespaced_pod(NS, label_selector=f"escher-test={t}").items:
        api.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    for node in api.list_node(label_selector=f"escher-test={t}").items:
        api.delete_node(node.metadata.name)


def make_pod(
    name: str,
    tag: str,
    requests: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Any:
    res = client.V1ResourceRequirements(limits=requests, requests=requests) if requests else None
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={"escher-test": tag},
            annotations=annotations,
        ),
        spec=client.V1PodSpec(
            restart_policy="Never",
            # Keep the pod on this test's nodes only (nodes of other tests may linger).
            node_selector={"escher-test": tag},
            containers=[client.V1Container(name="main", image="escher/fake:latest", resources=res)],
        ),
    )


def node_of(api: Any, name: str) -> str | None:
    return api.read_namespaced_pod(name, NS).spec.node_name


def test_apiserver_ready(cp: ControlPlane, api: Any) -> None:
    assert cp.running
    status, body = cp.get("/readyz")
    assert status == 200, body
    status, body = cp.get("/version")
    # The server is the binary the fixture read the version of (any release).
    assert json.loads(body)["gitVersion"] == str(cp.version)
    assert cp.version.at_least(1, 20)
    accounts = {sa.metadata.name for sa in api.list_namespaced_service_account("default").items}
    assert "default" in accounts  # created by the fixture (no controller-manager)
    names = {ns.metadata.name for ns in api.list_namespace().items}
    assert {"default", "kube-system"} <= names
    assert cp.kubeconfig_path.is_file() and cp.ca_path.is_file()
    assert (cp.log_dir / "kube-scheduler.log").is_file()
    assert cp.startup_seconds is not None and cp.startup_seconds < 60


def test_kubeconfig_works_with_load_kube_config(cp: ControlPlane) -> None:
    from kubernetes import config

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(cp.kubeconfig_path), client_configuration=cfg)
    assert cfg.host == cp.server
    v1 = client.CoreV1Api(client.ApiClient(cfg))
    assert v1.read_namespace("default").metadata.name == "default"


def test_fake_node_has_no_not_ready_taint(api: Any, tag: str) -> None:
    node = add_fake_node(api, f"n-{tag}", {"cpu": "4", FOO: "2"}, labels={"escher-test": tag})
    assert not [t for t in node.spec.taints or [] if "not-ready" in t.key]
    assert node.status.allocatable[FOO] == "2"
    assert node.status.allocatable["pods"] == "110"
    ready = [c for c in node.status.conditions if c.type == "Ready"]
    assert ready and ready[0].status == "True"


def test_extended_resource_scheduling(api: Any, tag: str) -> None:
    node_a, node_b = f"a-{tag}", f"b-{tag}"
    add_fake_node(api, node_a, {"cpu": "4", FOO: "1"}, labels={"escher-test": tag})
    add_fake_node(api, node_b, {"cpu": "4"}, labels={"escher-test": tag})

    p1, p2 = f"p1-{tag}", f"p2-{tag}"
    api.create_namespaced_pod(NS, make_pod(p1, tag, {FOO: "1"}))
    wait_for(lambda: node_of(api, p1), TIMEOUT, what=f"{p1} to be bound")
    assert node_of(api, p1) == node_a

    api.create_namespaced_pod(NS, make_pod(p2, tag, {FOO: "1"}))

    def unschedulable() -> str | None:
        pod = api.read_namespaced_pod(p2, NS)
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable":
                return c.message
        return None

    msg = wait_for(unschedulable, TIMEOUT, what=f"{p2} to be Unschedulable")
    assert f"Insufficient {FOO}" in msg
    events = api.list_namespaced_event(
        NS, field_selector=f"involvedObject.name={p2},reason=FailedScheduling"
    ).items
    assert any(f"Insufficient {FOO}" in (e.message or "") for e in events), events
    assert node_of(api, p2) is None
    assert api.read_namespaced_pod(p2, NS).status.phase == "Pending"

    # Node b starts advertising the resource -> the scheduler retries and binds p2 there.
    set_node_resources(api, node_b, {"cpu": "4", "pods": "110", FOO: "1"})
    wait_for(lambda: node_of(api, p2), TIMEOUT, what=f"{p2} to be bound after node update")
    assert node_of(api, p2) == node_b


def test_fake_kubelet_runs_pods_to_completion(api: Any, tag: str) -> None:
    node = f"k-{tag}"
    add_fake_node(api, node, {"cpu": "4", FOO: "4"}, labels={"escher-test": tag})
    ok, bad, forever = f"ok-{tag}", f"bad-{tag}", f"forever-{tag}"
    with FakeKubelet(api, node_names=[node], start_delay=0.1, run_seconds=0.3) as kubelet:
        api.create_namespaced_pod(NS, make_pod(ok, tag, {FOO: "1"}))
        failing = {FAKE_EXIT_CODE_ANNOTATION: "3", FAKE_MESSAGE_ANNOTATION: "boom"}
        api.create_namespaced_pod(NS, make_pod(bad, tag, {FOO: "1"}, failing))
        long = {FAKE_RUN_SECONDS_ANNOTATION: "3600"}
        api.create_namespaced_pod(NS, make_pod(forever, tag, annotations=long))

        def phase(name: str) -> str:
            return api.read_namespaced_pod(name, NS).status.phase

        wait_for(lambda: phase(ok) == "Succeeded", TIMEOUT, what=f"{ok} Succeeded")
        wait_for(lambda: phase(bad) == "Failed", TIMEOUT, what=f"{bad} Failed")
        wait_for(lambda: phase(forever) == "Running", TIMEOUT, what=f"{forever} Running")

        pod = api.read_namespaced_pod(ok, NS)
        assert pod.spec.node_name == node
        term = pod.status.container_statuses[0].state.terminated
        assert term.exit_code == 0 and term.reason == "Completed"
        assert pod.status.container_statuses[0].state.running is None

        term = api.read_namespaced_pod(bad, NS).status.container_statuses[0].state.terminated
        assert term.exit_code == 3 and term.message == "boom"

        # Graceful deletion of a bound pod needs a kubelet to finish it.
        api.delete_namespaced_pod(forever, NS)

        def gone() -> bool:
            try:
                api.read_namespaced_pod(forever, NS)
            except client.ApiException as e:
                return e.status == 404
            return False

        wait_for(gone, TIMEOUT, what=f"{forever} to be deleted")
        assert (f"{NS}/{ok}", "Running") in [(n, p) for n, p, _ in kubelet.transitions]
    assert not kubelet._threads, "FakeKubelet threads did not stop"
    assert not kubelet.errors, kubelet.errors
