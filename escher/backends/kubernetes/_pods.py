"""The pod escher creates for one task."""

from __future__ import annotations

import base64
import json
import re
import sys
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from escher.backends.kubernetes._names import (
    MANAGED_BY_KEY,
    MANAGED_BY_VALUE,
    Names,
    format_quantity,
)
from escher.core.task import TaskSpec

CONTAINER = "task"
TERMINATION_LOG = "/dev/termination-log"
RUNNER_COMMAND = ("python", "-m", "escher.backends.kubernetes.runner")
#: Environment variable with the driver's Python version ("3.11"), set in the task's pod.
PYTHON_ENV = "ESCHER_PYTHON"


def python_version_tag() -> str:
    """This interpreter's ``major.minor`` version, e.g. ``"3.11"``."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


#: Where a pod finds its ServiceAccount token (when it is mounted).
TOKEN_PATH = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")


def own_service_account(token_path: Path = TOKEN_PATH) -> str | None:
    """The ServiceAccount this process runs as, from its pod's token (None if unknown).

    The token is a JWT whose ``sub`` claim is ``system:serviceaccount:<namespace>:<name>``;
    nothing is verified here, it only names the account to give escher's task pods.
    """
    try:
        payload = token_path.read_text().strip().split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (OSError, IndexError, ValueError):
        return None
    parts = str(claims.get("sub", "")).split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] and parts[3]:
        return parts[3]
    return None


def _slug(task_name: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", task_name.lower()).strip("-")[:40].strip("-") or "task"


def pod_name(task_name: str) -> str:
    """A unique, DNS-safe pod name that shows the task's name: ``escher-<name>-<10 hex>``."""
    return f"escher-{_slug(task_name)}-{uuid.uuid4().hex[:10]}"


def name_shows_task(task_name: str) -> bool:
    """True when `pod_name` shows `task_name` as it is (then the pod carries no
    ``task-name`` annotation: every byte of a pod is stored and sent to each watcher)."""
    return _slug(task_name) == task_name


def resource_block(spec: TaskSpec, names: Names) -> dict[str, dict[str, str]]:
    """Requests and limits: extended resources need requests == limits, others requests only."""
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    for name, value in spec.resources.items():
        k8s_name = names.to_k8s(name)
        text = format_quantity(k8s_name, value)
        requests[k8s_name] = text
        if "/" in k8s_name or k8s_name not in ("cpu", "memory", "ephemeral-storage"):
            limits[k8s_name] = text
    block: dict[str, dict[str, str]] = {}
    if requests:
        block["requests"] = requests
    if limits:
        block["limits"] = limits
    return block


def build_pod(
    *,
    name: str,
    namespace: str,
    spec: TaskSpec,
    names: Names,
    session: str,
    task_id: str,
    image: str,
    command: list[str],
    env: Mapping[str, str],
    node_selector: Mapping[str, str],
    service_account: str | None,
    image_pull_secrets: Sequence[str] = (),
) -> dict[str, Any]:
    """The pod manifest (a plain dict) for `spec`.

    A pod of the runner also gets the driver's Python version (the runner refuses a task
    from another version), its own ServiceAccount's name (for the tasks it launches), and
    its node's and its own name from the downward API (``NODE_NAME``, ``POD_NAME``). A
    container task gets only `env`: every byte of a pod is stored, encoded and sent to
    each watcher of it, so escher adds nothing its own runner does not read.
    """
    env = dict(env)
    runner = tuple(command) == RUNNER_COMMAND
    if runner:
        env.setdefault(PYTHON_ENV, python_version_tag())
        if service_account:
            env.setdefault("ESCHER_K8S_SERVICE_ACCOUNT", service_account)
    env_list: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in env.items()]
    if runner:
        env_list += [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ]
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": command,
        "resources": resource_block(spec, names),
        "terminationMessagePath": TERMINATION_LOG,
        "terminationMessagePolicy": "File",
    }
    if env_list:
        container["env"] = env_list
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    if service_account:
        pod_spec["serviceAccountName"] = service_account
    if image_pull_secrets:
        pod_spec["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                MANAGED_BY_KEY: MANAGED_BY_VALUE,
                names.session_label: session,
                f"{names.domain}/task": task_id,
            },
        },
        "spec": pod_spec,
    }
    if not name_shows_task(spec.name):
        manifest["metadata"]["annotations"] = {f"{names.domain}/task-name": spec.name[:200]}
    return manifest


def node_selector_env(node_selector: Mapping[str, str]) -> str:
    return json.dumps(dict(node_selector), sort_keys=True)
