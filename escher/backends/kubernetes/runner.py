"""The in-pod runner for Python callables: ``python -m escher.backends.kubernetes.runner``.

It reads the call from ``$ESCHER_TASK``, makes a worker backend active (so the task can call
`escher.set_resource(..., node_spec=None)` on its own node, ``$NODE_NAME`` from the downward
API, and `escher.node_id()`), runs the call, and writes the outcome to the container's
termination message (``$ESCHER_TERMINATION_LOG``, default ``/dev/termination-log``). The
exit code is 0 when the call returned and 1 when it raised.

A member of a gang placed through scheduling gates (``$ESCHER_GANG_RELEASE`` set) waits,
before calling anything, until the driver marks its pod released (that annotation set to
``go``, once every member of the gang is bound to a node); it fails after
``$ESCHER_GANG_WAIT`` seconds without it (the driver is gone: nothing of the task ran).

Before it unpickles anything, it compares its Python version with the driver's
(``$ESCHER_PYTHON``, e.g. ``3.11``, set in the pod by the driver): a pickled function only
loads in the same minor version, so a mismatch fails the task at once with a
`TaskFailedError` that names both versions and how to build a matching image.

Connection: the pod's service account when ``$KUBERNETES_SERVICE_HOST`` is set, else
``$KUBECONFIG``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from escher.backends.kubernetes._gates import GANG_RELEASE_ENV, GANG_WAIT_ENV, RELEASED
from escher.backends.kubernetes._payload import (
    TASK_ENV,
    TERMINATION_MESSAGE_LIMIT,
    decode_task,
    encode_error,
    encode_value,
)
from escher.backends.kubernetes._pods import PYTHON_ENV, python_version_tag
from escher.core.errors import TaskFailedError

DEFAULT_TERMINATION_LOG = "/dev/termination-log"


def wait_for_release(
    api: Any,
    namespace: str,
    pod: str,
    key: str,
    limit: float,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> bool:
    """Wait until pod `pod` carries annotation `key` = ``go``; False after `limit` seconds.

    Args:
        api: A `KubeApi` (lists the pod by name: the ``list`` verb escher already has).
        namespace: The pod's namespace.
        pod: The pod's name.
        key: The release annotation.
        limit: Seconds to wait at most.
        sleep: Waits between reads (first 50 ms, growing to 0.5 s).
        clock: Monotonic seconds.
    """
    deadline = clock() + limit
    pause = 0.05
    while True:
        pods, _ = api.list_pods(namespace, field_selector=f"metadata.name={pod}")
        annotations = (pods[0].get("metadata") or {}).get("annotations") or {} if pods else {}
        if annotations.get(key) == RELEASED:
            return True
        if clock() >= deadline:
            return False
        sleep(min(pause, max(0.0, deadline - clock())))
        pause = min(pause * 1.5, 0.5)


def _await_gang(backend: Any, task_name: str) -> None:
    """Block a gang member until the driver released it (see the module doc)."""
    key = os.environ.get(GANG_RELEASE_ENV)
    if not key:
        return
    limit = float(os.environ.get(GANG_WAIT_ENV) or 600)
    pod = os.environ.get("POD_NAME") or ""
    if not wait_for_release(backend.api, backend.namespace, pod, key, limit):
        raise TaskFailedError(
            f"gang member {task_name!r} (pod {pod}) was not released within {limit:g} s: the "
            "driver that launched the gang is gone or gave up; nothing of the task ran.",
            task_name=task_name,
        )


def version_mismatch(driver: str | None, task_name: str) -> TaskFailedError | None:
    """The error to report when the driver's Python (``driver``) is not this one's."""
    here = python_version_tag()
    if not driver or driver == here:
        return None
    image = os.environ.get("ESCHER_K8S_IMAGE") or "the task's image"
    return TaskFailedError(
        f"task {task_name!r} comes from a driver running Python {driver}, but {image} runs "
        f"Python {here}: a pickled function only loads in the same minor version. Build the "
        f"runner image for the driver's version (docker build --build-arg "
        f"PYTHON_VERSION={driver} ...; see the Dockerfile) or run the driver on Python {here}.",
        task_name=task_name,
    )


def _write(message: str) -> None:
    path = os.environ.get("ESCHER_TERMINATION_LOG") or DEFAULT_TERMINATION_LOG
    data = message.encode()[:TERMINATION_MESSAGE_LIMIT]
    with open(path, "wb") as fh:
        fh.write(data)


def _worker_backend() -> Any:
    """A KubernetesBackend for this pod, or None if the cluster cannot be reached."""
    from escher.backends.kubernetes.backend import KubernetesBackend

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    selector = json.loads(os.environ.get("ESCHER_K8S_NODE_SELECTOR") or "{}")
    return KubernetesBackend(
        kubeconfig=None if in_cluster else os.environ.get("KUBECONFIG"),
        in_cluster=in_cluster,
        namespace=os.environ.get("ESCHER_K8S_NAMESPACE") or "default",
        domain=os.environ.get("ESCHER_K8S_DOMAIN") or "escher.io",
        image=os.environ.get("ESCHER_K8S_IMAGE") or None,
        node_selector=selector,
        node_name=os.environ.get("NODE_NAME") or None,
        service_account=os.environ.get("ESCHER_K8S_SERVICE_ACCOUNT") or None,
        session_id=os.environ.get("ESCHER_K8S_SESSION") or None,
        write_window=0,  # a task's own writes land before its call returns (and its result)
    )


def main() -> int:
    """Run the task of this pod; return the process exit code."""
    name = os.environ.get("ESCHER_TASK_NAME", "task")
    mismatch = version_mismatch(os.environ.get(PYTHON_ENV), name)
    if mismatch is not None:
        _write(encode_error(mismatch))
        return 1
    try:
        fn, args, kwargs = decode_task(os.environ[TASK_ENV])
    except Exception as exc:
        _write(encode_error(exc, traceback.format_exc()))
        return 1
    backend = None
    try:
        from escher.core.context import install_worker_backend, running_task

        backend = _worker_backend()
        _await_gang(backend, name)
        install_worker_backend(backend)
        node = os.environ.get("NODE_NAME") or ""
        scope = running_task(backend, node) if node else nullcontext()
        with scope:
            value = fn(*args, **kwargs)
    except BaseException as exc:
        _write(encode_error(exc, traceback.format_exc()))
        return 1
    finally:
        if backend is not None:
            backend.close()
    _write(encode_value(value, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
