"""The pod lifecycle: one pod per attempt of a task, followed to its end.

`PodLifecycle` creates the pods, turns the pod watch's events into the task handles' states
(`TaskRef.set_running`, `set_result`, ...), asks `TaskRef.retry` (the one retry rule) after
a failed attempt and creates the next pod, cancels pods that have not started, and notices
nodes that are lost under running pods (deleted, or not Ready for a while).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from escher.backends.kubernetes._errors import as_escher
from escher.backends.kubernetes._gang import GatedGang
from escher.backends.kubernetes._gates import (
    GANG_RELEASE_ENV,
    GATE_NAME,
    RELEASED,
    pod_kept_gates,
)
from escher.backends.kubernetes._kube import ApiException, KubeApi
from escher.backends.kubernetes._names import MANAGED_BY_KEY, MANAGED_BY_VALUE, Names
from escher.backends.kubernetes._payload import TASK_ENV, decode_outcome, encode_task
from escher.backends.kubernetes._pipeline import Pipeline
from escher.backends.kubernetes._pods import (
    CONTAINER,
    RUNNER_COMMAND,
    build_pod,
    node_selector_env,
    pod_name,
)
from escher.backends.kubernetes._retry import patiently
from escher.backends.kubernetes._state import NodeRecord
from escher.backends.kubernetes._tracker import PodTracker
from escher.core.errors import ConfigError, EscherError, NodeDiedError, TaskFailedError
from escher.core.task import RetryCause, Status, StatusCode, TaskRef, TaskSpec, task_error

log = logging.getLogger("escher.kubernetes")

#: Pod status reasons that mean the node, not the task, failed.
NODE_REASONS = frozenset({"Evicted", "NodeLost", "Shutdown", "NodeShutdown", "Terminated"})


@dataclass
class PodOptions:
    """What every pod of a backend shares.

    Attributes:
        namespace: Namespace of the pods.
        session: The backend's session id (pod label).
        image: Image for Python callables (and container tasks without their own).
        node_selector: Node labels every pod requires.
        service_account: Service account of the pods.
        keep_pods: Keep finished pods instead of deleting them.
        image_pull_secrets: Secrets to pull the image with.
    """

    namespace: str
    session: str
    image: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    service_account: str | None = None
    keep_pods: bool = False
    image_pull_secrets: tuple[str, ...] = ()


@dataclass
class _Task:
    """Book-keeping for one launched task (it may go through several pods on retries)."""

    ref: TaskRef
    spec: TaskSpec
    pod: str = ""
    uid: str = ""
    node: str = ""
    running: bool = False
    cancelled: bool = False
    #: The pod the watch has shown (a create repeated after it landed must not make another).
    seen_pod: str = ""
    #: The gang placed through scheduling gates this task belongs to, if any.
    gang: _Gang | None = None
    #: Its pod runs but waits for the gang's release (the runner's barrier).
    held: bool = False
    #: The server kept the scheduling gate on its pod (1.26 with the feature off drops it).
    gated: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Gang:
    """A gang of pods placed through scheduling gates: its protocol and its members."""

    protocol: GatedGang
    tasks: list[_Task]
    release_key: str


def _unschedulable_reason(status: Mapping[str, Any]) -> str | None:
    """The scheduler's message of a pod's PodScheduled=False condition, if it has one."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return None


def _terminated(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The task container's `state.terminated` block ({} if absent)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        if cs.get("name") == CONTAINER:
            return dict((cs.get("state") or {}).get("terminated") or {})
    return {}


class PodLifecycle:
    """Pods for tasks, and task handles driven by the pods' events.

    Args:
        api: The JSON API wrapper.
        names: How labels are spelled in Kubernetes.
        options: What every pod shares.
        lost_nodes: Of some node names, those gone (None) or not Ready (their record).
        node_check_seconds: How often nodes under running pods are checked (0: never).
        node_lost_after: Seconds a node may stay not Ready before its pods count as lost.
        create_workers: Pod creates in flight at once.
        create_depth: Pod creates queued or in flight before `submit` waits.
        patience: Seconds calls retry while the API server gives no answer.
    """

    def __init__(
        self,
        api: KubeApi,
        names: Names,
        options: PodOptions,
        *,
        lost_nodes: Callable[[Iterable[str]], Mapping[str, NodeRecord | None]],
        node_check_seconds: float = 5.0,
        node_lost_after: float = 30.0,
        create_workers: int = 8,
        create_depth: int = 256,
        patience: float = 60.0,
    ) -> None:
        self._api = api
        self._names = names
        self.options = options
        self._lost_nodes = lost_nodes
        self._node_check_seconds = node_check_seconds
        self._node_lost_after = node_lost_after
        self._lock = threading.RLock()
        self._tasks: dict[str, _Task] = {}  # pod name -> task
        self._by_ref: dict[str, _Task] = {}
        self._tracker: PodTracker | None = None
        self._monitor: threading.Thread | None = None
        self._stop = threading.Event()
        self._not_ready_since: dict[str, float] = {}
        self._pipeline = Pipeline(create_workers, create_depth)
        self._patience = patience
        self.closed = False

    # --- launching ----------------------------------------------------------------------------
    def submit(self, ref: TaskRef, ready: Callable[[], None] | None = None) -> None:
        """Queue the first pod of `ref`'s task; the pipeline creates it.

        Args:
            ref: The task's handle.
            ready: Called by the create job before it creates the pod: waits for what the
                pod depends on (the label writes queued before the launch).

        Raises:
            ConfigError: a callable without an image, a container task without one.
            ValidationError: a request Kubernetes cannot express.
        """
        task = _Task(ref, ref.spec)
        name, manifest = self._next_pod(task)  # raises before anything is registered
        with self._lock:
            self._by_ref[ref.id] = task
        self._started()
        self._queue(task, name, manifest, ready)

    def _lane(self, spec: TaskSpec) -> tuple[str, ...] | None:
        """Pods asking for the same labels are created in launch order; others in any order."""
        labels = tuple(sorted(k for k in spec.resources if not self._names.is_physical_request(k)))
        return labels or None

    def _next_pod(self, task: _Task) -> tuple[str, dict[str, Any]]:
        name = pod_name(task.spec.name)
        return name, self._manifest(task, name)

    def _queue(
        self,
        task: _Task,
        name: str,
        manifest: dict[str, Any],
        ready: Callable[[], None] | None = None,
    ) -> None:
        with self._lock:
            self._tasks[name] = task
        with task.lock:
            task.pod, task.uid, task.node, task.running = name, "", "", False

        def create() -> None:
            if ready is not None:
                ready()
            self._create(task, name, manifest)

        self._pipeline.put(self._lane(task.spec), create)

    def _manifest(self, task: _Task, name: str) -> dict[str, Any]:
        spec, opts = task.spec, self.options
        env: dict[str, str] = {}
        if spec.fn is not None:
            if not opts.image:
                raise ConfigError(
                    "running a Python callable on Kubernetes needs an image with escher and "
                    "your code installed: set the kubernetes backend option image=... "
                    "(or ESCHER_KUBERNETES_IMAGE)."
                )
            image, command = opts.image, list(RUNNER_COMMAND)
            env = {
                TASK_ENV: encode_task(spec.fn, spec.args, spec.kwargs),
                "ESCHER_TASK_NAME": spec.name,
                "ESCHER_K8S_NAMESPACE": opts.namespace,
                "ESCHER_K8S_DOMAIN": self._names.domain,
                "ESCHER_K8S_NODE_SELECTOR": node_selector_env(opts.node_selector),
                "ESCHER_K8S_IMAGE": opts.image,
                "ESCHER_K8S_SESSION": opts.session,
            }
        else:
            image = spec.image or opts.image or ""
            if not image:
                raise ConfigError("a container task needs TaskSpec.image (or the image option).")
            command = list(spec.command or [])
        return build_pod(
            name=name,
            namespace=opts.namespace,
            spec=spec,
            names=self._names,
            session=opts.session,
            task_id=task.ref.id,
            image=image,
            command=command,
            env=env,
            node_selector=opts.node_selector,
            service_account=opts.service_account,
            image_pull_secrets=opts.image_pull_secrets,
        )

    def _create(self, task: _Task, name: str, manifest: dict[str, Any]) -> None:
        """Create one attempt's pod (a pipeline job); a refusal fails the task."""
        with task.lock:
            if task.cancelled or task.ref.done() or task.pod != name:
                self._forget(name)
                return
        try:
            created = patiently(
                lambda: self._create_or_adopt(task, name, manifest),
                self._patience,
                f"creating pod {name}",
            )
        except Exception as exc:
            self._forget(name)
            if task.ref.set_exception(as_escher(exc, f"creating pod {name}")):
                self._drop(task)
            return
        uid = str(created["metadata"].get("uid", ""))
        with task.lock:
            task.uid = uid if task.pod == name else task.uid
            cancelled = task.cancelled
            fresh = task.ref.status.code is StatusCode.PENDING  # no scheduler word yet
            if not cancelled and task.pod == name and not task.node and fresh:
                task.ref.set_status(Status(StatusCode.PENDING, f"pod {name} created"))
        if cancelled:  # cancelled while the create was in flight: the cancel missed it
            self._delete_quietly(name, uid)

    def _create_or_adopt(self, task: _Task, name: str, manifest: dict[str, Any]) -> dict[str, Any]:
        """Create the pod; if an earlier try created it already (409, or the watch showed
        it: it may even have finished and been deleted), that one is it."""
        with task.lock:
            if task.seen_pod == name or task.ref.done() or task.cancelled or task.pod != name:
                return {"metadata": {"name": name, "uid": task.uid}}
        namespace = self.options.namespace
        try:
            return self._api.create_pod(namespace, manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise
            pods, _ = self._api.list_pods(namespace, f"{self._names.domain}/task={task.ref.id}")
            mine = [p for p in pods if p["metadata"]["name"] == name]
            if not mine:
                raise
            return mine[0]

    def _delete_quietly(self, name: str, uid: str) -> None:
        if not name:  # no pod yet
            return
        try:
            patiently(
                lambda: self._api.delete_pod(self.options.namespace, name, uid),
                self._patience,
                f"deleting pod {name}",
            )
        except Exception as exc:
            log.warning("could not delete pod %s: %s", name, exc)

    def _started(self) -> None:
        with self._lock:
            if self._tracker is None:
                self._tracker = PodTracker(
                    self._api,
                    self.options.namespace,
                    f"{MANAGED_BY_KEY}={MANAGED_BY_VALUE},{self._names.session_label}="
                    f"{self.options.session}",
                    self._on_pod,
                    known=self._created_pods,
                    on_gone=self._on_gone,
                    patience=self._patience,
                )
                if self._node_check_seconds > 0:
                    self._monitor = threading.Thread(
                        target=self._watch_nodes, name="escher-k8s-nodes", daemon=True
                    )
                    self._monitor.start()
            tracker = self._tracker
        tracker.start()

    # --- pod events ---------------------------------------------------------------------------
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
        node = (pod.get("spec") or {}).get("nodeName") or ""
        gang = task.gang
        if (
            gang is not None
            and not gang.protocol.committed
            and kind != "DELETED"
            and phase in ("Pending", "Running")
        ):
            self._on_gang_member(task, name, node, phase)
            return
        with task.lock:
            if task.pod == name:
                task.seen_pod = name
                task.uid = task.uid or str(meta.get("uid", ""))
            if task.pod != name or ref.done() or task.cancelled:
                return
            task.node = node or task.node
            if kind == "DELETED" and phase not in ("Succeeded", "Failed"):
                self._forget(name)
                self._retry_or_fail(
                    task, f"its pod {name} was deleted before it finished", NodeDiedError
                )
                return
            if phase == "Pending":
                self._on_pending(ref, node, status)
                return
            if phase in ("Running", "Succeeded", "Failed") and not task.running:
                task.running = True
                ref.set_running(node)
            if phase in ("Succeeded", "Failed"):
                self._forget(name)
                if not self.options.keep_pods and self._tracker is not None:
                    self._tracker.delete_later(name, str(meta.get("uid", "")))
                self._settle(task, pod, phase == "Succeeded")

    @staticmethod
    def _on_pending(ref: TaskRef, node: str, status: Mapping[str, Any]) -> None:
        if node:
            ref.set_status(Status(StatusCode.SCHEDULED, f"bound to {node}"))
            return
        reason = _unschedulable_reason(status)
        if reason is not None:
            ref.set_status(Status(StatusCode.UNSCHEDULABLE, reason))

    def _created_pods(self) -> set[str]:
        """Names of the live pods whose create returned (they must be in a full list)."""
        with self._lock:
            return {name for name, task in self._tasks.items() if task.uid and task.pod == name}

    def _on_gone(self, before: set[str], present: set[str]) -> None:
        """Pods that vanished while the watch could not see: as if deleted then."""
        for name in sorted(before - present):
            self._on_pod("DELETED", {"metadata": {"name": name}, "status": {}})

    def _forget(self, name: str) -> None:
        with self._lock:
            self._tasks.pop(name, None)

    def _settle(self, task: _Task, pod: dict[str, Any], succeeded: bool) -> None:
        """Finish `task` from its terminated pod (called with task.lock held)."""
        if task.spec.fn is None:
            self._settle_container(task, pod, succeeded)
            return
        name = pod["metadata"]["name"]
        status = pod.get("status") or {}
        terminated = _terminated(pod)
        message = terminated.get("message") or ""
        try:
            ok, value = decode_outcome(message, task.spec.name)
        except Exception:
            code = terminated.get("exitCode")
            why = status.get("reason") or ("exit code " + str(code) if code is not None else "")
            if status.get("reason") in NODE_REASONS:
                self._retry_or_fail(task, f"pod {name} was {why}", NodeDiedError)
                return
            ended = "Succeeded" if succeeded else "Failed"
            self._retry_or_fail(
                task,
                f"pod {name} ended ({ended}, {why or 'no reason'}) "
                f"without an escher result in its termination message: "
                f"{(message or status.get('message') or '')[:300]!r}",
                TaskFailedError,
                is_exception=True,
            )
            return
        if ok:
            self._done(task, value)
        elif not self.closed and task.ref.retry(
            RetryCause.RAISED, f"it raised {type(value).__name__}; retrying"
        ):
            self._respawn(task)
        else:
            task.ref.set_exception(value)
            self._drop(task)

    def _settle_container(self, task: _Task, pod: dict[str, Any], succeeded: bool) -> None:
        terminated = _terminated(pod)
        message = terminated.get("message") or ""
        if succeeded:
            self._done(task, message)
            return
        status = pod.get("status") or {}
        code = terminated.get("exitCode")
        detail = f"exit code {code}" if code is not None else status.get("reason", "")
        said = message or status.get("message", "")
        self._retry_or_fail(
            task,
            f"container of pod {pod['metadata']['name']} failed ({detail}): {said}",
            TaskFailedError,
            is_exception=True,
        )

    def _done(self, task: _Task, value: Any) -> None:
        task.ref.set_result(value)
        self._drop(task)

    def _drop(self, task: _Task) -> None:
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
        if not self.closed and task.ref.retry(cause, message + "; retrying"):
            self._respawn(task)
            return
        task.ref.set_exception(task_error(message, task.ref, kind))
        self._drop(task)

    def _respawn(self, task: _Task) -> None:
        """Queue the next attempt's pod (called with task.lock held)."""
        task.running = False
        try:
            name, manifest = self._next_pod(task)
        except EscherError as exc:
            task.ref.set_exception(exc)
            self._drop(task)
            return
        with self._lock:
            self._tasks[name] = task
        task.pod, task.uid, task.node = name, "", ""
        self._pipeline.put(self._lane(task.spec), lambda: self._create(task, name, manifest))

    # --- gangs through scheduling gates ----------------------------------------------------
    def submit_gang(self, refs: list[TaskRef], timeout: float) -> None:
        """Place `refs`' tasks together through scheduling gates (see `_gang.GatedGang`).

        Raises:
            ConfigError: a member cannot be a pod (e.g. a callable without an image).
            EscherError: the first attempt's pods could not be created (none is left).
        """
        tasks = [_Task(ref, ref.spec) for ref in refs]
        for task in tasks:
            self._manifest(task, "check")  # raises before anything exists
        key = f"{self._names.domain}/gang-{refs[0].id}"
        gang: _Gang | None = None

        def create(number: int) -> list[str]:
            assert gang is not None
            return [self._create_gated(task, gang) for task in gang.tasks]

        protocol = GatedGang(
            refs[0].id,
            len(tasks),
            create=create,
            release=self._ungate,
            commit=lambda name: self._commit_member(name, key),
            discard=self._discard,
            on_status=lambda message: self._gang_status(tasks, message),
            timeout=timeout,
        )
        gang = _Gang(protocol, tasks, key)
        with self._lock:
            for task in tasks:
                task.gang = gang
                self._by_ref[task.ref.id] = task
        self._started()
        try:
            protocol.start()
        except Exception as exc:
            protocol.close()
            for task in tasks:
                self._discard(task.pod)
                self._drop(task)
            raise as_escher(exc, "creating the gang's pods") from None

    def _create_gated(self, task: _Task, gang: _Gang) -> str:
        """Create one member's pod with escher's gate (the scheduler leaves it alone)."""
        name = pod_name(task.spec.name)
        manifest = self._manifest(task, name)
        manifest["spec"]["schedulingGates"] = [{"name": GATE_NAME}]
        env = manifest["spec"]["containers"][0].setdefault("env", [])
        env.append({"name": GANG_RELEASE_ENV, "value": gang.release_key})
        with self._lock:
            self._tasks[name] = task
        with task.lock:
            task.pod, task.uid, task.node, task.running, task.held = name, "", "", False, False
        created = patiently(
            lambda: self._create_or_adopt(task, name, manifest),
            self._patience,
            f"creating pod {name}",
        )
        with task.lock:
            task.uid = str(created["metadata"].get("uid", ""))
            task.gated = pod_kept_gates(created)
        return name

    def _ungate(self, name: str) -> None:
        with self._lock:
            task = self._tasks.get(name)
        if task is None or not task.gated:  # a server that dropped the gate: nothing to remove
            return
        ops = [{"op": "remove", "path": "/spec/schedulingGates"}]
        namespace = self.options.namespace
        patiently(
            lambda: self._api.json_patch_pod(namespace, name, ops),
            self._patience,
            f"releasing pod {name}",
        )

    def _commit_member(self, name: str, key: str) -> None:
        """Let the member's runner start its task; its handle is running from now on."""
        body = {"metadata": {"annotations": {key: RELEASED}}}
        namespace = self.options.namespace
        patiently(
            lambda: self._api.merge_patch_pod(namespace, name, body),
            self._patience,
            f"committing pod {name}",
        )
        with self._lock:
            task = self._tasks.get(name)
        if task is None:
            return
        with task.lock:
            if task.held and not task.running and not task.ref.done():
                task.running = True
                task.ref.set_running(task.node)

    def _discard(self, name: str) -> None:
        """Delete a pod of a rolled-back attempt; its task waits for the next attempt."""
        with self._lock:
            task = self._tasks.pop(name, None)
        uid = ""
        if task is not None:
            with task.lock:
                uid = task.uid if task.pod == name else ""
        self._delete_quietly(name, uid)

    @staticmethod
    def _gang_status(tasks: list[_Task], message: str) -> None:
        for task in tasks:
            if not task.running and not task.ref.done():
                task.ref.set_status(Status(StatusCode.PENDING, message))

    def _on_gang_member(self, task: _Task, name: str, node: str, phase: str) -> None:
        """A member of a gang not yet committed was seen bound or running (its runner waits
        for the release): tell the protocol; the handle is not running yet."""
        with task.lock:
            if task.pod != name or task.ref.done() or task.cancelled:
                return
            task.seen_pod = name
            task.node = node or task.node
            task.held = task.held or phase == "Running"
            bound = task.node
        if bound and task.gang is not None:
            task.gang.protocol.on_bound(name, bound)

    def _cancel_gang(self, gang: _Gang) -> bool:
        """Cancel every member of a gang stopped before its commit (none ran anything)."""
        for task in gang.tasks:
            with task.lock:
                task.cancelled = True
                name, uid = task.pod, task.uid
            self._forget(name)
            self._delete_quietly(name, uid)
            self._drop(task)
            task.ref.set_cancelled()
        return True

    # --- node loss ----------------------------------------------------------------------------
    def _watch_nodes(self) -> None:
        while not self._stop.wait(self._node_check_seconds):
            with self._lock:
                tasks = list(self._by_ref.values())
            nodes = {task.node for task in tasks if task.node}
            try:
                lost = self._lost_nodes(nodes) if nodes else {}
            except EscherError as exc:
                log.warning("checking the nodes of running pods failed: %s", exc)
                continue
            now = time.monotonic()
            for node in set(self._not_ready_since) - set(lost):
                del self._not_ready_since[node]
            for node, rec in lost.items():
                if rec is None:
                    self.lose_node(node, "was deleted")
                    continue
                since = self._not_ready_since.setdefault(node, now)
                if now - since >= self._node_lost_after:
                    self.lose_node(node, f"is not Ready for {now - since:.0f}s")

    def lose_node(self, node: str, why: str) -> int:
        """Count every pod of this backend on `node` as lost: delete it, retry or fail its task.

        Returns:
            How many tasks it affected.
        """
        with self._lock:
            tasks = [task for task in self._by_ref.values() if task.node == node]
        affected = 0
        for task in tasks:
            with task.lock:
                if task.node != node or task.ref.done() or task.cancelled:
                    continue
                name, uid = task.pod, task.uid
                self._forget(name)
                if self._tracker is not None:
                    self._tracker.delete_later(name, uid)
                self._retry_or_fail(
                    task, f"its node {node} {why} while pod {name} was on it", NodeDiedError
                )
                affected += 1
        return affected

    # --- cancel, close ------------------------------------------------------------------------
    def cancel(self, ref: TaskRef) -> bool:
        """Delete the pod of a task that has not started; True if it will never run."""
        with self._lock:
            task = self._by_ref.get(ref.id)
        if task is None:
            return False
        if task.gang is not None and task.gang.protocol.close():
            return self._cancel_gang(task.gang)
        with task.lock:
            if task.running or ref.done() or ref.started():
                return False
            task.cancelled = True
            name = task.pod
        self._delete_quietly(name, "")
        self._forget(name)
        self._drop(task)
        return ref.set_cancelled()

    def pod_of(self, ref: TaskRef) -> tuple[str, str, str] | None:
        """(pod name, uid, node) of the current attempt of a live task, else None."""
        with self._lock:
            task = self._by_ref.get(ref.id)
        if task is None:
            return None
        with task.lock:
            return task.pod, task.uid, task.node

    def watch_stats(self) -> dict[str, int]:
        """How often the pod watch listed (first list and relists after 410 Gone) and resumed."""
        tracker = self._tracker
        if tracker is None:
            return {"lists": 0, "resumes": 0}
        return {"lists": tracker.lists, "resumes": tracker.resumes}

    def close(self) -> None:
        """Cancel tasks whose pods have not started, fail the running ones, stop watching.

        Pods already running keep running; their handles fail, since nobody watches them.
        """
        with self._lock:
            if self.closed:
                return
            self.closed = True
            tasks = list(self._by_ref.values())
        for task in tasks:
            if not task.ref.done() and not self.cancel(task.ref) and not task.ref.done():
                task.ref.set_exception(
                    task_error(
                        f"the backend was closed while it ran; its pod {task.pod} keeps running",
                        task.ref,
                        TaskFailedError,
                    )
                )
        self._pipeline.close()
        self._stop.set()
        if self._tracker is not None:
            self._tracker.stop()
        if self._monitor is not None:
            self._monitor.join(5.0)
