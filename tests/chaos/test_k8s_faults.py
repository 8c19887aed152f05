"""Faults on the Kubernetes backend, on the real control plane: restarts, crashes, stress.

* The API server (and, separately, etcd) restarts while labels are written and tasks run:
  no write is lost, no pod is created twice, the pod watch resumes (or lists again after
  410 Gone) and every task ends with its own result.
* A driver process is killed: `escher gc`, run from another process once the driver's
  lease expired, removes exactly what it left (labels, pods, its lease), never what a live
  session uses.
* The random-operations stress workload, with nodes deleted under running pods.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escher.backends.base import Backend
from escher.core.resources import Resources
from escher.core.task import TaskSpec, TaskState
from escher.testing.conformance import mark_ran, wait_until
from escher.testing.stress import NodeChurn, StressConfig, run_stress
from tests.support.k8s_fixture import POOL_LABEL, REPO

pytestmark = [pytest.mark.chaos, pytest.mark.k8s]

WAIT = 120.0
POOL = "chaos"


@pytest.fixture
def pool(k8s_cluster: Any) -> Iterator[list[str]]:
    """Two fresh 4-CPU nodes of their own pool, deleted after the test."""
    nodes = [k8s_cluster.add_node(POOL, cpu="4", prefix="k8s-chaos") for _ in range(2)]
    yield nodes
    for node in nodes:
        with contextlib.suppress(Exception):
            k8s_cluster.api.delete_node(node)


def node_status(cluster: Any, node: str) -> tuple[dict[str, str], dict[str, str]]:
    status = cluster.api.read_node(node).status
    return dict(status.capacity or {}), dict(status.allocatable or {})


def executed(cluster: Any, task_name: str) -> int:
    """How many pods of the task named `task_name` the kubelet ran."""
    pattern = re.compile(rf"^escher-{re.escape(task_name)}-[0-9a-f]{{10}}$")
    return sum(1 for name in list(cluster.kubelet.executed) if pattern.match(name))


# --- restarts under load ------------------------------------------------------------------
class Load:
    """Label writes in a loop and tasks launched in waves, while the plane is disturbed."""

    def __init__(self, backend: Backend, nodes: list[str], tmp: Path) -> None:
        self.backend, self.nodes, self.tmp = backend, nodes, tmp
        self.labels = [f"churn-{uuid.uuid4().hex[:6]}-{i}" for i in range(3)]
        self.fixed = f"fixed-{uuid.uuid4().hex[:6]}"
        self.tag = uuid.uuid4().hex[:6]  # task names unique to this run (the kubelet counts all)
        self.written: dict[str, dict[str, float]] = {}
        self.errors: list[BaseException] = []
        self.refs: list[Any] = []
        self.writes = 0
        self.stop = threading.Event()
        backend.set_resources({self.fixed: 4}, {"CPU": 1})

    def write_loop(self) -> None:
        i = 0
        while not self.stop.is_set():
            i += 1
            node = self.nodes[i % len(self.nodes)]
            caps = {label: float((i + n) % 5 + 1) for n, label in enumerate(self.labels)}
            try:
                self.backend.set_resources(caps, node)
            except BaseException as exc:
                self.errors.append(exc)
                return
            self.written[node] = caps
            self.writes += 1

    def launch(self, wave: str, count: int) -> None:
        for i in range(count):
            key = f"{wave}{i}"
            spec = TaskSpec(
                mark_ran,
                (str(self.tmp), key),
                resources=Resources({self.fixed: 1}),
                name=f"chaos-{self.tag}-{key}",
            )
            self.refs.append((key, self.backend.launch(spec)))

    def stuck(self, backend: Any, cluster: Any) -> str:
        """What the unfinished tasks and their pods look like, for a failure message."""
        lines = []
        for key, ref in self.refs:
            if ref.done():
                continue
            facts = backend.describe_task(ref)
            pod = facts["pod"]
            phase = "-"
            if pod:
                with contextlib.suppress(Exception):
                    phase = cluster.api.read_namespaced_pod(pod, facts["namespace"]).status.phase
            lines.append(f"{key}: {ref.state.name} {facts} phase={phase}")
        errors = [repr(e)[:200] for e in cluster.kubelet.errors[-5:]]
        return "\n".join([*lines, f"kubelet errors: {errors}", f"{backend.describe()}"])

    def check(self, cluster: Any) -> None:
        assert not self.errors, self.errors
        assert self.writes > 0
        for key, ref in self.refs:
            assert ref.result(WAIT) == key, ref
            assert ref.state is TaskState.FINISHED and ref.retries == 0
            assert (self.tmp / key).read_text() == "ran\n"  # its body ran exactly once
            assert executed(cluster, f"chaos-{self.tag}-{key}") == 1  # one pod, never two
        self.backend.flush_writes()  # the loop's last calls may still be queued
        for node, caps in self.written.items():  # the last write of each node is there
            capacity, allocatable = node_status(cluster, node)
            for label, value in caps.items():
                assert capacity[f"escher.io/{label}"] == allocatable[f"escher.io/{label}"]
                assert capacity[f"escher.io/{label}"] == str(int(value)), (node, label)


def _restart_under_load(
    cluster: Any, pool: list[str], tmp_path: Path, restart: Any
) -> dict[str, Any]:
    backend = cluster.backend(POOL, node_check_seconds=1.0)
    try:
        load = Load(backend, pool, tmp_path)
        writer = threading.Thread(target=load.write_loop, daemon=True)
        writer.start()
        load.launch("a", 6)
        assert wait_until(lambda: load.writes >= 5, timeout=WAIT)
        restart(down_seconds=2.0)
        load.launch("b", 6)  # the API server has just come back
        done = wait_until(lambda: all(r.done() for _, r in load.refs), timeout=WAIT)
        assert done, load.stuck(backend, cluster)
        load.stop.set()
        writer.join(WAIT)
        load.check(cluster)
        facts = backend.describe()
        backend.set_resources(dict.fromkeys([*load.labels, load.fixed], 0), {"CPU": 1})
        return facts
    finally:
        backend.close()


def test_apiserver_restart_under_load(k8s_cluster: Any, pool: list[str], tmp_path: Path) -> None:
    facts = _restart_under_load(k8s_cluster, pool, tmp_path, k8s_cluster.cp.restart_apiserver)
    watch = facts["pod_watch"]
    assert watch["resumes"] + watch["lists"] - 1 >= 1  # the watch broke and came back


def test_etcd_restart_under_load(k8s_cluster: Any, pool: list[str], tmp_path: Path) -> None:
    _restart_under_load(k8s_cluster, pool, tmp_path, k8s_cluster.cp.restart_etcd)


def test_pods_start_once_the_token_request_succeeds(
    k8s_cluster: Any, pool: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet's TokenRequest fails (the API server restarting): it tries again later."""
    api = k8s_cluster.kubelet.api
    request_token = api.create_namespaced_service_account_token
    failures = iter(range(4))

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if next(failures, None) is not None:
            raise ConnectionRefusedError("the API server is restarting")
        return request_token(*args, **kwargs)

    monkeypatch.setattr(api, "create_namespaced_service_account_token", flaky)
    backend = k8s_cluster.backend(POOL)
    try:
        load = Load(backend, pool, tmp_path)
        load.launch("t", 3)
        for key, ref in load.refs:
            assert ref.result(WAIT) == key and ref.retries == 0, ref
        assert next(failures, None) is None  # every injected failure was met
        backend.set_resources({load.fixed: 0}, {"CPU": 1})
    finally:
        backend.close()


# --- a driver that crashes ---------------------------------------------------------------
DRIVER = textwrap.dedent(
    """
    import sys, time
    from escher.backends.kubernetes import KubernetesBackend
    from escher.core.resources import Resources
    from escher.core.task import TaskSpec

    kubeconfig, namespace, pool_label, pool, label, node_a, node_b = sys.argv[1:8]
    b = KubernetesBackend(kubeconfig=kubeconfig, namespace=namespace,
                          node_selector={pool_label: pool}, image="none",
                          lease_seconds=3, renew_seconds=1)
    b.set_resources({label: 2}, node_a)
    b.set_resource(label, 1, node_b)
    running = b.launch(TaskSpec(None, image="none", command=["sleep", "20"], name="crash-run"))
    waiting = b.launch(TaskSpec(None, image="none", command=["true"], name="crash-wait",
                                resources=Resources({label + "-never": 1})))
    deadline = time.monotonic() + 60
    while not running.started() and time.monotonic() < deadline:
        time.sleep(0.05)
    print(b.session_id, flush=True)
    time.sleep(600)
    """
)


def _escher(*args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", "escher.cli", *args],
        capture_output=True, text=True, timeout=WAIT, env=env, cwd=str(REPO), check=False,
    )  # fmt: skip


def _session_pods(cluster: Any, session: str) -> list[Any]:
    selector = f"escher.io/session={session}"
    return list(cluster.api.list_namespaced_pod(cluster.namespace, label_selector=selector).items)


def test_gc_after_a_driver_crash_removes_exactly_what_it_left(
    k8s_cluster: Any, pool: list[str]
) -> None:
    a, b = pool
    dead_label, live_label = f"dead-{uuid.uuid4().hex[:6]}", f"live-{uuid.uuid4().hex[:6]}"
    live = k8s_cluster.backend(POOL)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, k8s_cluster.kubeconfig, k8s_cluster.namespace,
         POOL_LABEL, POOL, dead_label, a, b],
        stdout=subprocess.PIPE, text=True, env=env, cwd=str(REPO),
    )  # fmt: skip
    try:
        session = (driver.stdout.readline() if driver.stdout else "").strip()
        assert session, "the driver did not start"
        live.set_resource(live_label, 1, a)
        never = Resources({live_label + "-never": 1})
        waiting = live.launch(TaskSpec(None, image="none", command=["true"], resources=never))
        assert wait_until(lambda: len(_session_pods(k8s_cluster, session)) == 2, timeout=WAIT)
        where = ["--kubeconfig", k8s_cluster.kubeconfig, "--namespace", k8s_cluster.namespace]
        driver.send_signal(signal.SIGKILL)  # no close(): labels, pods and lease stay behind
        driver.wait(WAIT)
        # Its lease expires 3 s after the last renewal; until then gc keeps everything.
        dead = f"label {dead_label} on node {a}"

        def would_remove() -> list[str]:
            out = _escher("gc", "--dry-run", *where, "--format", "json").stdout
            return list(json.loads(out).get("removed") or []) if out.strip() else []

        # (until then the label is listed as kept: "... (session ... is alive)")
        assert wait_until(lambda: dead in would_remove(), timeout=WAIT)
        result = _escher("gc", *where, "--format", "json")
        assert result.returncode == 0, result.stderr
        lease_gone = f"lease {k8s_cluster.namespace}/escher-session-{session} (expired)"
        assert lease_gone in result.stdout
        for node in (a, b):
            capacity, allocatable = node_status(k8s_cluster, node)
            assert f"escher.io/{dead_label}" not in capacity
            assert f"escher.io/{dead_label}" not in allocatable
        assert wait_until(lambda: not _session_pods(k8s_cluster, session), timeout=WAIT)
        # The live session kept its label, its pod and its lease.
        assert node_status(k8s_cluster, a)[1][f"escher.io/{live_label}"] == "1"
        assert len(_session_pods(k8s_cluster, live.session_id)) == 1
        kept = json.loads(result.stdout)["kept"]
        assert any(item.startswith(f"label {live_label} on node {a} ") for item in kept), kept
        assert not waiting.done()
        from kubernetes import client

        leases = client.CoordinationV1Api(k8s_cluster.api.api_client)
        name = f"escher-session-{live.session_id}"
        lease = leases.read_namespaced_lease(name, k8s_cluster.namespace)
        assert lease.spec.holder_identity == live.session_id
    finally:
        if driver.poll() is None:
            driver.kill()
        live.set_resource(live_label, 0, a)
        live.close()


# --- random operations, nodes lost under running pods -------------------------------------
class KubernetesChurn(NodeChurn):
    """Add a fake node to the pool; kill one by deleting its Node object."""

    cpus = 2.0

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.added: list[str] = []

    def add(self, backend: Backend, name: str) -> str | None:
        node: str = self.cluster.add_node(POOL, cpu="2", prefix="k8s-churn")
        self.added.append(node)
        return node

    def kill(self, backend: Backend, node_id: str) -> None:
        self.cluster.kill_node(node_id)


@pytest.mark.timeout(900)
def test_random_operations_stress(k8s_cluster: Any, pool: list[str]) -> None:
    backend = k8s_cluster.backend(POOL, node_check_seconds=0.5)
    churn = KubernetesChurn(k8s_cluster)
    try:
        report = run_stress(
            backend,
            StressConfig(
                threads=4, operations=40, seed=11, time_limit=300, drain_timeout=240,
                op_timeout=90, max_hold=0.05, gangs=False, spare_nodes=1,
            ),
            churn=churn,
        )  # fmt: skip
    finally:
        backend.close()
        for node in churn.added:
            with contextlib.suppress(Exception):
                k8s_cluster.api.delete_node(node)
    print(report.summary())
    report.assert_ok()
    assert report.tasks > 0
