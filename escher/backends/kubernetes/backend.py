"""`KubernetesBackend`: ephemeral resources as node extended resources, tasks as pods.

The real kube-scheduler does the matching: escher advertises ``<domain>/<label>`` in a
node's status (``capacity`` and ``allocatable``) and creates pods whose requests (= limits)
name those resources.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from escher.backends.base import Backend, Capability
from escher.backends.kubernetes._kube import ApiException, KubeApi, connect
from escher.backends.kubernetes._names import (
    DEFAULT_DOMAIN,
    MANAGED_BY_KEY,
    MANAGED_BY_VALUE,
    Names,
    format_quantity,
    validate_domain,
)
from escher.backends.kubernetes._payload import TASK_ENV, decode_outcome, encode_task
from escher.backends.kubernetes._pods import (
    CONTAINER,
    RUNNER_COMMAND,
    build_pod,
    node_selector_env,
    own_service_account,
    pod_name,
)
from escher.backends.kubernetes._state import (
    NodeRecord,
    Usage,
    build_state,
    physical_fits,
)
from escher.backends.kubernetes._tracker import PodTracker
from escher.core.clock import Clock, RealClock
from escher.core.cluster import ClusterState
from escher.core.context import current_task
from escher.core.errors import (
    BackendError,
    BackendUnavailableError,
    ConfigError,
    ConflictError,
    EscherError,
    NodeDiedError,
    NotInTaskError,
    ReservedResourceError,
    TaskFailedError,
    UnknownNodeError,
    UnschedulableError,
    did_you_mean,
)
from escher.core.nodespec import NodeSpec
from escher.core.task import RetryCause, Status, StatusCode, TaskRef, TaskSpec, task_error

log = logging.getLogger("escher.kubernetes")


@dataclass
class _Task:
    """Book-keeping for one launched task (it may go through several pods on retries)."""

    ref: TaskRef
    spec: TaskSpec
    pod: str = ""
    uid: str = ""
    running: bool = False
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


def _escape(key: str) -> str:
    """A JSON-pointer path segment."""
    return key.replace("~", "~0").replace("/", "~1")


class KubernetesBackend(Backend):
    """Kubernetes: node extended resources for labels, pods placed by kube-scheduler.

    Args:
        kubeconfig: Path of a kubeconfig file (default: ``$KUBECONFIG`` or ~/.kube/config).
        context: Context of the kubeconfig to use (default: its current context).
        in_cluster: Use the pod's service account instead of a kubeconfig.
        namespace: Namespace of the task pods.
        domain: Prefix of escher's extended resources: label ``grp`` becomes
            ``<domain>/grp``. Never under kubernetes.io or k8s.io.
        image: Container image for Python callables: it must have escher (and the code
            the callables need) installed. Container tasks bring their own image.
        node_selector: Node labels that make a node eligible: the cluster state, the
            node specs of `set_resource` and every pod are limited to those nodes.
        service_account: Service account of task pods (to call escher from a task).
            Default: the driver's own account when it runs in a pod (``in_cluster``), else
            the namespace's default account.
        image_pull_secrets: Names of Secrets (in `namespace`) to pull `image` with.
        node_name: The node this process runs on (default: ``$NODE_NAME``, set by the
            downward API in escher's pods); `set_resource(node_spec=None)` uses it.
        conflict_retries: Attempts after a write conflict on a node before ConflictError.
        keep_pods: Keep finished pods (for debugging) instead of deleting them.
        request_timeout: Seconds allowed for each API call.
    """

    name = "kubernetes"
    capabilities = Capability.PYTHON_TASKS | Capability.CONTAINER_TASKS

    def __init__(
        self,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        namespace: str = "default",
        domain: str = DEFAULT_DOMAIN,
        image: str | None = None,
        node_selector: Mapping[str, str] | None = None,
        service_account: str | None = None,
        node_name: str | None = None,
        conflict_retries: int = 8,
        keep_pods: bool = False,
        request_timeout: float = 30.0,
        image_pull_secrets: Sequence[str] = (),
    ) -> None:
        self._names = Names(validate_domain(domain))
        if not isinstance(namespace, str) or not namespace:
            raise ConfigError("namespace must be a non-empty string.")
        if node_selector is not None and not (
            isinstance(node_selector, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in node_selector.items())
        ):
            raise ConfigError("node_selector must map label keys to string values.")
        if (
            isinstance(conflict_retries, bool)
            or not isinstance(conflict_retries, int)
            or (conflict_retries < 0)
        ):
            raise ConfigError("conflict_retries must be an int >= 0.")
        self.namespace = namespace
        self.image = image
        self.node_selector: dict[str, str] = dict(node_selector or {})
        self._selector_text = ",".join(f"{k}={v}" for k, v in sorted(self.node_selector.items()))
        if isinstance(image_pull_secrets, str) or not all(
            isinstance(s, str) and s for s in image_pull_secrets
        ):
            raise ConfigError("image_pull_secrets must be a list of Secret names.")
        self._image_pull_secrets = tuple(image_pull_secrets)
        self._service_account = service_account or (own_service_account() if in_cluster else None)
        self._node_name = node_name or os.environ.get("NODE_NAME") or None
        self._conflict_retries = conflict_retries
        self._keep_pods = keep_pods
        self._kubeconfig = kubeconfig
        self._context = context
        self._in_cluster = in_cluster
        self._api = KubeApi(connect(kubeconfig, context, in_cluster), request_timeout)
        self.session = uuid.uuid4().hex[:12]
        self._clock = RealClock()
        self._lock = threading.RLock()
        self._records: dict[str, NodeRecord] = {}
        self._node_locks: dict[str, threading.Lock] = {}
        self._tasks: dict[str, _Task] = {}
        self._by_ref: dict[str, _Task] = {}
        self._tracker: PodTracker | None = None
        self._all_namespaces = True
        self._closed = False
        #: Write conflicts met (and retried) by set_resource, for tests and monitoring.
        self.conflicts = 0

    @property
    def clock(self) -> Clock:
        return self._clock

    @property
    def names(self) -> Names:
        """How this backend spells its resources in Kubernetes."""
        return self._names

    @property
    def api(self) -> KubeApi:
        """The JSON API wrapper this backend uses (for tools like `escher gc`)."""
        return self._api

    # --- nodes ----------------------------------------------------------------------------
    def _remember(self, rec: NodeRecord) -> NodeRecord:
        with self._lock:
            old = self._records.get(rec.name)
            if old is None or rec.newer_than(old):
                self._records[rec.name] = rec
            return self._records[rec.name]

    def _fetch(self, node: str) -> NodeRecord | None:
        """GET one node; None if it does not exist or is not eligible."""
        try:
            rec = NodeRecord.parse(self._api.get_node(node))
        except ApiException as exc:
            if exc.status == 404:
                with self._lock:
                    self._records.pop(node, None)
                return None
            raise self._api_error(exc, f"reading node {node!r}") from None
        except Exception as exc:
            raise self._unreachable(exc) from None
        with self._lock:
            self._records[node] = rec
        return rec if rec.matches(self.node_selector) else None

    def _list_records(self) -> list[NodeRecord]:
        try:
            items = self._api.list_nodes(self._selector_text or None)
        except ApiException as exc:
            raise self._api_error(exc, "listing nodes") from None
        except Exception as exc:
            raise self._unreachable(exc) from None
        records = [NodeRecord.parse(item) for item in items]
        with self._lock:
            names = {rec.name for rec in records}
            for stale in set(self._records) - names:
                del self._records[stale]
        for rec in records:
            self._remember(rec)
        return records

    def _record(self, node: str) -> NodeRecord | None:
        with self._lock:
            rec = self._records.get(node)
        if rec is not None:
            return rec if rec.matches(self.node_selector) else None
        return self._fetch(node)

    def _unknown(self, node: str) -> UnknownNodeError:
        with self._lock:
            known = [n for n, rec in self._records.items() if rec.matches(self.node_selector)]
        if not known:
            with contextlib.suppress(EscherError):
                known = [rec.name for rec in self._list_records()]
        eligible = f" matching node_selector {self.node_selector}" if self.node_selector else ""
        return UnknownNodeError(
            f"no node {node!r}{eligible} in the cluster.{did_you_mean(node, known)}"
        )

    def get_cluster_state(self) -> ClusterState:
        """Every eligible node: allocatable, and allocatable minus requests of bound pods."""
        self._ensure_open()
        records = self._list_records()
        return build_state(records, Usage.of(self._bound_pods()), self._names, self._clock.now())

    def _bound_pods(self) -> list[dict[str, Any]]:
        try:
            if self._all_namespaces:
                try:
                    return self._api.list_bound_pods()
                except ApiException as exc:
                    if exc.status != 403:
                        raise
                    log.warning(
                        "no permission to list pods in all namespaces; cluster state only "
                        "counts pods of namespace %s (see docs/kubernetes.md, RBAC)",
                        self.namespace,
                    )
                    self._all_namespaces = False
            pods, _ = self._api.list_pods(
                self.namespace,
                field_selector="spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
            )
            return pods
        except ApiException as exc:
            raise self._api_error(exc, "listing pods") from None
        except Exception as exc:
            raise self._unreachable(exc) from None

    # --- ephemeral resources ----------------------------------------------------------------
    def _set_resource(self, label: str, capacity: float, spec: NodeSpec) -> list[str]:
        self._ensure_open()
        targets = self._targets(spec)
        for node in targets:
            self._apply(node, label, capacity)
        return targets

    def _targets(self, spec: NodeSpec) -> list[str]:
        if spec.is_local:
            node = self.current_node_id()
            if node is None:
                raise NotInTaskError(
                    "node_spec=None means 'the node this task runs on', but this process is "
                    "not an escher pod (no NODE_NAME). Pass a node id or a resource vector."
                )
            if self._record(node) is None:
                raise self._unknown(node)
            return [node]
        if spec.node_id is not None:
            if self._record(spec.node_id) is None:
                raise self._unknown(spec.node_id)
            return [spec.node_id]
        return spec.select(self.get_cluster_state())

    def _node_lock(self, node: str) -> threading.Lock:
        with self._lock:
            return self._node_locks.setdefault(node, threading.Lock())

    def _apply(self, node: str, label: str, capacity: float) -> None:
        """Set (capacity > 0) or delete `label` on `node`, retrying on write conflicts."""
        resource = self._names.resource(label)
        annotation = self._names.annotation(label)
        with self._node_lock(node):
            rec = self._record(node)
            for attempt in range(self._conflict_retries + 1):
                if rec is None:
                    raise self._unknown(node)
                present = resource in rec.capacity or resource in rec.allocatable
                if present and annotation not in rec.annotations:
                    raise ReservedResourceError(
                        f"node {node!r} advertises {resource!r}, which escher did not create "
                        f"(no {annotation!r} annotation); escher never modifies it. Remove it "
                        "or pick another label."
                    )
                try:
                    if capacity > 0:
                        body = self._api.json_patch_node_status(
                            node, self._set_ops(rec, resource, annotation, capacity)
                        )
                    else:
                        body = self._api.merge_patch_node_status(
                            node, self._delete_body(rec, resource, annotation)
                        )
                except ApiException as exc:
                    if exc.status == 404:
                        raise self._unknown(node) from None
                    if exc.status not in (409, 422):
                        raise self._api_error(exc, f"patching node {node!r}") from None
                    tested = rec.resource_version
                    rec = self._fetch(node)
                    with self._lock:
                        self.conflicts += 1
                    if exc.status == 422 and rec is not None and rec.resource_version == tested:
                        raise BackendError(
                            f"the API rejected {resource}={capacity:g} on node {node!r}: "
                            f"{_message(exc)}"
                        ) from None
                    if attempt > 0:  # the first retry follows a fresh read: no wait
                        self._backoff(attempt)
                    continue
                except Exception as exc:
                    raise self._unreachable(exc) from None
                self._remember(NodeRecord.parse(body))
                return
        raise ConflictError(
            f"node {node!r} kept changing while escher set {resource!r}: "
            f"{self._conflict_retries + 1} attempts conflicted. Nothing was changed by the "
            "failed attempts; retry the call."
        )

    def _set_ops(
        self, rec: NodeRecord, resource: str, annotation: str, capacity: float
    ) -> list[dict[str, Any]]:
        value = format_quantity(resource, capacity)
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rec.resource_version}
        ]
        if annotation not in rec.annotations:
            if rec.has_annotations:
                path = f"/metadata/annotations/{_escape(annotation)}"
                ops.append({"op": "add", "path": path, "value": self.session})
            else:
                ops.append(
                    {"op": "add", "path": "/metadata/annotations",
                     "value": {annotation: self.session}}
                )  # fmt: skip
        for part in ("capacity", "allocatable"):
            section = rec.capacity if part == "capacity" else rec.allocatable
            if not section:
                ops.append({"op": "add", "path": f"/status/{part}", "value": {resource: value}})
            else:
                ops.append(
                    {"op": "add", "path": f"/status/{part}/{_escape(resource)}", "value": value}
                )
        return ops

    @staticmethod
    def _delete_body(rec: NodeRecord, resource: str, annotation: str) -> dict[str, Any]:
        return {
            "metadata": {
                "resourceVersion": rec.resource_version,
                "annotations": {annotation: None},
            },
            "status": {"capacity": {resource: None}, "allocatable": {resource: None}},
        }

    @staticmethod
    def _backoff(attempt: int) -> None:
        time.sleep(min(0.5, 0.005 * 2**attempt) * (0.5 + random.random()))

    # --- tasks --------------------------------------------------------------------------------
    def _launch(self, spec: TaskSpec) -> TaskRef:
        self._ensure_open()
        ref = TaskRef(spec, canceller=self._cancel)
        with self._lock:
            records = list(self._records.values())
        if not records or not physical_fits(records, spec.resources, self._names):
            records = self._list_records()
        if not physical_fits(records, spec.resources, self._names):
            reason = (
                f"no eligible node can ever fit {spec.resources.to_dict()}: node-defined "
                "resources exceed every node's allocatable"
            )
            ref.set_status(Status(StatusCode.INFEASIBLE, reason))
            ref.set_exception(task_error(reason + ". Ask for less or add a larger node.", ref,
                                 UnschedulableError))  # fmt: skip
            return ref
        task = _Task(ref, spec)
        with self._lock:
            self._by_ref[ref.id] = task
        self._tracker_started()
        self._create_pod(task)
        return ref

    def _pod_manifest(self, task: _Task, name: str) -> dict[str, Any]:
        spec = task.spec
        env: dict[str, str] = {}
        if spec.fn is not None:
            if not self.image:
                raise ConfigError(
                    "running a Python callable on Kubernetes needs an image with escher and "
                    "your code installed: set the kubernetes backend option image=... "
                    "(or ESCHER_KUBERNETES_IMAGE)."
                )
            image, command = self.image, list(RUNNER_COMMAND)
            env = {
                TASK_ENV: encode_task(spec.fn, spec.args, spec.kwargs),
                "ESCHER_TASK_NAME": spec.name,
                "ESCHER_K8S_NAMESPACE": self.namespace,
                "ESCHER_K8S_DOMAIN": self._names.domain,
                "ESCHER_K8S_NODE_SELECTOR": node_selector_env(self.node_selector),
            }
            if self.image:
                env["ESCHER_K8S_IMAGE"] = self.image
        else:
            image = spec.image or self.image or ""
            if not image:
                raise ConfigError("a container task needs TaskSpec.image (or the image option).")
            command = list(spec.command or [])
        return build_pod(
            name=name,
            namespace=self.namespace,
            spec=spec,
            names=self._names,
            session=self.session,
            task_id=task.ref.id,
            image=image,
            command=command,
            env=env,
            node_selector=self.node_selector,
            service_account=self._service_account,
            image_pull_secrets=self._image_pull_secrets,
        )

    def _create_pod(self, task: _Task) -> None:
        name = pod_name(task.spec.name)
        try:
            manifest = self._pod_manifest(task, name)
        except Exception:
            with self._lock:
                self._by_ref.pop(task.ref.id, None)
            raise
        with self._lock:
            self._tasks[name] = task
        with task.lock:
            task.pod, task.uid, task.running = name, "", False
        try:
            created = self._api.create_pod(self.namespace, manifest)
        except Exception as exc:
            with self._lock:
                self._tasks.pop(name, None)
            error = (
                self._api_error(exc, f"creating pod {name}")
                if isinstance(exc, ApiException)
                else self._unreachable(exc)
            )
            if task.ref.attempts == 0 and not task.ref.done():
                with self._lock:
                    self._by_ref.pop(task.ref.id, None)
                raise error from None
            task.ref.set_exception(error)
            return
        with task.lock:
            task.uid = str(created["metadata"].get("uid", ""))
        task.ref.set_status(Status(StatusCode.PENDING, f"pod {name} created"))

    def _tracker_started(self) -> None:
        with self._lock:
            if self._tracker is None:
                self._tracker = PodTracker(
                    self._api,
                    self.namespace,
                    f"{MANAGED_BY_KEY}={MANAGED_BY_VALUE},{self._names.session_label}="
                    f"{self.session}",
                    self._on_pod,
                )
            tracker = self._tracker
        tracker.start()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        with self._lock:
            task = self._tasks.get(name)
        if task is None:
            return
        ref = task.ref
        status = pod.get("status") or {}
        phase = status.get("phase")
        node = (pod.get("spec") or {}).get("nodeName")
        with task.lock:
            if task.pod != name or ref.done() or task.cancelled:
                return
            if kind == "DELETED" and phase not in ("Succeeded", "Failed"):
                self._forget(name)
                self._retry_or_fail(
                    task, f"its pod {name} was deleted before it finished", NodeDiedError
                )
                return
            if phase == "Pending":
                if node:
                    ref.set_status(Status(StatusCode.SCHEDULED, f"bound to {node}"))
                else:
                    condition = next(
                        (
                            c
                            for c in status.get("conditions") or []
                            if c.get("type") == "PodScheduled" and c.get("status") == "False"
                        ),
                        None,
                    )
                    if condition is not None:
                        reason = condition.get("message") or condition.get("reason") or ""
                        ref.set_status(Status(StatusCode.UNSCHEDULABLE, reason))
                return
            if phase in ("Running", "Succeeded", "Failed") and not task.running:
                task.running = True
                ref.set_running(node or "")
            if phase in ("Succeeded", "Failed"):
                self._forget(name)
                if not self._keep_pods and self._tracker is not None:
                    self._tracker.delete_later(name, str(meta.get("uid", "")))
                self._settle(task, pod, phase == "Succeeded")

    def _forget(self, name: str) -> None:
        with self._lock:
            self._tasks.pop(name, None)

    def _settle(self, task: _Task, pod: dict[str, Any], succeeded: bool) -> None:
        """Finish `task` from its terminated pod (called with task.lock held)."""
        ref, spec = task.ref, task.spec
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        terminated: dict[str, Any] = {}
        for cs in status.get("containerStatuses") or []:
            if cs.get("name") == CONTAINER:
                terminated = (cs.get("state") or {}).get("terminated") or {}
        message = terminated.get("message") or ""
        code = terminated.get("exitCode")
        if spec.fn is None:
            if succeeded:
                self._done(task, value=message)
            else:
                detail = f"exit code {code}" if code is not None else status.get("reason", "")
                said = message or status.get("message", "")
                self._retry_or_fail(
                    task,
                    f"container of pod {name} failed ({detail}): {said}",
                    TaskFailedError,
                    is_exception=True,
                )
            return
        try:
            ok, value = decode_outcome(message, spec.name)
        except Exception:
            why = status.get("reason") or ("exit code " + str(code) if code is not None else "")
            kind: type[TaskFailedError] = TaskFailedError
            if status.get("reason") in ("Evicted", "NodeLost", "Shutdown"):
                self._retry_or_fail(task, f"pod {name} was {why}", NodeDiedError)
                return
            ended = "Succeeded" if succeeded else "Failed"
            self._retry_or_fail(
                task,
                f"pod {name} ended ({ended}, {why or 'no reason'}) "
                f"without an escher result in its termination message: "
                f"{(message or status.get('message') or '')[:300]!r}",
                kind,
                is_exception=True,
            )
            return
        if ok:
            self._done(task, value=value)
        elif not self._closed and ref.retry(
            RetryCause.RAISED, f"it raised {type(value).__name__}; retrying"
        ):
            self._respawn(task)
        else:
            ref.set_exception(value)

    def _done(self, task: _Task, value: Any) -> None:
        task.ref.set_result(value)
        with self._lock:
            self._by_ref.pop(task.ref.id, None)

    def _retry_or_fail(
        self,
        task: _Task,
        message: str,
        kind: type[TaskFailedError] | type[NodeDiedError],
        is_exception: bool = False,
    ) -> None:
        cause = RetryCause.RAISED if is_exception else RetryCause.NODE_LOST
        if not self._closed and task.ref.retry(cause, message + "; retrying"):
            self._respawn(task)
            return
        task.ref.set_exception(task_error(message, task.ref, kind))
        with self._lock:
            self._by_ref.pop(task.ref.id, None)

    def _respawn(self, task: _Task) -> None:
        task.running = False
        threading.Thread(target=self._create_pod_quietly, args=(task,), daemon=True).start()

    def _create_pod_quietly(self, task: _Task) -> None:
        try:
            self._create_pod(task)
        except Exception as exc:  # _create_pod fails the ref itself after the first start
            task.ref.set_exception(exc)

    def _cancel(self, ref: TaskRef) -> bool:
        with self._lock:
            task = self._by_ref.get(ref.id)
        if task is None:
            return False
        with task.lock:
            if task.running or ref.done() or ref.started():
                return False
            task.cancelled = True
            name = task.pod
        try:
            if name:
                self._api.delete_pod(self.namespace, name)
        except Exception as exc:
            log.warning("could not delete cancelled pod %s: %s", name, exc)
        self._forget(name)
        with self._lock:
            self._by_ref.pop(ref.id, None)
        return ref.set_cancelled()

    def current_node_id(self) -> str | None:
        """The node of the calling task: its task context, or this pod's own node."""
        context = current_task()
        if context is not None and context.backend is self:
            return context.node_id
        return self._node_name

    # --- lifecycle ----------------------------------------------------------------------------
    def close(self) -> None:
        """Delete pods that have not started (their tasks are cancelled) and stop watching.

        Pods already running keep running; their handles fail, since nobody watches them.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            tasks = list(self._by_ref.values())
        for task in tasks:
            if not task.ref.done() and not self._cancel(task.ref) and not task.ref.done():
                task.ref.set_exception(
                    task_error(
                        f"the backend was closed while it ran; its pod {task.pod} keeps running",
                        task.ref,
                        TaskFailedError,
                    )
                )
        if self._tracker is not None:
            self._tracker.stop()
        self._clock.close()
        self._api.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise BackendError("this kubernetes backend is closed; call escher.init() again.")

    # --- errors -------------------------------------------------------------------------------
    def _api_error(self, exc: Exception, doing: str) -> BackendError:
        status = getattr(exc, "status", None)
        if status in (401, 403):
            return BackendError(
                f"{doing}: the API server refused ({status}): {_message(exc)}. Grant escher "
                "the RBAC rules in docs/kubernetes.md."
            )
        return BackendError(f"{doing} failed ({status}): {_message(exc)}")

    @staticmethod
    def _unreachable(exc: Exception) -> BackendUnavailableError:
        return BackendUnavailableError(f"the Kubernetes API server is unreachable: {exc}")


def _message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if body:
        try:
            return str(json.loads(body).get("message") or body)
        except (ValueError, AttributeError):
            return str(body)[:500]
    return str(getattr(exc, "reason", "") or exc)


__all__ = ["KubernetesBackend"]
